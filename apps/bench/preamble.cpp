// skipring_bench report: the header lines above the table.
#include <fmt/core.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "apps/app_version.h"
#include "apps/bench/report.h"
#include "skipring/skipring.h"

extern char** environ;

namespace skipring_bench {
namespace {

// The header lines that explain the straggler / overhead table.
std::vector<std::string> interleaved_preamble(const Context& ctx) {
  const Options& o = ctx.opts;
  std::vector<std::string> lines;
  std::string names;
  for (const Variant v : o.variants)
    names += std::string(names.empty() ? "" : ", ") + variant_name(v);
  lines.push_back(
      fmt::format(" mode: {}; variants {} interleaved per iteration (each iteration "
                  "runs every variant in turn)",
                  o.straggler ? "straggler" : "overhead (no straggler)", names));
  lines.push_back(
      "   skip = skipring, skip-ahead on; ring = skipring, skip-ahead off (plain "
      "ring); mpi = PMPI_Allreduce");
  if (o.straggler) {
    lines.push_back(
        o.late_rank >= 0
            ? fmt::format(" late arrival: rank {} sleeps {} ms after the barrier before {} "
                          "(all variants; emulated by the benchmark)",
                          o.late_rank, o.late_ms,
                          o.late_every > 1
                              ? fmt::format("every timed call, each after {} untimed calls "
                                            "nobody is late for (--late-every {})",
                                            o.late_every - 1, o.late_every)
                              : std::string("every call"))
            : std::string(" late arrival: none (no --late-rank)"));
    if (o.inject_given) {
      lines.push_back(
          fmt::format(" inject: \"{}\" (inside skipring: skip and ring variants "
                      "only; PMPI_Allreduce cannot be slowed per step)",
                      o.inject));
      if (o.inject.find("arrive") != std::string::npos) {
        lines.push_back(
            "   note: at=arrive delays happen inside skipring_allreduce, after t_enter: "
            "they count in 'after'; --late-rank is the fair way to arrive late");
      }
    } else {
      lines.push_back(" inject: none (no --inject; SKIPRING_INJECT below still applies if set)");
    }
  }
  lines.push_back(
      " per call: barrier, late sleep, t_enter, call, t_exit (steady_clock on every "
      "rank)");
  lines.push_back(
      "   after = max_rank t_exit - max_rank t_enter: the collective's time after the "
      "last rank arrived");
  lines.push_back("   total = max_rank t_exit - min_rank t_enter: first arrival to last return");
  lines.push_back("   p50/p99 = nearest-rank percentiles over iterations");
  lines.push_back(
      "   ratio = p50 after of skip / p50 after of ring (or mpi); < 1: skip-ahead "
      "faster");
  lines.push_back(
      "   skip per iter = skip-ahead decisions (skips) and late pieces of the skip "
      "variant, all ranks, per iteration");
  lines.push_back("   #wrong = wrong output (and changed input) elements per variant, all ranks");
  lines.push_back(ctx.hosts > 1
                      ? fmt::format(" clocks: ranks on {} hosts; offsets to rank 0's clock "
                                    "estimated by ping-pong: times are approximate",
                                    ctx.hosts)
                      : std::string(" clocks: one host, one CLOCK_MONOTONIC: stamps comparable "
                                    "across ranks"));
  return lines;
}

// The MPI library, the SKIPRING_* variables and the Open MPI settings of the run.
std::vector<std::string> environment_lines() {
  std::vector<std::string> lines;
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(version, &len) == MPI_SUCCESS) {
    std::string first_line(version);
    first_line = first_line.substr(0, first_line.find_first_of("\r\n"));
    lines.push_back(" MPI library: " + first_line);
  }
  std::string env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "SKIPRING_", 9) == 0) env += std::string(env.empty() ? "" : " ") + *e;
  }
  lines.push_back(" environment: " +
                  (env.empty() ? std::string("(no SKIPRING_* variables)") : env));
  // Open MPI settings that change the figures (mpirun sets many OMPI_MCA_* of its own; these
  // are the ones a user picks), so a recorded run names them.
  std::string mca;
  for (const char* name :
       {"OMPI_MCA_btl_vader_single_copy_mechanism", "OMPI_MCA_pml", "OMPI_MCA_btl",
        "OMPI_MCA_pml_ucx_tls", "OMPI_MCA_op", "OMPI_MCA_coll"}) {
    if (const char* v = std::getenv(name)) {
      mca += fmt::format("{}{}={}", mca.empty() ? "" : " ", name, v);
    }
  }
  lines.push_back(" MPI settings: " + (mca.empty() ? std::string("(Open MPI defaults)") : mca));
  return lines;
}

}  // namespace

std::vector<std::string> preamble(const Context& ctx, const std::vector<std::string>& hosts,
                                  const std::vector<int>& pids) {
  const Options& o = ctx.opts;
  std::vector<std::string> lines;
  lines.push_back(
      fmt::format("skipring_bench: skipring {}{} all-reduce, {} ranks", SKIPRING_VERSION_STRING,
                  SKIPRING_GIT_DESCRIBE[0] != '\0' ? fmt::format(" (git {})", SKIPRING_GIT_DESCRIBE)
                                                   : std::string(),
                  ctx.nranks));
  const std::string step = o.step_factor > 1 ? fmt::format("{}(factor)", o.step_factor)
                                             : fmt::format("{}(bytes)", o.step_bytes);
  lines.push_back(
      fmt::format(" minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} "
                  "validation: {}",
                  o.min_bytes, o.max_bytes, step, o.warmup, o.iters, o.check ? 1 : 0));
  std::string types, ops;
  for (const TypeDesc& t : o.types) types += std::string(types.empty() ? "" : ",") + t.name;
  for (const OpDesc& p : o.ops) ops += std::string(ops.empty() ? "" : ",") + p.name;
  if (o.interleaved()) {
    lines.push_back(fmt::format(" datatypes: {}  ops: {}  out-of-place only", types, ops));
    for (const std::string& line : interleaved_preamble(ctx)) lines.push_back(line);
  } else {
    lines.push_back(fmt::format(" datatypes: {}  ops: {}  variants: {}  compare: {}", types, ops,
                                o.run_oop && o.run_ip ? "out-of-place,in-place"
                                : o.run_oop           ? "out-of-place"
                                                      : "in-place",
                                o.compare_mpi ? "mpi (PMPI_Allreduce, same buffers)" : "none"));
    if (o.osu) {
      lines.push_back(
          " format: osu (osu_allreduce -f): barrier before each iteration; each rank's");
      lines.push_back(
          "       mean call time over the iterations, then Avg/Min/Max of those over the ranks");
    } else {
      lines.push_back(" format: nccl (nccl-tests' columns 1-13; root -1: all-reduce has none),");
      lines.push_back("       then skipring's: algo (what ran), p50/p99 per variant");
      lines.push_back(
          " time: barrier before each iteration, iteration time = slowest rank's call;");
      lines.push_back("       time = mean, p50/p99 = nearest-rank percentiles over iterations");
      lines.push_back(" algbw = size / time, busbw = algbw * 2(n-1)/n");
      if (o.compare_mpi)
        lines.push_back(" speedup = t_mpi_p50 / t_skipring_p50  (> 1: skipring faster)");
    }
  }
  for (const std::string& line : environment_lines()) lines.push_back(line);
  lines.push_back("");
  lines.push_back(" Using ranks");
  for (size_t r = 0; r < hosts.size(); ++r) {
    lines.push_back(fmt::format("  Rank {:>3} Pid {:>7} on {}", r, pids[r], hosts[r]));
  }
  return lines;
}

}  // namespace skipring_bench
