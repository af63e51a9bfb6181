// GPU-NIC affinity: the rank's GPU, its NIC, the UCX device string, hier's leaders
// (affinity.h).
#include "topology/affinity.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace skipring {
namespace {

// Positions in rec.devices of the devices `keep` accepts, by PCI bus id (none last), name.
template <typename Keep>
std::vector<int> sorted_devices(const RankRecord& rec, Keep keep) {
  std::vector<int> out;
  for (int i = 0; i < rec.num_devices; ++i) {
    if (keep(rec.devices[i])) out.push_back(i);
  }
  auto key = [&rec](int i) {
    const TopoDevice& d = rec.devices[i];
    return std::make_tuple(d.pci_bus[0] == '\0', std::string(d.pci_bus), std::string(d.name), i);
  };
  std::sort(out.begin(), out.end(), [&](int a, int b) { return key(a) < key(b); });
  return out;
}

bool same_known(int32_t a, int32_t b) { return a >= 0 && a == b; }

bool same_text(const char* a, const char* b) { return a[0] != '\0' && std::strcmp(a, b) == 0; }

int local_rank(const Topology& t, int rank) {
  const std::vector<int>& g = t.host_ranks[t.host_of(rank)];
  return static_cast<int>(std::find(g.begin(), g.end(), rank) - g.begin());
}

// The best distance from `from` over the candidates, and the candidates at it (bus order).
template <typename Dist>
std::pair<PciDistance, std::vector<int>> nearest(const std::vector<int>& candidates, Dist dist) {
  PciDistance best = PciDistance::kSystem;
  for (int c : candidates) best = std::min(best, dist(c));
  std::vector<int> tied;
  for (int c : candidates) {
    if (dist(c) == best) tied.push_back(c);
  }
  return {best, tied};
}

}  // namespace

int32_t parse_gpu_request(const std::string& text) {
  if (text.empty()) return kGpuNotRequested;
  if (text.size() > 4) return kGpuRequestBad;
  int32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return kGpuRequestBad;
    v = v * 10 + (c - '0');
  }
  return v <= 1023 ? v : kGpuRequestBad;
}

std::vector<int> host_gpus(const RankRecord& rec) {
  return sorted_devices(rec, [](const TopoDevice& d) {
    return d.is(TopoDeviceKind::kGpu) && !(d.flags & kTopoDevDisplay);
  });
}

std::vector<int> candidate_nics(const RankRecord& rec) {
  std::vector<int> rdma = sorted_devices(rec, [](const TopoDevice& d) {
    return d.is(TopoDeviceKind::kNic) && (d.flags & kTopoDevRdma);
  });
  if (!rdma.empty()) return rdma;
  return sorted_devices(rec, [](const TopoDevice& d) { return d.is(TopoDeviceKind::kNic); });
}

bool hosts_joined_by_sockets(const Topology& t) {
  if (t.num_hosts() <= 1) return false;
  for (const std::vector<int>& ranks : t.host_ranks) {
    bool rdma = false;
    for (int r : ranks) {
      const RankRecord& rec = t.records[static_cast<size_t>(r)];
      for (int32_t i = 0; i < rec.num_devices && !rdma; ++i) {
        const TopoDevice& d = rec.devices[i];
        rdma = d.is(TopoDeviceKind::kNic) && (d.flags & kTopoDevRdma) != 0;
      }
    }
    if (!rdma) return true;
  }
  return false;
}

const char* pci_distance_name(PciDistance d) {
  switch (d) {
    case PciDistance::kSwitch:
      return "same PCI switch";
    case PciDistance::kHostBridge:
      return "same host bridge";
    case PciDistance::kNuma:
      return "same NUMA node";
    case PciDistance::kPackage:
      return "same package";
    case PciDistance::kSystem:
      break;
  }
  return "system";
}

PciDistance pci_distance(const TopoDevice& a, const TopoDevice& b) {
  if (same_text(a.pci_switch, b.pci_switch)) return PciDistance::kSwitch;
  if (same_text(a.pci_root, b.pci_root)) return PciDistance::kHostBridge;
  if (same_known(a.numa, b.numa)) return PciDistance::kNuma;
  if (same_known(a.package, b.package)) return PciDistance::kPackage;
  return PciDistance::kSystem;
}

PciDistance cpu_distance(const RankRecord& rec, const TopoDevice& dev) {
  if (same_known(rec.numa, dev.numa)) return PciDistance::kNuma;
  if (same_known(rec.package, dev.package)) return PciDistance::kPackage;
  return PciDistance::kSystem;
}

