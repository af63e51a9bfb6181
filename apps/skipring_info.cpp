// skipring_info: prints the version, every SKIPRING_* parameter with its current value, and
// the build's optional features. Exits non-zero (naming the variable) on a bad value.
// --algo: the cost model's parameters, auto's choice per size and the algorithms.
// --topology: the topology gathered at communicator setup instead (per rank host, package,
// NUMA node, cores, GPUs/NICs; the hosts; the ring order and its inter-host hops; per rank its
// GPU and the NIC chosen for it (UCX device, distance class); hier's inter-host leaders).
// --markdown / --markdown-simgrid: README.md's parameter tables (no MPI; the readme_params
// test checks that the README holds them).
#include <fmt/format.h>
#include <mpi.h>
#include <skipring/skipring.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "apps/app_version.h"
#include "collectives/algorithms.h"
#include "collectives/ring_allreduce.h"
#include "runtime/api_internal.h"
#include "runtime/config.h"
#include "runtime/memtype.h"
#include "runtime/params.h"
#include "runtime/topology_gather.h"
#include "topology/affinity.h"

namespace {

std::string join(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

// Per rank its GPU and NIC with the reason, then hier's local order per host (leaders first).
void print_affinity(const skipring::Topology& topo) {
  using skipring::GpuChoice;
  using skipring::NicChoice;
  fmt::print(
      "gpu / nic (gpu: SKIPRING_GPU, else local rank mod the host's GPUs; nic: nearest to "
      "the gpu, else to the rank's cpus; rdma nics first):\n");
  fmt::print("{:<5} {:<28} {:<16} {}\n", "rank", "gpu", "nic (ucx)", "why");
  for (int r = 0; r < topo.size(); ++r) {
    const skipring::RankRecord& rec = topo.records[r];
    const GpuChoice g = skipring::rank_gpu(topo, r);
    const NicChoice n = skipring::rank_nic(topo, r);
    const std::string gpu = g.device < 0
                                ? std::string("-")
                                : fmt::format("{} {}{}", g.index, rec.devices[g.device].name,
                                              g.requested ? " (SKIPRING_GPU)" : "");
    std::string nic = "-", why = "the host lists no NIC";
    if (n.device >= 0) {
      nic = skipring::ucx_device_name(rec.devices[n.device]);
      why = fmt::format("{} as its {}", skipring::pci_distance_name(n.distance),
                        n.from_gpu ? "gpu" : "cpus");
      if (n.tied > 1) why += fmt::format(" ({} nics tie: spread)", n.tied);
    }
    fmt::print("{:<5} {:<28} {:<16} {}\n", r, gpu, nic, why);
  }
  fmt::print("hier local order (* = leader: gpu behind the same pci switch as its nic):\n");
  for (int h = 0; h < topo.num_hosts(); ++h) {
    std::string ranks;
    for (int r : topo.hier_groups[h]) {
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r) +
               (skipring::is_hier_leader(topo, r) ? "*" : "");
    }
    fmt::print("  host {} {}: {}\n", h, topo.host_names[h], ranks);
  }
}

// Collective over MPI_COMM_WORLD (the same gather a communicator does at setup); prints on
// rank 0. Returns false, with the reason on rank 0's stderr, when it fails.
bool print_topology(const skipring::Config& cfg, int rank) {
  skipring::Topology topo;
  std::string error;
  const skipring::SteadyClock clock;
  const skipring::Status st = skipring::gather_topology(
      MPI_COMM_WORLD, cfg.host_map, skipring::wait_policy(cfg, &clock), &topo, &error);
  if (!skipring::ok(st)) {
    if (rank == 0) std::fprintf(stderr, "skipring_info: %s\n", error.c_str());
    return false;
  }
  if (rank != 0) return true;
  fmt::print("topology: {} ranks on {} hosts (hosts from {})\n", topo.size(), topo.num_hosts(),
             topo.from_host_map ? "SKIPRING_HOST_MAP=" + cfg.host_map : std::string("hostnames"));
  fmt::print("{:<5} {:<16} {:<16} {:<4} {:<4} {:<18} {}\n", "rank", "host", "hostname", "pkg",
             "numa", "cores", "gpus / nics");
  for (int r = 0; r < topo.size(); ++r) {
    const skipring::RankRecord& rec = topo.records[r];
    std::string cores = skipring::core_list(rec);
    if (rec.num_cores >= 0) {
      cores += fmt::format(" ({}c/{}t of {})", rec.num_cores, rec.num_pus, rec.machine_cores);
    }
    std::string devices;
    for (int i = 0; i < rec.num_devices; ++i) {
      devices += (i ? "; " : "") + skipring::device_string(rec.devices[i]);
    }
    if (rec.devices_dropped > 0) devices += fmt::format("; +{} more", rec.devices_dropped);
    if (devices.empty()) devices = "-";
    fmt::print("{:<5} {:<16} {:<16} {:<4} {:<4} {:<18} {}\n", r,
               fmt::format("{}:{}", topo.host_of(r), topo.host_names[topo.host_of(r)]),
               rec.host_name(), skipring::place_string(rec.package),
               skipring::place_string(rec.numa), cores, devices);
  }
  fmt::print("hosts:\n");
  for (int h = 0; h < topo.num_hosts(); ++h) {
    fmt::print("  host {} {}: ranks {}\n", h, topo.host_names[h], join(topo.host_ranks[h], ","));
  }
  fmt::print("ring: {}\n", join(topo.ring, " "));
  fmt::print("inter-host hops: {} (hosts: {})\n", topo.inter_host_hops, topo.num_hosts());
  // What cross_host_segment_bytes (collectives/ring_allreduce.h) makes of the links.
  if (topo.num_hosts() > 1) {
    const bool sockets = skipring::hosts_joined_by_sockets(topo);
    const bool mpi = cfg.transport == skipring::TransportKind::kMpi;
    fmt::print("links between hosts: {}\n",
               sockets
                   ? (mpi ? fmt::format("TCP sockets (a host without an RDMA NIC): the ring's "
                                        "segments across hosts {} KiB for chunks under {} KiB",
                                        skipring::kSocketSegmentBytes / 1024,
                                        skipring::kCrossHostMinSegments * cfg.segment_bytes / 1024)
                          : std::string("TCP sockets, carried by UCX (SKIPRING_TRANSPORT=ucx)"))
                   : std::string("RDMA NICs on every host"));
  }
  print_affinity(topo);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"skipring_info: configuration and build information"};
  app.set_version_flag("--version", skipring_apps::version_text("skipring_info"),
                       "print the version (and git describe of the source) and exit");
  bool names_only = false;
  bool topology = false;
  bool algo = false;
  app.add_flag("--names", names_only, "print only the parameter names");
  app.add_flag("--algo", algo,
               "measure the cost model's parameters and print auto's algorithm per size");
  app.add_flag("--topology", topology,
               "print the topology (hosts, packages, NUMA, cores, GPUs/NICs) and the ring order");
  bool markdown = false;
  bool markdown_simgrid = false;
  auto* md = app.add_flag("--markdown", markdown,
                          "print README.md's table of the SKIPRING_* parameters (Markdown)");
  app.add_flag("--markdown-simgrid", markdown_simgrid,
               "print README.md's table of the SimGrid-only parameters (Markdown)")
      ->excludes(md);
  CLI11_PARSE(app, argc, argv);
  if (markdown || markdown_simgrid) {
    fmt::print("{}", skipring::params_markdown(markdown ? skipring::ParamGroup::kGeneral
                                                        : skipring::ParamGroup::kSimGrid));
    return 0;
  }

  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rc = skipring_init();  // prints the offending variable on error
  skipring::Config cfg = skipring::global_config();
  if (algo) {
    std::string table;
    const int arc = rc == MPI_SUCCESS
                        ? skipring::describe_selection(MPI_COMM_WORLD, size_t{256} << 20, &table)
                        : rc;
    if (rank == 0 && arc == MPI_SUCCESS) {
      fmt::print("{}", table);
      // The algorithm table's rows (collectives/algorithms.h): what SKIPRING_ALGO accepts.
      fmt::print("algorithms (SKIPRING_ALGO):\n");
      for (const skipring::AlgoRow& r : skipring::algo_table()) {
        fmt::print("  {:<13} {}\n", r.name, r.description);
      }
    }
    MPI_Finalize();
    return arc == MPI_SUCCESS ? 0 : 1;
  }
  if (topology) {
    // A bad SKIPRING_* value was reported by skipring_init: nothing to gather with.
    const bool printed = rc == MPI_SUCCESS && print_topology(cfg, rank);
    MPI_Finalize();
    return printed ? 0 : 1;
  }
  if (rank == 0) {
    if (names_only) {
      for (const auto& p : skipring::describe_params(cfg, skipring::process_env())) {
        std::printf("%s\n", p.name.c_str());
      }
    } else {
      fmt::print("skipring {}{}  ranks={}\n{}\n", SKIPRING_VERSION_STRING,
                 SKIPRING_GIT_DESCRIBE[0] ? fmt::format(" (git {})", SKIPRING_GIT_DESCRIBE) : "",
                 size, skipring::gpu_support_summary());
      fmt::print("{:<26} {:<10} {:<6} {:<10} {}\n", "parameter", "value", "type", "default",
                 "accepts / meaning");
      for (const auto& p : skipring::describe_params(cfg, skipring::process_env())) {
        fmt::print("{:<26} {:<10} {:<6} {:<10} {}\n{:<55}{}\n", p.name,
                   p.current_value + (p.set_in_env ? "*" : ""), p.type, p.default_value, p.accepts,
                   "", p.help);
      }
      fmt::print("(* = set in the environment)\n");
    }
  }
  MPI_Finalize();
  return rc == MPI_SUCCESS ? 0 : 1;
}
