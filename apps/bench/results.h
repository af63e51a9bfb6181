// skipring_bench results: what the runner measures per size and the report prints.
#ifndef SKIPRING_APPS_BENCH_RESULTS_H_
#define SKIPRING_APPS_BENCH_RESULTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/bench/options.h"
#include "apps/bench_util.h"

namespace skipring_bench {

struct ImplResult {
  // Per iteration the slowest rank's time (nccl-tests' convention): mean, percentiles, extremes.
  double avg_us = 0, p50_us = 0, p99_us = 0, min_us = 0, max_us = 0, algbw = 0, busbw = 0;
  // The interquartile mean: the mean of the samples between the 25th and 75th percentile. Like
  // the median it ignores the tails; unlike it, it resolves differences below the clock's tick
  // (~10 ns here), which decide a ratio on a 0.25 us call.
  double iqm_us = 0;
  // OSU's convention (osu_allreduce -f): each rank's mean over the iterations, then the mean,
  // minimum and maximum of those over the ranks.
  double rank_avg_us = 0, rank_min_us = 0, rank_max_us = 0;
  std::optional<int64_t> wrong;  // nullopt when validation is off
};

struct SkipStats {
  std::string algo;  // what rank 0's last timed call ran (skipring_stats_t.algo)
  uint64_t skips = 0;
  uint64_t late_pieces = 0;
  double wait_us = 0;  // mean per rank and call
};

struct ModeResult {
  ImplResult skipring;
  std::optional<SkipStats> stats;  // nullopt when skipring_last_stats failed
  std::optional<ImplResult> mpi;
  double speedup = 0;  // t_mpi_p50 / t_skipring_p50
};

struct VariantResult {
  Variant variant = Variant::kSkip;
  SampleSummary after_us;  // per iteration: max_rank(t_exit) - max_rank(t_enter) (rank 0 only)
  SampleSummary total_us;  // per iteration: max_rank(t_exit) - min_rank(t_enter) (rank 0 only)
  std::optional<int64_t> wrong;  // all ranks; nullopt when validation is off
  // skipring variants: skip-ahead decisions and late pieces over all ranks and timed iterations
  // (rank 0 only; nullopt for MPI or when skipring_last_stats failed).
  std::optional<uint64_t> skips;
  std::optional<uint64_t> late_pieces;
  int iters = 0;

  // Per timed iteration, all ranks together.
  std::optional<double> per_iter(const std::optional<uint64_t>& total) const;
};

// What identifies a row of either mode: the size, the datatype and the reduction.
struct RowKey {
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::string type;
  std::string op;
  std::optional<bool> native;  // skipring ran its own algorithm (not a fallback)
};

// One size of the interleaved modes (straggler, overhead).
struct InterleavedRow : RowKey {
  std::vector<VariantResult> variants;

  const VariantResult* find(Variant v) const;
  // p50 of "after last arrival" of a over that of b; NaN when either variant is missing.
  double p50_ratio(Variant a, Variant b) const;
};

// One size (and --algo entry) of the normal mode.
struct Row : RowKey {
  std::string algo_requested;  // --algo entry ("" without --algo)
  std::optional<ModeResult> oop;
  std::optional<ModeResult> ip;
  // What ran: the algorithm of the first mode's last call, "auto:<choice>" when auto chose.
  std::string algo_label() const;
};

// Raw measurements of one implementation in one mode.
struct RawRun {
  std::vector<double> max_s;  // rank 0: per-iteration time of the slowest rank
  // rank 0: mean over ranks, minimum and maximum of each rank's mean iteration time
  double rank_mean_s[3] = {0, 0, 0};
  std::optional<int64_t> wrong;  // all ranks: summed over ranks
  std::optional<SkipStats> stats;
};

// Times in microseconds, percentiles and nccl-tests bandwidths of one raw run.
ImplResult summarize(const RawRun& raw, uint64_t bytes, int nranks);

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_RESULTS_H_
