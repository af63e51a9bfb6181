// skipring_bench runner: the normal mode (each mode timed on its own; skipring and --compare's
// MPI interleaved per iteration, a barrier before every call) and the interleaved modes (every
// variant once per iteration, in turn, so that noise hits them alike).
#include "apps/bench/runner.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "apps/bench/patterns.h"
#include "apps/bench/results.h"
#include "skipring/skipring.h"

namespace skipring_bench {
namespace {

// ---------------------------------------------------------------------------------------------
// Normal mode.

// One rank's tally of one implementation's timed iterations.
struct LocalTally {
  std::vector<double> seconds;  // per timed iteration
  int64_t wrong = 0;
  uint64_t stat_counts[2] = {0, 0};  // skips, late pieces
  double wait_s = 0;
  int stats_ok = 1;
  std::string last_algo;

  // After a successful skipring call: its statistics.
  void add_stats(MPI_Comm comm) {
    skipring_stats_t st{};
    if (skipring_last_stats(comm, &st) == MPI_SUCCESS) {
      stat_counts[0] += st.skips;
      stat_counts[1] += st.late_pieces;
      wait_s += st.wait_s;
      last_algo.assign(st.algo, strnlen(st.algo, sizeof(st.algo)));
    } else {
      stats_ok = 0;
    }
  }
};

// Every rank's tallies combined: times and statistics at rank 0, error counts everywhere.
RawRun gather_raw_run(const Context& ctx, const LocalTally& local, Impl impl) {
  const int iters = static_cast<int>(local.seconds.size());
  RawRun raw;
  std::vector<double> max_s(local.seconds.size(), 0.0);
  check_mpi(MPI_Reduce(local.seconds.data(), max_s.data(), iters, MPI_DOUBLE, MPI_MAX, 0, ctx.comm),
            "MPI_Reduce(times)");
  if (ctx.rank == 0) raw.max_s = std::move(max_s);
  // OSU's figures: this rank's mean, then its mean, minimum and maximum over the ranks.
  double mean = 0;
  for (const double s : local.seconds) mean += s;
  mean /= std::max(1, iters);
  double sum = 0;
  check_mpi(MPI_Reduce(&mean, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, ctx.comm), "MPI_Reduce(mean)");
  check_mpi(MPI_Reduce(&mean, &raw.rank_mean_s[1], 1, MPI_DOUBLE, MPI_MIN, 0, ctx.comm),
            "MPI_Reduce(mean)");
  check_mpi(MPI_Reduce(&mean, &raw.rank_mean_s[2], 1, MPI_DOUBLE, MPI_MAX, 0, ctx.comm),
            "MPI_Reduce(mean)");
  raw.rank_mean_s[0] = sum / ctx.nranks;
  if (ctx.opts.check) {
    int64_t total = 0;
    check_mpi(PMPI_Allreduce(&local.wrong, &total, 1, MPI_INT64_T, MPI_SUM, ctx.comm),
              "PMPI_Allreduce(#wrong)");
    raw.wrong = total;
  }
  if (impl != Impl::kSkipring) return raw;
  uint64_t counts_sum[2] = {0, 0};
  double wait_sum = 0;
  int all_ok = 0;
  check_mpi(MPI_Reduce(local.stat_counts, counts_sum, 2, MPI_UINT64_T, MPI_SUM, 0, ctx.comm),
            "MPI_Reduce(stats)");
  check_mpi(MPI_Reduce(&local.wait_s, &wait_sum, 1, MPI_DOUBLE, MPI_SUM, 0, ctx.comm),
            "MPI_Reduce(stats)");
  check_mpi(MPI_Reduce(&local.stats_ok, &all_ok, 1, MPI_INT, MPI_MIN, 0, ctx.comm),
            "MPI_Reduce(stats)");
  if (ctx.rank == 0 && all_ok) {
    SkipStats s;
    s.algo = local.last_algo;
    s.skips = counts_sum[0];
    s.late_pieces = counts_sum[1];
    s.wait_us = wait_sum / (static_cast<double>(ctx.nranks) * iters) * 1e6;
    raw.stats = s;
  }
  return raw;
}

// Warm-up, then the timed iterations of skipring and, with --compare mpi, PMPI_Allreduce in one
// mode, interleaved per iteration (a barrier before each call) with the order alternating, so
// that drift and the order of the two calls hit both alike: timed in two blocks, one after the
// other, a forced PMPI_Allreduce through skipring (SKIPRING_ENABLE=0) measured 1.08-1.11x the
// direct call at 8-128 B on 4 ranks over 2 cores, the same MPI call in both blocks.
template <typename T>
std::vector<RawRun> run_impls(const Context& ctx, const Pattern<T>& pattern, const TypeDesc& type,
                              const OpDesc& op, uint64_t count, bool inplace,
                              const std::vector<Impl>& impls) {
  T* send = ctx.send.as<T>();
  T* recv = ctx.recv.as<T>();
  const T* expected = ctx.expected.as<T>();
  const uint64_t bytes = count * sizeof(T);
  const bool check = ctx.opts.check;
  const std::string what = fmt::format("{} bytes, {}, {}, {}", bytes, type.name, op.name,
                                       inplace ? "in-place" : "out-of-place");

  auto prepare = [&](int iteration) {
    if (inplace) {
      std::memcpy(recv, send, bytes);  // in-place overwrote the input
    } else if (check) {
      std::fill(recv, recv + count, Pattern<T>::poison(iteration));
    }
  };
  auto call = [&](Impl impl) {
    const void* sendbuf = inplace ? MPI_IN_PLACE : static_cast<const void*>(send);
    const int n = static_cast<int>(count);
    if (impl == Impl::kSkipring) {
      return skipring_allreduce(sendbuf, recv, n, type.mpi, op.mpi, ctx.comm);
    }
    return PMPI_Allreduce(sendbuf, recv, n, type.mpi, op.mpi, ctx.comm);
  };
  // Out of place, a call must leave the input as it was: checked after every call (and the input
  // restored), so that a change is blamed on the implementation that made it.
  auto check_input = [&](LocalTally* local) {
    if (!check || inplace) return;
    if (const int64_t changed = count_input_changes(pattern, send, count, ctx.rank)) {
      local->wrong += changed;
      fill_input(pattern, send, count, ctx.rank);
    }
  };
  const size_t k = impls.size();
  auto order = [&](int iteration, size_t j) {
    return impls[(static_cast<size_t>(iteration) + j) % k];  // alternates which goes first
  };
  auto index_of = [&](Impl impl) {
    return static_cast<size_t>(std::find(impls.begin(), impls.end(), impl) - impls.begin());
  };

  std::vector<LocalTally> local(k);
  for (int w = 0; w < ctx.opts.warmup; ++w) {
    for (size_t j = 0; j < k; ++j) {
      const Impl impl = order(w, j);
      prepare(w);
      agree_on_error(ctx, call(impl), impl, what + ", warm-up");
      check_input(&local[index_of(impl)]);
    }
  }
  for (LocalTally& l : local) l.seconds.assign(static_cast<size_t>(ctx.opts.iters), 0.0);
  for (int it = 0; it < ctx.opts.iters; ++it) {
    for (size_t j = 0; j < k; ++j) {
      const Impl impl = order(it, j);
      LocalTally& l = local[index_of(impl)];
      prepare(it);
      check_mpi(MPI_Barrier(ctx.comm), "MPI_Barrier");
      const auto t0 = std::chrono::steady_clock::now();
      int rc = call(impl);
      // --back-to-back K: K calls per timed iteration with no barrier in between (as an
      // application issues them); the iteration's time is their mean.
      for (int b = 1; b < ctx.opts.back_to_back && rc == MPI_SUCCESS; ++b) rc = call(impl);
      const auto t1 = std::chrono::steady_clock::now();
      l.seconds[static_cast<size_t>(it)] =
          std::chrono::duration<double>(t1 - t0).count() / ctx.opts.back_to_back;
      if (rc == MPI_SUCCESS && impl == Impl::kSkipring) l.add_stats(ctx.comm);
      if (rc == MPI_SUCCESS && check) l.wrong += count_mismatches(recv, expected, count);
      agree_on_error(ctx, rc, impl, what);
      check_input(&l);
    }
  }
  std::vector<RawRun> raw;
  for (size_t j = 0; j < k; ++j) raw.push_back(gather_raw_run(ctx, local[j], impls[j]));
  return raw;
}

// skipring and (--compare mpi) PMPI_Allreduce, in one mode.
template <typename T>
ModeResult run_mode(const Context& ctx, const Pattern<T>& pattern, const TypeDesc& type,
                    const OpDesc& op, uint64_t count, bool inplace) {
  const uint64_t bytes = count * sizeof(T);
  ModeResult result;
  fill_input(pattern, ctx.send.as<T>(), count, ctx.rank);
  std::vector<Impl> impls{Impl::kSkipring};
  if (ctx.opts.compare_mpi) impls.push_back(Impl::kMpi);
  const std::vector<RawRun> raw = run_impls(ctx, pattern, type, op, count, inplace, impls);
  result.skipring = summarize(raw[0], bytes, ctx.nranks);
  result.stats = raw[0].stats;
  if (ctx.opts.compare_mpi) {
    result.mpi = summarize(raw[1], bytes, ctx.nranks);
    result.speedup = result.skipring.p50_us > 0 ? result.mpi->p50_us / result.skipring.p50_us : 0;
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Interleaved modes.

// Seconds on a clock common to all ranks. std::chrono::steady_clock is CLOCK_MONOTONIC on Linux,
// one clock for every process of a machine, so stamps taken by different ranks on one host are
// directly comparable. Hosts count from their own boot: across hosts the offset to rank 0's
// clock, estimated at start-up, is subtracted, which is only approximate (a few microseconds,
// plus drift over the run).
double common_now(const Context& ctx) {
  const auto since_boot = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_boot).count() - ctx.clock_offset_s;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kClockRounds = 32;
constexpr int kClockTag = 7301;

// Rank 0's side of the clock ping-pong with one peer: sends the peer its estimated offset.
void send_clock_offset(MPI_Comm comm, int peer) {
  double best_rtt = std::numeric_limits<double>::infinity();
  double best_offset = 0;
  for (int round = 0; round < kClockRounds; ++round) {
    const int token = round;
    double remote = 0;
    const double t0 = steady_seconds();
    check_mpi(MPI_Send(&token, 1, MPI_INT, peer, kClockTag, comm), "MPI_Send(clock)");
    check_mpi(MPI_Recv(&remote, 1, MPI_DOUBLE, peer, kClockTag, comm, MPI_STATUS_IGNORE),
              "MPI_Recv(clock)");
    const double t1 = steady_seconds();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      best_offset = remote - 0.5 * (t0 + t1);
    }
  }
  check_mpi(MPI_Send(&best_offset, 1, MPI_DOUBLE, peer, kClockTag, comm), "MPI_Send(clock)");
}

// A peer's side: answers every ping with its clock, then receives its offset.
double receive_clock_offset(MPI_Comm comm) {
  for (int round = 0; round < kClockRounds; ++round) {
    int token = 0;
    check_mpi(MPI_Recv(&token, 1, MPI_INT, 0, kClockTag, comm, MPI_STATUS_IGNORE),
              "MPI_Recv(clock)");
    const double stamp = steady_seconds();
    check_mpi(MPI_Send(&stamp, 1, MPI_DOUBLE, 0, kClockTag, comm), "MPI_Send(clock)");
  }
  double offset = 0;
  check_mpi(MPI_Recv(&offset, 1, MPI_DOUBLE, 0, kClockTag, comm, MPI_STATUS_IGNORE),
            "MPI_Recv(clock)");
  return offset;
}

// One rank's record of the interleaved timed iterations; stamps of variant v in iteration it
// are at index v * iters + it.
struct InterleavedTally {
  InterleavedTally(size_t variants, int iters)
      : iters(iters),
        enters(variants * static_cast<size_t>(iters), 0.0),
        exits(variants * static_cast<size_t>(iters), 0.0),
        wrong(variants, 0),
        counts(2 * variants, 0),
        stats_ok(variants, 1) {}

  size_t at(size_t v, int it) const {
    return v * static_cast<size_t>(iters) + static_cast<size_t>(it);
  }

  // After a successful skipring call of variant v: its statistics.
  void add_stats(size_t v, MPI_Comm comm) {
    skipring_stats_t st{};
    if (skipring_last_stats(comm, &st) == MPI_SUCCESS) {
      counts[2 * v] += st.skips;
      counts[2 * v + 1] += st.late_pieces;
    } else {
      stats_ok[v] = 0;
    }
  }

  int iters;
  std::vector<double> enters;    // t_enter
  std::vector<double> exits;     // t_exit
  std::vector<int64_t> wrong;    // per variant
  std::vector<uint64_t> counts;  // skips, late pieces per variant
  std::vector<int> stats_ok;     // per variant
};

// The tallies of every rank, combined over ranks (rank 0 gets the stamps and statistics).
struct InterleavedTotals {
  std::vector<double> latest;    // max over ranks: t_enter stamps, then t_exit stamps
  std::vector<double> earliest;  // min over ranks of t_enter
  std::vector<int64_t> wrong;    // every rank
  std::vector<uint64_t> counts;
  std::vector<int> all_ok;
};

InterleavedTotals reduce_tallies(const Context& ctx, const InterleavedTally& t) {
  const size_t nv = t.wrong.size();
  InterleavedTotals sum;
  std::vector<double> stamps = t.enters;
  stamps.insert(stamps.end(), t.exits.begin(), t.exits.end());
  sum.latest.assign(stamps.size(), 0.0);
  sum.earliest.assign(t.enters.size(), 0.0);
  check_mpi(MPI_Reduce(stamps.data(), sum.latest.data(), static_cast<int>(stamps.size()),
                       MPI_DOUBLE, MPI_MAX, 0, ctx.comm),
            "MPI_Reduce(stamps)");
  check_mpi(MPI_Reduce(t.enters.data(), sum.earliest.data(), static_cast<int>(t.enters.size()),
                       MPI_DOUBLE, MPI_MIN, 0, ctx.comm),
            "MPI_Reduce(stamps)");
  sum.wrong.assign(nv, 0);
  if (ctx.opts.check) {
    check_mpi(PMPI_Allreduce(t.wrong.data(), sum.wrong.data(), static_cast<int>(nv), MPI_INT64_T,
                             MPI_SUM, ctx.comm),
              "PMPI_Allreduce(#wrong)");
  }
  sum.counts.assign(t.counts.size(), 0);
  sum.all_ok.assign(nv, 0);
  check_mpi(MPI_Reduce(t.counts.data(), sum.counts.data(), static_cast<int>(t.counts.size()),
                       MPI_UINT64_T, MPI_SUM, 0, ctx.comm),
            "MPI_Reduce(stats)");
  check_mpi(MPI_Reduce(t.stats_ok.data(), sum.all_ok.data(), static_cast<int>(nv), MPI_INT, MPI_MIN,
                       0, ctx.comm),
            "MPI_Reduce(stats)");
  return sum;
}

// Variant v's result from the combined tallies (the samples and statistics on rank 0 only).
VariantResult variant_result(const Context& ctx, const InterleavedTally& t,
                             const InterleavedTotals& sum, size_t v) {
  VariantResult r;
  r.variant = ctx.opts.variants[v];
  r.iters = t.iters;
  if (ctx.opts.check) r.wrong = sum.wrong[v];
  if (ctx.rank != 0) return r;
  const size_t exit_base = t.enters.size();
  std::vector<double> after_us, total_us;
  for (int it = 0; it < t.iters; ++it) {
    const size_t at = t.at(v, it);
    ArrivalStamps a;
    a.first_enter = sum.earliest[at];
    a.last_enter = sum.latest[at];
    a.last_exit = sum.latest[exit_base + at];
    after_us.push_back(after_last_arrival(a) * 1e6);
    total_us.push_back(total_time(a) * 1e6);
  }
  r.after_us = summarize_sample(std::move(after_us));
  r.total_us = summarize_sample(std::move(total_us));
  if (r.variant != Variant::kMpi && sum.all_ok[v]) {
    r.skips = sum.counts[2 * v];
    r.late_pieces = sum.counts[2 * v + 1];
  }
  return r;
}

// The variants of ctx.opts.variants interleaved (warm-up, then timed iterations; in each,
// every variant in turn) out-of-place on `count` elements. Per call and rank: a barrier, the
// late rank's sleep (--late-rank/--late-ms, every variant alike), t_enter, the call, t_exit.
template <typename T>
class InterleavedRun {
 public:
  InterleavedRun(const Context& ctx, const Pattern<T>& pattern, const TypeDesc& type,
                 const OpDesc& op, uint64_t count)
      : ctx_(ctx),
        pattern_(pattern),
        type_(type),
        op_(op),
        count_(count),
        what_(fmt::format("{} bytes, {}, {}, out-of-place", count * sizeof(T), type.name, op.name)),
        tally_(ctx.opts.variants.size(), ctx.opts.iters) {}

  // Rank 0 gets the per-iteration times over ranks; every rank gets the error counts.
  std::vector<VariantResult> run() {
    fill_input(pattern_, ctx_.send.as<T>(), count_, ctx_.rank);
    // The variants compare skip-ahead with the plain ring: both must run the ring, whatever
    // SKIPRING_ALGO=auto would pick for this size.
    agree_on_error(ctx_, skipring_set_algo("skipring"), Impl::kSkipring, "skipring_set_algo");
    for (int it = -ctx_.opts.warmup; it < ctx_.opts.iters; ++it) {
      // --late-every K: K - 1 quiet calls of every variant before each late one.
      for (int q = 1; q < ctx_.opts.late_every; ++q) {
        for (size_t v = 0; v < ctx_.opts.variants.size(); ++v) call(v, it, true);
      }
      for (size_t v = 0; v < ctx_.opts.variants.size(); ++v) call(v, it, false);
    }
    const InterleavedTotals sum = reduce_tallies(ctx_, tally_);
    std::vector<VariantResult> results;
    for (size_t v = 0; v < ctx_.opts.variants.size(); ++v) {
      results.push_back(variant_result(ctx_, tally_, sum, v));
    }
    return results;
  }

 private:
  // Variant v's call in iteration it (a warm-up when negative); `quiet`: one of --late-every's
  // untimed calls nobody is late for.
  void call(size_t v, int it, bool quiet) {
    T* send = ctx_.send.as<T>();
    T* recv = ctx_.recv.as<T>();
    const bool timed = it >= 0 && !quiet;
    const Variant variant = ctx_.opts.variants[v];
    const Impl impl = variant == Variant::kMpi ? Impl::kMpi : Impl::kSkipring;
    if (ctx_.opts.check) std::fill(recv, recv + count_, Pattern<T>::poison(it + ctx_.opts.warmup));
    if (impl == Impl::kSkipring) {
      // Takes effect from the next collective on; no communication.
      agree_on_error(ctx_, skipring_set_skip(variant == Variant::kSkip ? 1 : 0), impl,
                     "skipring_set_skip");
    }
    check_mpi(MPI_Barrier(ctx_.comm), "MPI_Barrier");
    if (!quiet && ctx_.rank == ctx_.opts.late_rank && ctx_.opts.late_ms > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ctx_.opts.late_ms));
    }
    const int n = static_cast<int>(count_);
    const double t_enter = common_now(ctx_);
    const int rc = impl == Impl::kSkipring
                       ? skipring_allreduce(send, recv, n, type_.mpi, op_.mpi, ctx_.comm)
                       : PMPI_Allreduce(send, recv, n, type_.mpi, op_.mpi, ctx_.comm);
    const double t_exit = common_now(ctx_);
    if (timed) {
      tally_.enters[tally_.at(v, it)] = t_enter;
      tally_.exits[tally_.at(v, it)] = t_exit;
      if (rc == MPI_SUCCESS && impl == Impl::kSkipring) tally_.add_stats(v, ctx_.comm);
      if (rc == MPI_SUCCESS && ctx_.opts.check) check_output(v);
    }
    agree_on_error(ctx_, rc, impl,
                   fmt::format("{}, {}{}", what_, variant_name(variant),
                               timed   ? ""
                               : quiet ? ", a quiet call (--late-every)"
                                       : ", warm-up"));
  }

