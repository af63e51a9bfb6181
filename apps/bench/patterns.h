// skipring_bench patterns: the data every rank reduces (exactly known results) and the
// straggler the interleaved modes set up (--late-rank, --inject).
#ifndef SKIPRING_APPS_BENCH_PATTERNS_H_
#define SKIPRING_APPS_BENCH_PATTERNS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "apps/bench/datatypes.h"
#include "apps/bench/options.h"
#include "apps/bench_util.h"

namespace skipring_bench {

// Test data whose reduction is exactly known and exactly representable.
//
// Rank r's element i is a hash of (i, r) mapped into a range small enough that every partial
// result of the reduction is exact in T, whatever order the ranks are combined in:
//   sum        integers in [-K, K] ([0, K] unsigned), K = min(64, largest exact value / nranks)
//   prod       +-1 or 2 (unsigned: 1 or 2); element i has k(i) <= min(nranks, digits-1, 16) twos
//   min/max    integers in [-100, 100] ([0, 200] unsigned)
//   band/bor/bxor  random bits (denser for band, sparser for bor)
//   land/lor/lxor  zero / non-zero with probabilities that keep both results common
// Logical values are zero or any non-zero number, so 0/1 normalisation is exercised. The
// expected value is computed by combining every rank's values in a wide type. (Only 8-bit sums
// over more than 127 ranks can leave T's range; they wrap, as in every implementation.)
template <typename T>
class Pattern {
 public:
  using Wide = std::conditional_t<std::is_floating_point_v<T>, double,
                                  std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  static constexpr bool kSigned = std::is_signed_v<T>;  // true for floating point too

  Pattern(OpId op, int nranks) : op_(op), nranks_(nranks) {
    const double exact_max = std::is_floating_point_v<T>
                                 ? std::ldexp(1.0, std::numeric_limits<T>::digits)
                                 : static_cast<double>(std::numeric_limits<T>::max());
    const double bound = std::floor(exact_max / std::max(nranks, 1));
    sum_bound_ = static_cast<int64_t>(std::clamp(bound, 1.0, 64.0));
    max_twos_ = static_cast<uint64_t>(std::min({nranks, std::numeric_limits<T>::digits - 1, 16}));
  }

  T value(uint64_t i, int rank) const {
    const uint64_t h = mix64(i * 0x9E3779B97F4A7C15ULL +
                             (static_cast<uint64_t>(rank) + 1) * 0xD6E8FEB86659FD93ULL);
    switch (op_) {
      case OpId::kSum:
        return sum_value(h);
      case OpId::kProd:
        return prod_value(i, rank, h);
      case OpId::kMin:
      case OpId::kMax:
        if constexpr (kSigned) {
          return static_cast<T>(static_cast<Wide>(static_cast<int64_t>(h % 201) - 100));
        } else {
          return static_cast<T>(h % 201);
        }
      default:
        break;
    }
    if constexpr (std::is_integral_v<T>) return bitwise_value(h);
    return T(0);
  }

  T expected(uint64_t i) const {
    if (nranks_ == 1) return value(i, 0);  // a one-rank reduction applies no operation
    if (op_ == OpId::kLand || op_ == OpId::kLor || op_ == OpId::kLxor) return logical_expected(i);
    Wide acc = static_cast<Wide>(value(i, 0));
    for (int r = 1; r < nranks_; ++r) {
      const Wide v = static_cast<Wide>(value(i, r));
      switch (op_) {
        case OpId::kSum:
          acc = static_cast<Wide>(acc + v);
          break;
        case OpId::kProd:
          acc = static_cast<Wide>(acc * v);
          break;
        case OpId::kMin:
          acc = std::min(acc, v);
          break;
        case OpId::kMax:
          acc = std::max(acc, v);
          break;
        default:
          if constexpr (std::is_integral_v<T>) {
            if (op_ == OpId::kBand) acc &= v;
            if (op_ == OpId::kBor) acc |= v;
            if (op_ == OpId::kBxor) acc ^= v;
          }
          break;
      }
    }
    return static_cast<T>(acc);
  }