GpuChoice rank_gpu(const Topology& t, int rank) {
  GpuChoice c;
  const RankRecord& rec = t.records[rank];
  const std::vector<int> gpus = host_gpus(rec);
  if (gpus.empty()) return c;
  if (rec.gpu_request >= 0) {
    if (rec.gpu_request >= static_cast<int32_t>(gpus.size())) return c;  // check_gpu_request
    c.index = rec.gpu_request;
    c.requested = true;
  } else {
    c.index = local_rank(t, rank) % static_cast<int>(gpus.size());
  }
  c.device = gpus[c.index];
  return c;
}

bool check_gpu_request(const Topology& t, int rank, std::string* error) {
  const RankRecord& rec = t.records[rank];
  if (rec.gpu_request == kGpuNotRequested) return true;
  const std::string who = std::string(kGpuEnvVar) + " on rank " + std::to_string(rank) + " (host " +
                          t.host_names[t.host_of(rank)] + ")";
  if (rec.gpu_request == kGpuRequestBad) {
    *error = who + " is not a GPU index (0, 1, ...)";
    return false;
  }
  const size_t gpus = host_gpus(rec).size();
  if (static_cast<size_t>(rec.gpu_request) >= gpus) {
    *error = std::string(kGpuEnvVar) + "=" + std::to_string(rec.gpu_request) + " on rank " +
             std::to_string(rank) + " (host " + t.host_names[t.host_of(rank)] + "): " +
             (gpus == 0 ? std::string("the host has no GPU")
                        : "the host has " + std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s") +
                              " (0.." + std::to_string(gpus - 1) + ")");
    return false;
  }
  return true;
}

NicChoice rank_nic(const Topology& t, int rank) {
  NicChoice c;
  const RankRecord& rec = t.records[rank];
  const std::vector<int> nics = candidate_nics(rec);
  if (nics.empty()) return c;
  const GpuChoice gpu = rank_gpu(t, rank);
  PciDistance best;
  std::vector<int> tied;
  int k = 0;  // spreading index among the GPUs (ranks) that see the same tied set
  if (gpu.device >= 0) {
    auto from_gpu = [&rec](int g) {
      return [&rec, g](int n) { return pci_distance(rec.devices[g], rec.devices[n]); };
    };
    std::tie(best, tied) = nearest(nics, from_gpu(gpu.device));
    const std::vector<int> gpus = host_gpus(rec);
    for (int i = 0; i < gpu.index; ++i) {
      if (nearest(nics, from_gpu(gpus[i])) == std::make_pair(best, tied)) ++k;
    }
    c.from_gpu = true;
  } else {
    auto from_cpus = [](const RankRecord& r) {
      return [&r](int n) { return cpu_distance(r, r.devices[n]); };
    };
    std::tie(best, tied) = nearest(nics, from_cpus(rec));
    // Earlier GPU-less ranks of the host with the same NICs at the same best distance (the
    // ranks of one host list the same devices; their bindings may differ).
    for (int other : t.host_ranks[t.host_of(rank)]) {
      if (other == rank) break;
      const RankRecord& o = t.records[other];
      if (candidate_nics(o) == nics && rank_gpu(t, other).device < 0 &&
          nearest(nics, from_cpus(o)) == std::make_pair(best, tied))
        ++k;
    }
  }
  c.distance = best;
  c.tied = static_cast<int>(tied.size());
  c.device = tied[static_cast<size_t>(k) % tied.size()];
  return c;
}

std::string ucx_device_name(const TopoDevice& nic) {
  if (nic.fabric[0] != '\0') {
    return std::string(nic.fabric) + ":" + std::to_string(nic.port > 0 ? nic.port : 1);
  }
  const std::string names(nic.name);
  return names.substr(0, names.find('/'));
}

std::string preferred_ucx_net_device(const Topology& t, int rank) {
  if (rank < 0 || rank >= t.size()) return std::string();
  const NicChoice nic = rank_nic(t, rank);
  if (nic.device < 0) return std::string();
  return ucx_device_name(t.records[rank].devices[nic.device]);
}

bool is_hier_leader(const Topology& t, int rank) {
  if (rank_gpu(t, rank).device < 0) return false;  // (GPU-less hosts: no NIC search)
  const NicChoice nic = rank_nic(t, rank);
  return nic.from_gpu && nic.device >= 0 && nic.distance == PciDistance::kSwitch;
}

std::vector<std::vector<int>> hier_local_groups(const Topology& t) {
  std::vector<std::vector<int>> groups = t.host_ranks;
  for (std::vector<int>& g : groups) {
    std::stable_partition(g.begin(), g.end(), [&t](int r) { return is_hier_leader(t, r); });
  }
  return groups;
}

}  // namespace skipring