  // Counts variant v's wrong output elements. The variants share the input: a call that
  // modified it is charged, and it is restored so the next variant is not.
  void check_output(size_t v) {
    T* send = ctx_.send.as<T>();
    tally_.wrong[v] += count_mismatches(ctx_.recv.as<T>(), ctx_.expected.as<T>(), count_);
    const int64_t changed = count_input_changes(pattern_, send, count_, ctx_.rank);
    if (changed > 0) {
      tally_.wrong[v] += changed;
      fill_input(pattern_, send, count_, ctx_.rank);
    }
  }

  const Context& ctx_;
  const Pattern<T>& pattern_;
  const TypeDesc& type_;
  const OpDesc& op_;
  const uint64_t count_;
  const std::string what_;
  InterleavedTally tally_;
};

// ---------------------------------------------------------------------------------------------
// Sizes.

// One size in the normal mode: a row per --algo entry (one row without --algo).
template <typename T>
void run_size(const Context& ctx, Report& report, const Pattern<T>& pattern, Row base,
              const TypeDesc& type, const OpDesc& op) {
  const std::vector<std::string> algos =
      ctx.opts.algos.empty() ? std::vector<std::string>{""} : ctx.opts.algos;
  for (const std::string& algo : algos) {
    if (!algo.empty()) {
      agree_on_error(ctx, skipring_set_algo(algo.c_str()), Impl::kSkipring, "skipring_set_algo");
    }
    Row row = base;
    row.algo_requested = algo;
    if (ctx.opts.run_oop) row.oop = run_mode(ctx, pattern, type, op, row.count, false);
    if (ctx.opts.run_ip) row.ip = run_mode(ctx, pattern, type, op, row.count, true);
    report.add_row(row);
  }
}

// Whether skipring runs type/op itself (nullopt when it cannot tell); a comment when it does not.
std::optional<bool> native_support(const Context& ctx, const Report& report, const TypeDesc& type,
                                   const OpDesc& op) {
  int handled = 0;
  if (skipring_handles(type.mpi, op.mpi, ctx.comm, &handled) != MPI_SUCCESS) return std::nullopt;
  if (!handled) {
    report.comment(
        fmt::format("note: skipring hands {}/{} to PMPI_Allreduce (fallback)", type.name, op.name));
  }
  return handled != 0;
}

template <typename T>
void run_combination(const Context& ctx, Report& report, const std::vector<uint64_t>& sizes,
                     const TypeDesc& type, const OpDesc& op) {
  const Pattern<T> pattern(op.id, ctx.nranks);
  const std::optional<bool> native = native_support(ctx, report, type, op);
  uint64_t previous_bytes = 0;
  for (const uint64_t size : sizes) {
    const uint64_t count = size / sizeof(T);
    if (count == 0) continue;  // smaller than one element
    if (count > static_cast<uint64_t>(INT_MAX)) {
      report.comment(fmt::format("sizes from {} bytes skipped for {}: count exceeds INT_MAX", size,
                                 type.name));
      break;
    }
    const uint64_t bytes = count * sizeof(T);
    if (bytes == previous_bytes) continue;  // rounding to whole elements repeated a size
    previous_bytes = bytes;
    if (ctx.opts.check) fill_expected(pattern, ctx.expected.as<T>(), count);
    const RowKey key{bytes, count, type.name, op.name, native};
    if (ctx.opts.interleaved()) {
      InterleavedRow row;
      static_cast<RowKey&>(row) = key;
      row.variants = InterleavedRun<T>(ctx, pattern, type, op, count).run();
      report.add_interleaved_row(row);
      continue;
    }
    Row row;
    static_cast<RowKey&>(row) = key;
    run_size(ctx, report, pattern, row, type, op);
  }
}

}  // namespace