  // A value that stands for "not written"; alternating between two values per iteration means
  // an element the all-reduce skipped is caught even where one of them is a legitimate result.
  static T poison(int iteration) {
    if constexpr (std::is_floating_point_v<T>) {
      (void)iteration;
      return std::numeric_limits<T>::quiet_NaN();
    } else {
      return iteration % 2 == 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
    }
  }

 private:
  T sum_value(uint64_t h) const {
    if constexpr (kSigned) {
      const auto span = static_cast<uint64_t>(2 * sum_bound_ + 1);
      return static_cast<T>(static_cast<Wide>(static_cast<int64_t>(h % span) - sum_bound_));
    } else {
      return static_cast<T>(h % static_cast<uint64_t>(sum_bound_ + 1));
    }
  }

  T prod_value(uint64_t i, int rank, uint64_t h) const {
    const uint64_t twos = mix64(i ^ 0x5851F42D4C957F2DULL) % (max_twos_ + 1);
    Wide v = static_cast<uint64_t>(rank) < twos ? 2 : 1;
    if constexpr (kSigned) {
      if (h >> 63) v = -v;
    }
    return static_cast<T>(v);
  }

  // band/bor/bxor and land/lor/lxor (integer types only).
  T bitwise_value(uint64_t h) const {
    const uint64_t h2 = mix64(h + 1);
    switch (op_) {
      case OpId::kBand:
        return static_cast<T>(h | h2);
      case OpId::kBor:
        return static_cast<T>(h & h2);
      case OpId::kBxor:
        return static_cast<T>(h);
      case OpId::kLand:
        return static_cast<T>(h % 8 == 0 ? 0 : 1 + (h >> 8) % 100);
      case OpId::kLor:
        return static_cast<T>(h % 8 != 0 ? 0 : 1 + (h >> 8) % 100);
      case OpId::kLxor:
        return static_cast<T>(h % 2 == 0 ? 0 : 1 + (h >> 8) % 100);
      default:
        return T(0);
    }
  }

  T logical_expected(uint64_t i) const {
    bool acc = value(i, 0) != T(0);
    for (int r = 1; r < nranks_; ++r) {
      const bool v = value(i, r) != T(0);
      if (op_ == OpId::kLand) acc = acc && v;
      if (op_ == OpId::kLor) acc = acc || v;
      if (op_ == OpId::kLxor) acc = acc != v;
    }
    return static_cast<T>(acc ? 1 : 0);
  }

  OpId op_;
  int nranks_;
  int64_t sum_bound_ = 1;
  uint64_t max_twos_ = 0;
};

template <typename T>
void fill_input(const Pattern<T>& pattern, T* buf, uint64_t count, int rank) {
  for (uint64_t i = 0; i < count; ++i) buf[i] = pattern.value(i, rank);
}

template <typename T>
void fill_expected(const Pattern<T>& pattern, T* buf, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) buf[i] = pattern.expected(i);
}

// Elements that differ (NaN never equals anything, so a NaN poison left behind counts).
template <typename T>
int64_t count_mismatches(const T* got, const T* want, uint64_t count) {
  int64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!(got[i] == want[i])) ++wrong;
  }
  return wrong;
}

// Elements of an out-of-place send buffer that the all-reduce modified.
template <typename T>
int64_t count_input_changes(const Pattern<T>& pattern, const T* buf, uint64_t count, int rank) {
  int64_t changed = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!(buf[i] == pattern.value(i, rank))) ++changed;
  }
  return changed;
}

// The straggler of the interleaved modes, set up before anything is measured: --late-rank must
// name a rank of the job, and --inject installs its plan in skipring (the same spec on every
// rank, so every rank accepts or refuses it alike). The plan is removed when this object goes,
// so nothing that runs skipring after the benchmark inherits it.
class StragglerSetup {
 public:
  StragglerSetup() = default;
  StragglerSetup(const StragglerSetup&) = delete;
  StragglerSetup& operator=(const StragglerSetup&) = delete;
  ~StragglerSetup();

  // Exit code 2 (rank 0 says why) when the options cannot be met; nullopt to run.
  std::optional<int> install(const Options& opts, int rank, int nranks);

 private:
  bool inject_installed_ = false;
};

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_PATTERNS_H_
