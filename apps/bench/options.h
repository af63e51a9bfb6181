// skipring_bench options: what to run (sizes, datatypes, modes, outputs), parsed with CLI11.
#ifndef SKIPRING_APPS_BENCH_OPTIONS_H_
#define SKIPRING_APPS_BENCH_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/bench/datatypes.h"

namespace skipring_bench {

// Interleaved modes (straggler, overhead): what one variant runs. skip: skipring with
// skip-ahead on; ring: skipring with skip-ahead off (plain ring); mpi: PMPI_Allreduce.
enum class Variant { kSkip = 0, kRing = 1, kMpi = 2 };
constexpr int kVariantCount = 3;

const char* variant_name(Variant v);

struct Options {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ULL << 20;
  uint64_t step_factor = 2;
  uint64_t step_bytes = 1ULL << 20;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::vector<TypeDesc> types;
  std::vector<OpDesc> ops;
  bool compare_mpi = false;
  std::string json_path;
  std::string csv_path;
  bool run_oop = true;
  bool run_ip = true;
  // Straggler mode (--inject and/or --late-rank/--late-ms) and --overhead mode: the variants
  // below run interleaved per iteration, out-of-place only.
  bool straggler = false;
  bool inject_given = false;
  std::string inject;  // --inject spec, passed to skipring_set_inject
  int late_rank = -1;  // --late-rank; -1: nobody arrives late
  double late_ms = 0;  // --late-ms
  int late_every = 1;  // --late-every: the late rank is late at one call in this many
  bool overhead = false;
  int back_to_back = 1;  // --back-to-back: calls per timed iteration
  // --algo: algorithms to run per size (skipring_set_algo), in order; empty: SKIPRING_ALGO.
  std::vector<std::string> algos;
  std::vector<Variant> variants;  // in the order they run and are printed
  // --format: the table on stdout. nccl: nccl-tests' all_reduce_perf columns (size count type
  // redop root, then time algbw busbw #wrong out-of-place and in-place), skipring's after them;
  // osu: osu_allreduce -f's (size, avg/min/max over ranks of each rank's mean latency,
  // iterations), skipring's after them; out-of-place unless --inplace-only.
  bool osu = false;
  bool interleaved() const { return straggler || overhead; }
  // Verbatim option text for the header.
  std::string min_text = "8", max_text = "64M", step_text = "1M", type_text = "float",
              op_text = "sum";
};

// Parses the command line on every rank (only rank 0 prints). Returns an exit code when the
// program should stop (help, or a usage error), nullopt to run.
std::optional<int> parse_options(int argc, char** argv, int rank, Options& opts);

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_OPTIONS_H_