double estimate_clock_offset(MPI_Comm comm, int rank, int nranks) {
  double offset = 0;
  for (int peer = 1; peer < nranks; ++peer) {
    if (rank == 0) {
      send_clock_offset(comm, peer);
    } else if (rank == peer) {
      offset = receive_clock_offset(comm);
    }
  }
  return offset;
}

void run_type(const Context& ctx, Report& report, const std::vector<uint64_t>& sizes,
              const TypeDesc& type, const OpDesc& op) {
  switch (type.id) {
    case TypeId::kInt8:
      return run_combination<int8_t>(ctx, report, sizes, type, op);
    case TypeId::kUint8:
      return run_combination<uint8_t>(ctx, report, sizes, type, op);
    case TypeId::kInt16:
      return run_combination<int16_t>(ctx, report, sizes, type, op);
    case TypeId::kUint16:
      return run_combination<uint16_t>(ctx, report, sizes, type, op);
    case TypeId::kInt32:
      return run_combination<int32_t>(ctx, report, sizes, type, op);
    case TypeId::kUint32:
      return run_combination<uint32_t>(ctx, report, sizes, type, op);
    case TypeId::kInt64:
      return run_combination<int64_t>(ctx, report, sizes, type, op);
    case TypeId::kUint64:
      return run_combination<uint64_t>(ctx, report, sizes, type, op);
    case TypeId::kFloat:
      return run_combination<float>(ctx, report, sizes, type, op);
    case TypeId::kDouble:
      return run_combination<double>(ctx, report, sizes, type, op);
    default:  // the bench's type table (datatypes.cpp) names none of the others
      return;
  }
}

}  // namespace skipring_bench
