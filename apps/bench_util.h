// bench_util.h: MPI-free helpers for skipring_bench (byte sizes, percentiles, hashing, format).
#ifndef SKIPRING_APPS_BENCH_UTIL_H_
#define SKIPRING_APPS_BENCH_UTIL_H_

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/hash.h"
#include "common/size_parse.h"

namespace skipring_bench {

// Parses a byte count such as "8", "64K", "64M", "1G", "2KB", "4MiB" or "1t" (binary
// multiples, case-insensitive). Returns nullopt on malformed input or overflow.
// Surrounding blanks are ignored; the syntax is common/size_parse.h's (SKIPRING_SEGMENT_BYTES').
inline std::optional<uint64_t> parse_bytes(const std::string& text) {
  return skipring::parse_size(skipring::trim_blanks(text));
}

// The benchmark's message sizes: min, then min*factor (factor > 1) or min+step (factor == 1),
// up to and including max. Stops early rather than overflow or repeat a size.
inline std::vector<uint64_t> size_sequence(uint64_t min_bytes, uint64_t max_bytes, uint64_t factor,
                                           uint64_t step_bytes) {
  std::vector<uint64_t> sizes;
  uint64_t size = min_bytes;
  while (size <= max_bytes) {
    sizes.push_back(size);
    uint64_t next = 0;
    if (size == 0) {
      next = factor > 1 ? 1 : step_bytes;  // a factor cannot grow 0
    } else if (factor > 1) {
      if (size > std::numeric_limits<uint64_t>::max() / factor) break;
      next = size * factor;
    } else {
      if (size > std::numeric_limits<uint64_t>::max() - step_bytes) break;
      next = size + step_bytes;
    }
    if (next <= size) break;
    size = next;
  }
  return sizes;
}

// Nearest-rank percentile (p in [0, 100]) of an ascending-sorted, non-empty sample.
inline double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  const size_t index = rank < 1.0 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

// Interquartile mean of an ascending-sorted sample: the mean after dropping the lowest and
// the highest quarter (floor(n / 4) values each side); 0 for an empty sample.
inline double interquartile_mean(const std::vector<double>& sorted) {
  if (sorted.empty()) return 0.0;
  const size_t cut = sorted.size() / 4;
  double sum = 0;
  for (size_t i = cut; i < sorted.size() - cut; ++i) sum += sorted[i];
  return sum / static_cast<double>(sorted.size() - 2 * cut);
}

// Summary of a sample of durations (any unit): nearest-rank p50 / p99, mean, min and max.
struct SampleSummary {
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;
  size_t n = 0;
};

inline SampleSummary summarize_sample(std::vector<double> values) {
  SampleSummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (const double v : values) sum += v;
  s.n = values.size();
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p99 = percentile(values, 99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

// One iteration of a collective seen from every rank's entry and exit stamps (seconds on a
// clock common to the ranks), already reduced over the ranks.
struct ArrivalStamps {
  double first_enter = 0;  // min over ranks of t_enter
  double last_enter = 0;   // max over ranks of t_enter
  double last_exit = 0;    // max over ranks of t_exit
};

// The collective's time after the last rank arrived: max t_exit - max t_enter. A straggler's
// own lateness is not in it, only what the collective adds once everybody is there.
inline double after_last_arrival(const ArrivalStamps& s) { return s.last_exit - s.last_enter; }

// Wall time from the first rank's entry to the last rank's exit: max t_exit - min t_enter.
inline double total_time(const ArrivalStamps& s) { return s.last_exit - s.first_enter; }

// a / b, or NaN when b is not positive (or either is not finite).
inline double ratio(double a, double b) {
  if (!(b > 0) || !std::isfinite(a) || !std::isfinite(b)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return a / b;
}

// Geometric mean of positive finite values added one by one (others are ignored).
class GeoMean {
 public:
  void add(double v) {
    if (!(v > 0) || !std::isfinite(v)) return;
    log_sum_ += std::log(v);
    ++n_;
  }
  int count() const { return n_; }
  double value() const { return n_ > 0 ? std::exp(log_sum_ / n_) : 0.0; }

 private:
  double log_sum_ = 0;
  int n_ = 0;
};

// A 64-bit bijective mixer (splitmix64 finalizer); used to make test data look random.
inline uint64_t mix64(uint64_t x) { return skipring::splitmix64_mix(x); }

// Microseconds with a precision that keeps the value within 8 characters.
inline std::string format_micros(double us) {
  if (!std::isfinite(us)) return "nan";
  if (us >= 1e5) return fmt::format("{:.0f}", us);
  if (us >= 1e4) return fmt::format("{:.1f}", us);
  return fmt::format("{:.2f}", us);
}

// Bandwidths and ratios with two decimals (nccl-tests style).
inline std::string format_rate(double value) {
  if (!std::isfinite(value)) return "nan";
  if (value >= 1e5) return fmt::format("{:.0f}", value);
  return fmt::format("{:.2f}", value);
}

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_UTIL_H_
