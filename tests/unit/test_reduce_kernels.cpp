// Unit tests for the element types (dtype.cpp), the reduction kernels (reduce_kernels.cpp) and
// the MPI handle mapping (mpi_types.cpp): every (op, type) pair against a scalar reference.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/elem_types.h"
#include "collectives/reduce_kernels.h"
#include "common/status.h"
#include "runtime/mpi_types.h"

// Internal hooks defined in collectives/reduce_kernels.cpp (not in a public header).
namespace skipring::kernels_internal {
int num_isas();
const char* isa_name(int isa);
bool isa_available(int isa);
int selected_isa();
size_t set_streaming_threshold(size_t bytes);
Status reduce_isa(int isa, ROp op, DType t, void* dst, const void* a, const void* b, size_t count);
}  // namespace skipring::kernels_internal

namespace skipring {

// Failure messages for the composite element types (found by argument-dependent lookup).
template <typename R>
std::ostream& operator<<(std::ostream& os, const ComplexOf<R>& c) {
  return os << "(" << c.re << ", " << c.im << ")";
}
template <typename V, typename I>
std::ostream& operator<<(std::ostream& os, const LocPair<V, I>& p) {
  return os << "{" << +p.value << ", " << +p.index << "}";
}

namespace {

namespace ki = kernels_internal;

const std::vector<size_t> kCounts = {0, 1, 7, 8, 15, 16, 17, 1000, 4099};

std::vector<ROp> all_ops() {
  std::vector<ROp> v;
  for (int i = 0; i < kNumROps; ++i) v.push_back(static_cast<ROp>(i));
  return v;
}

std::vector<DType> all_types() {
  std::vector<DType> v;
  for (int i = 0; i < kNumDTypes; ++i) v.push_back(static_cast<DType>(i));
  return v;
}

std::string pair_name(ROp op, DType t) { return std::string(rop_name(op)) + "/" + dtype_name(t); }

// ---- Independent statement of the MPI-3.1 table ------------------------------------------

bool is_int(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUint8:
    case DType::kInt16:
    case DType::kUint16:
    case DType::kInt32:
    case DType::kUint32:
    case DType::kInt64:
    case DType::kUint64:
      return true;
    default:
      return false;
  }
}

bool is_float(DType t) {
  return t == DType::kFloat || t == DType::kDouble || t == DType::kLongDouble ||
         t == DType::kFloat16 || t == DType::kBfloat16;
}

bool is_complex(DType t) {
  return t == DType::kComplexFloat || t == DType::kComplexDouble || t == DType::kComplexLongDouble;
}

bool is_loc_pair(DType t) {
  switch (t) {
    case DType::kFloatInt:
    case DType::kDoubleInt:
    case DType::kLongInt:
    case DType::kIntInt:
    case DType::kShortInt:
    case DType::kLongDoubleInt:
    case DType::kFloatFloat:
    case DType::kDoubleDouble:
      return true;
    default:
      return false;
  }
}

bool expected_valid(ROp op, DType t) {
  switch (op) {
    case ROp::kSum:
    case ROp::kProd:
      return is_int(t) || is_float(t) || is_complex(t);
    case ROp::kMin:
    case ROp::kMax:
      return is_int(t) || is_float(t);
    case ROp::kMinloc:
    case ROp::kMaxloc:
      return is_loc_pair(t);
    case ROp::kLand:
    case ROp::kLor:
    case ROp::kLxor:
      return is_int(t) || t == DType::kBool;
    case ROp::kBand:
    case ROp::kBor:
    case ROp::kBxor:
      return is_int(t) || t == DType::kByte;
    default:
      return false;
  }
}

// ---- Scalar reference ----------------------------------------------------------------------

// Bytes of an element that carry its value (x87 long double: 10 of 16); the rest is padding.
template <typename T>
constexpr size_t value_bytes() {
  if (std::is_same_v<T, long double> && std::numeric_limits<long double>::digits == 64) {
    return 10;
  }
  return sizeof(T);
}

// Writes v at p as the kernels must: every padding byte zero (long double's, the pairs').
template <typename T>
void write_elem(void* p, const T& v) {
  unsigned char buf[sizeof(T)] = {};
  if constexpr (IsComplex<T>::value) {
    write_elem(buf, v.re);
    write_elem(buf + offsetof(T, im), v.im);
  } else if constexpr (IsLocPair<T>::value) {
    write_elem(buf, v.value);
    write_elem(buf + offsetof(T, index), v.index);
  } else {
    std::memcpy(buf, &v, value_bytes<T>());
  }
  std::memcpy(p, buf, sizeof(T));
}

template <typename T>
T ref_int(ROp op, T a, T b) {
  // Wrap-around arithmetic done in 64-bit unsigned, then truncated.
  const uint64_t ua = static_cast<uint64_t>(a);
  const uint64_t ub = static_cast<uint64_t>(b);
  switch (op) {
    case ROp::kSum:
      return static_cast<T>(ua + ub);
    case ROp::kProd:
      return static_cast<T>(ua * ub);
    case ROp::kMin:
      return a < b ? a : b;
    case ROp::kMax:
      return a > b ? a : b;
    case ROp::kLand:
      return (a != 0 && b != 0) ? 1 : 0;
    case ROp::kLor:
      return (a != 0 || b != 0) ? 1 : 0;
    case ROp::kLxor:
      return ((a != 0) != (b != 0)) ? 1 : 0;
    case ROp::kBand:
      return static_cast<T>(a & b);
    case ROp::kBor:
      return static_cast<T>(a | b);
    case ROp::kBxor:
      return static_cast<T>(a ^ b);
    default:
      break;
  }
  ADD_FAILURE() << "no reference for op";
  return 0;
}

// Documented float semantics: NaN results are the default quiet NaN; MIN/MAX order -0 < +0.
template <typename T>
T ref_float(ROp op, T a, T b) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  if (op == ROp::kSum || op == ROp::kProd) {
    const T r = op == ROp::kSum ? a + b : a * b;
    return std::isnan(r) ? nan : r;
  }
  if (std::isnan(a) || std::isnan(b)) return nan;
  if (a == b && a == 0) {
    const bool want_negative = op == ROp::kMin ? (std::signbit(a) || std::signbit(b))
                                               : (std::signbit(a) && std::signbit(b));
    return want_negative ? -T(0) : T(0);
  }
  if (op == ROp::kMin) return a < b ? a : b;
  if (op == ROp::kMax) return a > b ? a : b;
  ADD_FAILURE() << "no reference for op";
  return 0;
}

// Complex SUM/PROD: (a + bi)(c + di) = (ac - bd) + (ad + bc)i, each part's NaN the default one.
template <typename R>
ComplexOf<R> ref_complex(ROp op, ComplexOf<R> x, ComplexOf<R> y) {
  if (op == ROp::kSum) return {ref_float(op, x.re, y.re), ref_float(op, x.im, y.im)};
  const R nan = std::numeric_limits<R>::quiet_NaN();
  const R re = x.re * y.re - x.im * y.im;
  const R im = x.re * y.im + x.im * y.re;
  return {std::isnan(re) ? nan : re, std::isnan(im) ? nan : im};
}

// MINLOC/MAXLOC (MPI-3.1 5.9.4): the smaller (larger) value, on equal values the smaller index;
// floats as MIN/MAX order them (-0 below +0), a NaN value wins with the smaller NaN index.
template <typename V, typename I>
LocPair<V, I> ref_loc(ROp op, LocPair<V, I> x, LocPair<V, I> y) {
  const bool is_max = op == ROp::kMaxloc;
  const I low = std::min(x.index, y.index);
  if constexpr (std::is_floating_point_v<V>) {
    const V nan = std::numeric_limits<V>::quiet_NaN();
    if (std::isnan(x.value) && std::isnan(y.value)) return {nan, low};
    if (std::isnan(x.value)) return {nan, x.index};
    if (std::isnan(y.value)) return {nan, y.index};
    if (x.value == y.value)
      return {ref_float(is_max ? ROp::kMax : ROp::kMin, x.value, y.value), low};
  }
  if (x.value == y.value) return {x.value, low};
  const bool x_wins = is_max ? x.value > y.value : x.value < y.value;
  return x_wins ? x : y;
}

template <typename T>
T ref_elem(ROp op, T a, T b) {
  if constexpr (IsComplex<T>::value) {
    return ref_complex(op, a, b);
  } else if constexpr (IsLocPair<T>::value) {
    return ref_loc(op, a, b);
  } else if constexpr (std::is_floating_point_v<T>) {
    return ref_float(op, a, b);
  } else {
    return ref_int(op, a, b);
  }
}

// ---- Random inputs -------------------------------------------------------------------------

template <typename T>
T random_elem(std::mt19937_64& rng, DType t) {
  const uint64_t r = rng();
  if constexpr (IsComplex<T>::value) {
    using R = decltype(T::re);
    return {random_elem<R>(rng, t), random_elem<R>(rng, t)};
  } else if constexpr (IsLocPair<T>::value) {
    // Values from a small set half of the time (ties, +0 against -0), indices from 0..7.
    using V = decltype(T::value);
    using I = decltype(T::index);
    const V few[] = {V(0), V(-0.0), V(1), V(2)};
    const V v = r % 2 == 0 ? few[(r >> 4) % 4] : random_elem<V>(rng, t);
    return {v, static_cast<I>((r >> 8) % 8)};
  } else if constexpr (std::is_floating_point_v<T>) {
    const T specials[] = {T(0),
                          -T(0),
                          std::numeric_limits<T>::infinity(),
                          -std::numeric_limits<T>::infinity(),
                          std::numeric_limits<T>::quiet_NaN(),
                          -std::numeric_limits<T>::quiet_NaN(),
                          std::numeric_limits<T>::denorm_min(),
                          -std::numeric_limits<T>::max(),
                          std::numeric_limits<T>::max(),
                          T(1)};
    if (r % 8 == 0) return specials[(r >> 8) % (sizeof(specials) / sizeof(specials[0]))];
    std::uniform_real_distribution<double> dist(-1000.0, 1000.0);
    return static_cast<T>(dist(rng));
  } else {
    if (t == DType::kBool) {
      const uint8_t choices[] = {0, 1, 0, 1, 2, 255};  // non-0/1 bytes must read as true
      return static_cast<T>(choices[r % 6]);
    }
    switch (r % 4) {
      case 0:
        return 0;  // exercises logical ops
      case 1:
        return static_cast<T>((r >> 8) % 16);  // small values
      default:
        return static_cast<T>(r >> 3);  // full range (wraps, negatives)
    }
  }
}

// Fills `count` elements at p with random values; writes the full storage of each element.
template <typename T>
void fill_random(std::mt19937_64& rng, DType t, void* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    write_elem(static_cast<unsigned char*>(p) + i * sizeof(T), random_elem<T>(rng, t));
  }
}

template <typename T>
void ref_reduce(ROp op, void* dst, const void* a, const void* b, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T x, y;
    std::memcpy(&x, static_cast<const unsigned char*>(a) + i * sizeof(T), sizeof(T));
    std::memcpy(&y, static_cast<const unsigned char*>(b) + i * sizeof(T), sizeof(T));
    write_elem(static_cast<unsigned char*>(dst) + i * sizeof(T), ref_elem<T>(op, x, y));
  }
}

// An element as a failure message shows it (integers of one byte as numbers, not characters).
template <typename T>
auto printable(const T& v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return +v;
  } else {
    return v;
  }
}

// Aligned scratch buffer with room for a leading offset (at most three of the largest element,
// 32 bytes: StreamingStoresPathMatchesReference).
constexpr size_t kMaxOffset = 3 * 32;
class Buffer {
 public:
  explicit Buffer(size_t bytes) : storage_(bytes + 64 + kMaxOffset) {}
  unsigned char* at(size_t offset) {
    auto base = reinterpret_cast<uintptr_t>(storage_.data());
    return reinterpret_cast<unsigned char*>((base + 63) / 64 * 64) + offset;
  }

 private:
  std::vector<unsigned char> storage_;
};

enum class Alias { kDistinct, kDstIsA, kDstIsB, kAllSame, kAIsB };
const Alias kAliases[] = {Alias::kDistinct, Alias::kDstIsA, Alias::kDstIsB, Alias::kAllSame,
                          Alias::kAIsB};

const char* alias_name(Alias m) {
  switch (m) {
    case Alias::kDistinct:
      return "distinct";
    case Alias::kDstIsA:
      return "dst==a";
    case Alias::kDstIsB:
      return "dst==b";
    case Alias::kAllSame:
      return "dst==a==b";
    case Alias::kAIsB:
      return "a==b";
  }
  return "?";
}

// Runs reduce (through ISA `isa`, or the public entry point when isa < 0) for one (op, type)
// pair, for every count and aliasing mode, at byte offset `offset` from 64-byte alignment,
// and compares the whole storage of every element against the scalar reference. Returns the
// result bits of the largest count so that callers can compare ISA variants.
template <typename T>
std::vector<unsigned char> check_pair(ROp op, DType t, int isa, size_t offset, uint64_t seed,
                                      const std::vector<size_t>& counts) {
  std::vector<unsigned char> last;
  std::mt19937_64 rng(seed);
  for (size_t count : counts) {
    const size_t bytes = count * sizeof(T);
    Buffer a(bytes), b(bytes), d(bytes), expect(bytes);
    fill_random<T>(rng, t, a.at(offset), count);
    fill_random<T>(rng, t, b.at(offset), count);
    const std::vector<unsigned char> a0(a.at(offset), a.at(offset) + bytes);
    const std::vector<unsigned char> b0(b.at(offset), b.at(offset) + bytes);
    for (Alias mode : kAliases) {
      SCOPED_TRACE(pair_name(op, t) + " count=" + std::to_string(count) +
                   " offset=" + std::to_string(offset) + " " + alias_name(mode) +
                   (isa >= 0 ? std::string(" isa=") + ki::isa_name(isa) : std::string()));
      if (bytes > 0) {  // a0.data() is null for count 0, and memcpy's pointers must not be
        std::memcpy(a.at(offset), a0.data(), bytes);
        std::memcpy(b.at(offset), b0.data(), bytes);
        std::memset(d.at(offset), 0xA5, bytes);  // garbage, including long double padding
      }
      void* dst = d.at(offset);
      const void* pa = a.at(offset);
      const void* pb = b.at(offset);
      const bool b_is_a = mode == Alias::kAllSame || mode == Alias::kAIsB;
      switch (mode) {
        case Alias::kDistinct:
          break;
        case Alias::kDstIsA:
          dst = a.at(offset);
          pa = dst;
          break;
        case Alias::kDstIsB:
          dst = b.at(offset);
          pb = dst;
          break;
        case Alias::kAllSame:
          dst = a.at(offset);
          pa = dst;
          pb = dst;
          break;
        case Alias::kAIsB:
          pb = pa;
          break;
      }
      const std::vector<unsigned char>& bsrc = b_is_a ? a0 : b0;
      ref_reduce<T>(op, expect.at(offset), a0.data(), bsrc.data(), count);
      const Status st = isa < 0 ? reduce(op, t, dst, pa, pb, count)
                                : ki::reduce_isa(isa, op, t, dst, pa, pb, count);
      EXPECT_EQ(st, Status::kOk);
      if (st != Status::kOk) return last;
      const auto* got = static_cast<const unsigned char*>(dst);
      for (size_t i = 0; i < count; ++i) {
        const size_t at = i * sizeof(T);
        if (std::memcmp(got + at, expect.at(offset) + at, sizeof(T)) != 0) {
          T x, y, g, w;
          std::memcpy(&x, &a0[at], sizeof(T));
          std::memcpy(&y, &bsrc[at], sizeof(T));
          std::memcpy(&g, got + at, sizeof(T));
          std::memcpy(&w, expect.at(offset) + at, sizeof(T));
          ADD_FAILURE() << "element " << i << ": got " << printable(g) << " want " << printable(w)
                        << " (inputs " << printable(x) << ", " << printable(y) << ")";
          return last;
        }
      }
      // Inputs that are not dst must be untouched.
      if (pa != dst && bytes > 0) {
        EXPECT_EQ(std::memcmp(pa, a0.data(), bytes), 0);
      }
      if (pb != dst && bytes > 0) {
        EXPECT_EQ(std::memcmp(pb, bsrc.data(), bytes), 0);
      }
      if (mode == Alias::kDistinct) last.assign(got, got + bytes);
    }
  }
  return last;
}

template <typename T>
struct Type {
  using type = T;
};

// Calls f(Type<T>{}) with T the storage type of t (bool and byte as uint8_t) and returns what it
// returns; a value-initialised R for the 16-bit floats (their own reference: test_half.cpp,
// HalfKernels.*) and for kCount (a failure).
template <typename R, typename F>
R visit_storage(DType t, F&& f) {
  switch (t) {
    case DType::kInt8:
      return f(Type<int8_t>{});
    case DType::kUint8:
      return f(Type<uint8_t>{});
    case DType::kInt16:
      return f(Type<int16_t>{});
    case DType::kUint16:
      return f(Type<uint16_t>{});
    case DType::kInt32:
      return f(Type<int32_t>{});
    case DType::kUint32:
      return f(Type<uint32_t>{});
    case DType::kInt64:
      return f(Type<int64_t>{});
    case DType::kUint64:
      return f(Type<uint64_t>{});
    case DType::kFloat:
      return f(Type<float>{});
    case DType::kDouble:
      return f(Type<double>{});
    case DType::kLongDouble:
      return f(Type<long double>{});
    case DType::kBool:
      return f(Type<uint8_t>{});
    case DType::kByte:
      return f(Type<uint8_t>{});
    case DType::kComplexFloat:
      return f(Type<ComplexOf<float>>{});
    case DType::kComplexDouble:
      return f(Type<ComplexOf<double>>{});
    case DType::kComplexLongDouble:
      return f(Type<ComplexOf<long double>>{});
    case DType::kFloatInt:
      return f(Type<LocPair<float, int>>{});
    case DType::kDoubleInt:
      return f(Type<LocPair<double, int>>{});
    case DType::kLongInt:
      return f(Type<LocPair<long, int>>{});
    case DType::kIntInt:
      return f(Type<LocPair<int, int>>{});
    case DType::kShortInt:
      return f(Type<LocPair<short, int>>{});
    case DType::kLongDoubleInt:
      return f(Type<LocPair<long double, int>>{});
    case DType::kFloatFloat:
      return f(Type<LocPair<float, float>>{});
    case DType::kDoubleDouble:
      return f(Type<LocPair<double, double>>{});
    case DType::kFloat16:
    case DType::kBfloat16:
      return R{};
    case DType::kCount:
      break;
  }
  ADD_FAILURE() << "bad type";
  return R{};
}

std::vector<unsigned char> check_pair_dispatch(ROp op, DType t, int isa, size_t offset,
                                               uint64_t seed,
                                               const std::vector<size_t>& counts = kCounts) {
  return visit_storage<std::vector<unsigned char>>(t, [&](auto type) {
    return check_pair<typename decltype(type)::type>(op, t, isa, offset, seed, counts);
  });
}

uint64_t seed_for(ROp op, DType t) {
  return 0x5eed0000u + static_cast<uint64_t>(op) * 131 + static_cast<uint64_t>(t);
}

// ---- dtype.cpp -----------------------------------------------------------------------------

TEST(DType, Sizes) {
  EXPECT_EQ(dtype_size(DType::kInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kUint8), 1u);
  EXPECT_EQ(dtype_size(DType::kInt16), 2u);
  EXPECT_EQ(dtype_size(DType::kUint16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt32), 4u);
  EXPECT_EQ(dtype_size(DType::kUint32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kUint64), 8u);
  EXPECT_EQ(dtype_size(DType::kFloat), 4u);
  EXPECT_EQ(dtype_size(DType::kDouble), 8u);
  EXPECT_EQ(dtype_size(DType::kLongDouble), sizeof(long double));
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_size(DType::kByte), 1u);
}

TEST(DType, NamesAreDistinct) {
  for (DType t : all_types()) {
    for (DType u : all_types()) {
      if (t != u) {
        EXPECT_STRNE(dtype_name(t), dtype_name(u));
      }
    }
  }
  for (ROp op : all_ops()) {
    for (ROp p : all_ops()) {
      if (op != p) {
        EXPECT_STRNE(rop_name(op), rop_name(p));
      }
    }
  }
  EXPECT_STREQ(dtype_name(DType::kFloat), "float");
  EXPECT_STREQ(rop_name(ROp::kBxor), "bxor");
}

TEST(DType, OpValidExplicit) {
  EXPECT_TRUE(op_valid(ROp::kSum, DType::kFloat));
  EXPECT_TRUE(op_valid(ROp::kProd, DType::kLongDouble));
  EXPECT_TRUE(op_valid(ROp::kMax, DType::kUint64));
  EXPECT_TRUE(op_valid(ROp::kLand, DType::kBool));
  EXPECT_TRUE(op_valid(ROp::kLxor, DType::kInt16));
  EXPECT_TRUE(op_valid(ROp::kBand, DType::kByte));
  EXPECT_TRUE(op_valid(ROp::kBxor, DType::kInt32));
  EXPECT_FALSE(op_valid(ROp::kSum, DType::kBool));
  EXPECT_FALSE(op_valid(ROp::kMin, DType::kBool));
  EXPECT_FALSE(op_valid(ROp::kSum, DType::kByte));
  EXPECT_FALSE(op_valid(ROp::kLand, DType::kFloat));
  EXPECT_FALSE(op_valid(ROp::kLor, DType::kByte));
  EXPECT_FALSE(op_valid(ROp::kBand, DType::kDouble));
  EXPECT_FALSE(op_valid(ROp::kBor, DType::kBool));
  EXPECT_FALSE(op_valid(ROp::kCount, DType::kInt32));
  EXPECT_FALSE(op_valid(ROp::kSum, DType::kCount));
}

TEST(DType, OpValidMatchesMpiTable) {
  int valid = 0;
  for (ROp op : all_ops()) {
    for (DType t : all_types()) {
      EXPECT_EQ(op_valid(op, t), expected_valid(op, t)) << pair_name(op, t);
      valid += op_valid(op, t);
    }
  }
  // SUM/PROD/MIN/MAX on 8 integer + 5 floating types, logical on 8 + bool, bitwise on 8 + byte,
  // SUM/PROD on 3 complex types, MINLOC/MAXLOC on 8 pair types.
  EXPECT_EQ(valid, 4 * 13 + 3 * 9 + 3 * 9 + 2 * 3 + 2 * 8);
}

// ---- reduce_kernels.cpp --------------------------------------------------------------------

TEST(ReduceKernels, EveryValidPairMatchesReference) {
  for (ROp op : all_ops()) {
    for (DType t : all_types()) {
      if (!op_valid(op, t)) continue;
      check_pair_dispatch(op, t, -1, 0, seed_for(op, t));
      // Element-aligned but not vector-aligned.
      check_pair_dispatch(op, t, -1, dtype_size(t), seed_for(op, t) + 1);
      // 16-byte aligned only: enough for the 32-byte types (no bounce buffers).
      if (dtype_size(t) > 16) check_pair_dispatch(op, t, -1, 16, seed_for(op, t) + 6);
    }
  }
}

TEST(ReduceKernels, MisalignedBuffersUseSamePath) {
  // One byte off element alignment (legal for MPI buffers): bounce-buffer path.
  for (ROp op : all_ops()) {
    for (DType t : all_types()) {
      if (!op_valid(op, t) || dtype_size(t) == 1) continue;
      check_pair_dispatch(op, t, -1, 1, seed_for(op, t) + 2);
    }
  }
}

TEST(ReduceKernels, EveryIsaVariantGivesSameBits) {
  ASSERT_GE(ki::num_isas(), 1);
  EXPECT_TRUE(ki::isa_available(0));
  EXPECT_TRUE(ki::isa_available(ki::selected_isa()));
  EXPECT_FALSE(ki::isa_available(ki::num_isas()));
  for (int isa = 0; isa < ki::num_isas(); ++isa) {
    if (!ki::isa_available(isa)) {
      std::printf("[   INFO   ] ISA %s not available here, skipped\n", ki::isa_name(isa));
      continue;
    }
    for (ROp op : all_ops()) {
      for (DType t : all_types()) {
        if (!op_valid(op, t)) continue;
        const uint64_t seed = seed_for(op, t) + 3;
        const auto base = check_pair_dispatch(op, t, 0, dtype_size(t), seed);
        const auto bits = check_pair_dispatch(op, t, isa, dtype_size(t), seed);
        EXPECT_EQ(base, bits) << pair_name(op, t) << " isa " << ki::isa_name(isa);
      }
    }
  }
}

TEST(ReduceKernels, StreamingStoresPathMatchesReference) {
  // Force the non-temporal path (normally only for arrays >= half the LLC) down to small
  // arrays; counts cover several 8 KiB blocks plus a tail, for every element size.
  const size_t previous = ki::set_streaming_threshold(0);
  for (ROp op : all_ops()) {
    for (DType t : all_types()) {
      if (!op_valid(op, t)) continue;
      const size_t per_block = 8192 / dtype_size(t);
      const std::vector<size_t> counts = {1, 17, per_block - 1, 3 * per_block + 5};
      const uint64_t seed = seed_for(op, t) + 4;
      std::vector<size_t> offsets = {0, dtype_size(t), 3 * dtype_size(t)};
      // 32-byte types (complex long double, long double-int) need only 16-byte alignment.
      if (dtype_size(t) > 16) offsets.push_back(16);
      for (size_t offset : offsets) check_pair_dispatch(op, t, -1, offset, seed, counts);
    }
  }
  ki::set_streaming_threshold(previous);
}

TEST(ReduceKernels, InvalidPairsReturnErrOpAndLeaveDstUntouched) {
  for (ROp op : all_ops()) {
    for (DType t : all_types()) {
      if (op_valid(op, t)) continue;
      SCOPED_TRACE(pair_name(op, t));
      const size_t count = 33;
      std::vector<unsigned char> a(count * 16, 1), b(count * 16, 2), d(count * 16, 0x5A);
      const std::vector<unsigned char> d0 = d;
      EXPECT_EQ(reduce(op, t, d.data(), a.data(), b.data(), count), Status::kErrOp);
      EXPECT_EQ(d, d0);
      EXPECT_EQ(reduce(op, t, d.data(), a.data(), b.data(), 0), Status::kErrOp);
      EXPECT_EQ(reduce(op, t, a.data(), a.data(), b.data(), count), Status::kErrOp);
      EXPECT_EQ(a, std::vector<unsigned char>(count * 16, 1));
    }
  }
  unsigned char x = 7;
  EXPECT_EQ(reduce(ROp::kCount, DType::kInt8, &x, &x, &x, 1), Status::kErrOp);
  EXPECT_EQ(reduce(ROp::kSum, DType::kCount, &x, &x, &x, 1), Status::kErrType);
  EXPECT_EQ(x, 7);
}

TEST(ReduceKernels, CountZeroIsNoOp) {
  EXPECT_EQ(reduce(ROp::kSum, DType::kFloat, nullptr, nullptr, nullptr, 0), Status::kOk);
  float d = 3.0f;
  const float a = 1.0f, b = 2.0f;
  EXPECT_EQ(reduce(ROp::kSum, DType::kFloat, &d, &a, &b, 0), Status::kOk);
  EXPECT_EQ(d, 3.0f);
}

TEST(ReduceKernels, NullBufferWithCount) {
  float d = 0, a = 1;
  EXPECT_EQ(reduce(ROp::kSum, DType::kFloat, &d, &a, nullptr, 1), Status::kErrBuffer);
  EXPECT_EQ(reduce(ROp::kSum, DType::kFloat, nullptr, &a, &a, 1), Status::kErrBuffer);
}

TEST(ReduceKernels, IntegerOverflowWraps) {
  const uint8_t a8[] = {200, 255, 16};
  const uint8_t b8[] = {100, 1, 16};
  uint8_t s8[3], p8[3];
  ASSERT_EQ(reduce(ROp::kSum, DType::kUint8, s8, a8, b8, 3), Status::kOk);
  ASSERT_EQ(reduce(ROp::kProd, DType::kUint8, p8, a8, b8, 3), Status::kOk);
  EXPECT_EQ(s8[0], 44);
  EXPECT_EQ(s8[1], 0);
  EXPECT_EQ(p8[0], static_cast<uint8_t>(20000 % 256));
  EXPECT_EQ(p8[2], 0);

  const uint16_t a16 = 65535, b16 = 65535;  // would overflow a promoted signed int
  uint16_t p16 = 0;
  ASSERT_EQ(reduce(ROp::kProd, DType::kUint16, &p16, &a16, &b16, 1), Status::kOk);
  EXPECT_EQ(p16, 1);

  const uint32_t a32[] = {UINT32_MAX, 0x80000000u};
  const uint32_t b32[] = {1, 2};
  uint32_t s32[2], p32[2];
  ASSERT_EQ(reduce(ROp::kSum, DType::kUint32, s32, a32, b32, 2), Status::kOk);
  ASSERT_EQ(reduce(ROp::kProd, DType::kUint32, p32, a32, b32, 2), Status::kOk);
  EXPECT_EQ(s32[0], 0u);
  EXPECT_EQ(p32[1], 0u);

  const uint64_t a64 = UINT64_MAX, b64 = 3;
  uint64_t s64 = 0, p64 = 0;
  ASSERT_EQ(reduce(ROp::kSum, DType::kUint64, &s64, &a64, &b64, 1), Status::kOk);
  ASSERT_EQ(reduce(ROp::kProd, DType::kUint64, &p64, &a64, &b64, 1), Status::kOk);
  EXPECT_EQ(s64, 2u);
  EXPECT_EQ(p64, UINT64_MAX - 2);

  // Signed overflow also wraps (two's complement), without UB inside the kernel.
  const int32_t ai = INT32_MAX, bi = 1;
  int32_t si = 0;
  ASSERT_EQ(reduce(ROp::kSum, DType::kInt32, &si, &ai, &bi, 1), Status::kOk);
  EXPECT_EQ(si, INT32_MIN);
  const int8_t am = -128, bm = -1;
  int8_t pm = 0;
  ASSERT_EQ(reduce(ROp::kProd, DType::kInt8, &pm, &am, &bm, 1), Status::kOk);
  EXPECT_EQ(pm, -128);
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kDouble;
}
template <>
constexpr DType dtype_of<long double>() {
  return DType::kLongDouble;
}

template <typename T>
void check_float_min_max() {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T inf = std::numeric_limits<T>::infinity();
  const T pz = T(0), nz = -T(0);
  const T a[] = {pz, nz, pz, nz, T(1), nan, T(2), -inf, inf, T(-3), T(5), T(5)};
  const T b[] = {nz, pz, pz, nz, nan, T(1), nan, T(7), T(-1), T(-4), T(5), T(6)};
  constexpr size_t n = sizeof(a) / sizeof(a[0]);
  T mn[n], mx[n];
  ASSERT_EQ(reduce(ROp::kMin, dtype_of<T>(), mn, a, b, n), Status::kOk);
  ASSERT_EQ(reduce(ROp::kMax, dtype_of<T>(), mx, a, b, n), Status::kOk);
  EXPECT_TRUE(mn[0] == 0 && std::signbit(mn[0]));   // min(+0, -0) = -0
  EXPECT_TRUE(mn[1] == 0 && std::signbit(mn[1]));   // min(-0, +0) = -0
  EXPECT_TRUE(mx[0] == 0 && !std::signbit(mx[0]));  // max(+0, -0) = +0
  EXPECT_TRUE(mx[1] == 0 && !std::signbit(mx[1]));
  EXPECT_TRUE(mn[2] == 0 && !std::signbit(mn[2]));
  EXPECT_TRUE(mx[3] == 0 && std::signbit(mx[3]));
  for (size_t i = 4; i <= 6; ++i) {
    EXPECT_TRUE(std::isnan(mn[i])) << i;
    EXPECT_TRUE(std::isnan(mx[i])) << i;
    EXPECT_FALSE(std::signbit(mn[i])) << i;  // the default quiet NaN, whatever the order
  }
  EXPECT_EQ(mn[7], -inf);
  EXPECT_EQ(mx[7], T(7));
  EXPECT_EQ(mn[8], T(-1));
  EXPECT_EQ(mx[8], inf);
  EXPECT_EQ(mn[9], T(-4));
  EXPECT_EQ(mx[9], T(-3));
  EXPECT_EQ(mn[10], T(5));
  EXPECT_EQ(mx[11], T(6));
}

TEST(ReduceKernels, FloatMinMaxSemantics) {
  check_float_min_max<float>();
  check_float_min_max<double>();
  check_float_min_max<long double>();
}

TEST(ReduceKernels, FloatMinMaxIsCommutativeBitwise) {
  std::mt19937_64 rng(42);
  const size_t n = 4099;
  std::vector<double> a(n), b(n), ab(n), ba(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = random_elem<double>(rng, DType::kDouble);
    b[i] = (i % 5 == 0) ? a[i] : random_elem<double>(rng, DType::kDouble);
  }
  for (ROp op : {ROp::kMin, ROp::kMax, ROp::kSum, ROp::kProd}) {
    ASSERT_EQ(reduce(op, DType::kDouble, ab.data(), a.data(), b.data(), n), Status::kOk);
    ASSERT_EQ(reduce(op, DType::kDouble, ba.data(), b.data(), a.data(), n), Status::kOk);
    EXPECT_EQ(std::memcmp(ab.data(), ba.data(), n * sizeof(double)), 0) << rop_name(op);
  }
}

TEST(ReduceKernels, ComplexSumAndProd) {
  using C = ComplexOf<double>;
  const C a[] = {{1, 2}, {0, 1}, {-2, 0.5}};
  const C b[] = {{3, 4}, {0, 1}, {0.25, -4}};
  C s[3], p[3];
  ASSERT_EQ(reduce(ROp::kSum, DType::kComplexDouble, s, a, b, 3), Status::kOk);
  ASSERT_EQ(reduce(ROp::kProd, DType::kComplexDouble, p, a, b, 3), Status::kOk);
  EXPECT_EQ(s[0].re, 4);
  EXPECT_EQ(s[0].im, 6);
  EXPECT_EQ(p[0].re, -5);  // (1 + 2i)(3 + 4i) = -5 + 10i
  EXPECT_EQ(p[0].im, 10);
  EXPECT_EQ(p[1].re, -1);  // i * i
  EXPECT_EQ(p[1].im, 0);
  EXPECT_EQ(p[2].re, 1.5);  // (-2 + 0.5i)(0.25 - 4i) = (-0.5 + 2) + (8 + 0.125)i
  EXPECT_EQ(p[2].im, 8.125);
  EXPECT_EQ(dtype_size(DType::kComplexFloat), 8u);
  EXPECT_EQ(dtype_size(DType::kComplexDouble), 16u);
  EXPECT_EQ(dtype_size(DType::kComplexLongDouble), 2 * sizeof(long double));
  for (ROp op : {ROp::kMin, ROp::kMax, ROp::kLand, ROp::kBand, ROp::kMinloc}) {
    EXPECT_FALSE(op_valid(op, DType::kComplexFloat)) << rop_name(op);
  }
}

TEST(ReduceKernels, LocSemantics) {
  using P = LocPair<double, int>;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // equal values, smaller value first, larger first, NaN one side, NaN both, -0 against +0.
  const P a[] = {{3, 5}, {1, 7}, {2, 0}, {nan, 6}, {nan, 4}, {-0.0, 3}};
  const P b[] = {{3, 2}, {2, 0}, {1, 7}, {-1, 1}, {nan, 2}, {0.0, 9}};
  P mn[6], mx[6];
  ASSERT_EQ(reduce(ROp::kMinloc, DType::kDoubleInt, mn, a, b, 6), Status::kOk);
  ASSERT_EQ(reduce(ROp::kMaxloc, DType::kDoubleInt, mx, a, b, 6), Status::kOk);
  EXPECT_EQ(mn[0].value, 3);
  EXPECT_EQ(mn[0].index, 2);  // ties: the smaller index, MINLOC and MAXLOC alike
  EXPECT_EQ(mx[0].index, 2);
  EXPECT_EQ(mn[1].value, 1);
  EXPECT_EQ(mn[1].index, 7);
  EXPECT_EQ(mx[1].value, 2);
  EXPECT_EQ(mx[1].index, 0);
  EXPECT_EQ(mn[2].index, 7);
  EXPECT_EQ(mx[2].index, 0);
  EXPECT_TRUE(std::isnan(mn[3].value));
  EXPECT_EQ(mn[3].index, 6);
  EXPECT_TRUE(std::isnan(mx[3].value));
  EXPECT_EQ(mx[3].index, 6);
  EXPECT_EQ(mn[4].index, 2);
  EXPECT_TRUE(mn[5].value == 0 && std::signbit(mn[5].value));
  EXPECT_TRUE(mx[5].value == 0 && !std::signbit(mx[5].value));
  EXPECT_EQ(mn[5].index, 3);
  EXPECT_EQ(mx[5].index, 3);
  // The C struct sizes (MPI's extents): padding included.
  EXPECT_EQ(dtype_size(DType::kDoubleInt), sizeof(P));
  EXPECT_EQ(dtype_size(DType::kShortInt), 8u);
  EXPECT_EQ(dtype_size(DType::kIntInt), 8u);
  EXPECT_EQ(dtype_size(DType::kLongDoubleInt), sizeof(LocPair<long double, int>));
  for (ROp op : {ROp::kSum, ROp::kProd, ROp::kMin, ROp::kMax, ROp::kBor}) {
    EXPECT_FALSE(op_valid(op, DType::kIntInt)) << rop_name(op);
  }
  EXPECT_FALSE(op_valid(ROp::kMinloc, DType::kInt32));
  EXPECT_FALSE(op_valid(ROp::kMaxloc, DType::kDouble));
}

// Where a skip changes the order in which pieces meet, MINLOC/MAXLOC still give the same bits:
// commutative and associative bit for bit (NaN and signed zeros included); complex SUM/PROD are
// commutative bit for bit.
TEST(ReduceKernels, CompositeOpsOrderIndependence) {
  for (ROp op : all_ops()) {
    for (DType t : all_types()) {
      if (!op_valid(op, t) || !(is_complex(t) || is_loc_pair(t))) continue;
      SCOPED_TRACE(pair_name(op, t));
      const size_t n = 1001, bytes = n * dtype_size(t);
      std::vector<unsigned char> a(bytes), b(bytes), c(bytes), x(bytes), y(bytes);
      std::mt19937_64 rng(seed_for(op, t) + 5);
      for (auto* v : {&a, &b, &c}) {
        visit_storage<bool>(t, [&](auto type) {
          fill_random<typename decltype(type)::type>(rng, t, v->data(), n);
          return true;
        });
      }
      ASSERT_EQ(reduce(op, t, x.data(), a.data(), b.data(), n), Status::kOk);
      ASSERT_EQ(reduce(op, t, y.data(), b.data(), a.data(), n), Status::kOk);
      EXPECT_EQ(x, y) << "not commutative";
      if (is_loc_pair(t)) {
        ASSERT_EQ(reduce(op, t, x.data(), x.data(), c.data(), n), Status::kOk);  // (a b) c
        ASSERT_EQ(reduce(op, t, y.data(), b.data(), c.data(), n), Status::kOk);  // a (b c)
        ASSERT_EQ(reduce(op, t, y.data(), a.data(), y.data(), n), Status::kOk);
        EXPECT_EQ(x, y) << "not associative";
      }
    }
  }
}

TEST(ReduceKernels, LogicalOpsGiveZeroOrOne) {
  const int32_t a[] = {2, 0, -7, 0, 4};
  const int32_t b[] = {4, 9, 0, 0, 4};
  int32_t land[5], lor[5], lxor[5];
  ASSERT_EQ(reduce(ROp::kLand, DType::kInt32, land, a, b, 5), Status::kOk);
  ASSERT_EQ(reduce(ROp::kLor, DType::kInt32, lor, a, b, 5), Status::kOk);
  ASSERT_EQ(reduce(ROp::kLxor, DType::kInt32, lxor, a, b, 5), Status::kOk);
  const int32_t want_and[] = {1, 0, 0, 0, 1};
  const int32_t want_or[] = {1, 1, 1, 0, 1};
  const int32_t want_xor[] = {0, 1, 1, 0, 0};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(land[i], want_and[i]) << i;
    EXPECT_EQ(lor[i], want_or[i]) << i;
    EXPECT_EQ(lxor[i], want_xor[i]) << i;
  }
  // C bool buffers holding bytes other than 0/1 still count as true; results are 0/1.
  const uint8_t ba[] = {2, 255, 0, 1};
  const uint8_t bb[] = {3, 0, 0, 128};
  uint8_t r[4];
  ASSERT_EQ(reduce(ROp::kLand, DType::kBool, r, ba, bb, 4), Status::kOk);
  EXPECT_EQ(std::vector<uint8_t>(r, r + 4), (std::vector<uint8_t>{1, 0, 0, 1}));
  ASSERT_EQ(reduce(ROp::kLxor, DType::kBool, r, ba, bb, 4), Status::kOk);
  EXPECT_EQ(std::vector<uint8_t>(r, r + 4), (std::vector<uint8_t>{0, 1, 0, 0}));
  ASSERT_EQ(reduce(ROp::kLor, DType::kBool, r, ba, bb, 4), Status::kOk);
  EXPECT_EQ(std::vector<uint8_t>(r, r + 4), (std::vector<uint8_t>{1, 1, 0, 1}));
  // Real bool arrays work too.
  const bool xa[] = {true, false, true};
  const bool xb[] = {true, true, false};
  bool xr[3];
  ASSERT_EQ(reduce(ROp::kLand, DType::kBool, xr, xa, xb, 3), Status::kOk);
  EXPECT_TRUE(xr[0]);
  EXPECT_FALSE(xr[1]);
  EXPECT_FALSE(xr[2]);
}

TEST(ReduceKernels, ByteBitwise) {
  const uint8_t a[] = {0xF0, 0xAA};
  const uint8_t b[] = {0x3C, 0x55};
  uint8_t r[2];
  ASSERT_EQ(reduce(ROp::kBand, DType::kByte, r, a, b, 2), Status::kOk);
  EXPECT_EQ(r[0], 0x30);
  EXPECT_EQ(r[1], 0x00);
  ASSERT_EQ(reduce(ROp::kBor, DType::kByte, r, a, b, 2), Status::kOk);
  EXPECT_EQ(r[1], 0xFF);
  ASSERT_EQ(reduce(ROp::kBxor, DType::kByte, r, a, b, 2), Status::kOk);
  EXPECT_EQ(r[0], 0xCC);
}

// ---- mpi_types.cpp (no MPI_Init needed for these) ------------------------------------------

TEST(MpiTypes, OpMapping) {
  const MPI_Op ops[] = {MPI_SUM,  MPI_PROD, MPI_MIN, MPI_MAX,  MPI_LAND,   MPI_LOR,
                        MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC};
  static_assert(sizeof(ops) / sizeof(ops[0]) == kNumROps, "one MPI op per ROp");
  for (int i = 0; i < kNumROps; ++i) {
    ROp r = ROp::kCount;
    ASSERT_TRUE(rop_from_mpi(ops[i], &r)) << i;
    EXPECT_EQ(r, static_cast<ROp>(i));
  }
  ROp r = ROp::kSum;
  EXPECT_FALSE(rop_from_mpi(MPI_REPLACE, &r));
  EXPECT_FALSE(rop_from_mpi(MPI_NO_OP, &r));
  EXPECT_FALSE(rop_from_mpi(MPI_OP_NULL, &r));
  EXPECT_EQ(r, ROp::kSum);
}

template <typename T>
DType expected_int_dtype() {
  const bool s = std::is_signed_v<T>;
  switch (sizeof(T)) {
    case 1:
      return s ? DType::kInt8 : DType::kUint8;
    case 2:
      return s ? DType::kInt16 : DType::kUint16;
    case 4:
      return s ? DType::kInt32 : DType::kUint32;
    default:
      return s ? DType::kInt64 : DType::kUint64;
  }
}

TEST(MpiTypes, CTypeMapping) {
  struct Case {
    MPI_Datatype mpi;
    DType want;
  };
  const Case cases[] = {
      {MPI_SIGNED_CHAR, DType::kInt8},
      {MPI_UNSIGNED_CHAR, DType::kUint8},
      {MPI_SHORT, expected_int_dtype<short>()},
      {MPI_UNSIGNED_SHORT, expected_int_dtype<unsigned short>()},
      {MPI_INT, expected_int_dtype<int>()},
      {MPI_UNSIGNED, expected_int_dtype<unsigned>()},
      {MPI_LONG, expected_int_dtype<long>()},
      {MPI_UNSIGNED_LONG, expected_int_dtype<unsigned long>()},
      {MPI_LONG_LONG_INT, expected_int_dtype<long long>()},
      {MPI_LONG_LONG, expected_int_dtype<long long>()},
      {MPI_UNSIGNED_LONG_LONG, expected_int_dtype<unsigned long long>()},
      {MPI_INT8_T, DType::kInt8},
      {MPI_UINT8_T, DType::kUint8},
      {MPI_INT16_T, DType::kInt16},
      {MPI_UINT16_T, DType::kUint16},
      {MPI_INT32_T, DType::kInt32},
      {MPI_UINT32_T, DType::kUint32},
      {MPI_INT64_T, DType::kInt64},
      {MPI_UINT64_T, DType::kUint64},
      {MPI_FLOAT, DType::kFloat},
      {MPI_DOUBLE, DType::kDouble},
      {MPI_LONG_DOUBLE, DType::kLongDouble},
      {MPI_C_BOOL, DType::kBool},
      {MPI_BYTE, DType::kByte},
      {MPI_C_COMPLEX, DType::kComplexFloat},
      {MPI_C_FLOAT_COMPLEX, DType::kComplexFloat},
      {MPI_C_DOUBLE_COMPLEX, DType::kComplexDouble},
      {MPI_C_LONG_DOUBLE_COMPLEX, DType::kComplexLongDouble},
#ifdef MPI_CXX_DOUBLE_COMPLEX
      {MPI_CXX_FLOAT_COMPLEX, DType::kComplexFloat},
      {MPI_CXX_DOUBLE_COMPLEX, DType::kComplexDouble},
      {MPI_CXX_LONG_DOUBLE_COMPLEX, DType::kComplexLongDouble},
#endif
      {MPI_FLOAT_INT, DType::kFloatInt},
      {MPI_DOUBLE_INT, DType::kDoubleInt},
      {MPI_LONG_INT, DType::kLongInt},
      {MPI_2INT, DType::kIntInt},
      {MPI_SHORT_INT, DType::kShortInt},
      {MPI_LONG_DOUBLE_INT, DType::kLongDoubleInt},
  };
  for (const Case& c : cases) {
    DType d = DType::kCount;
    ASSERT_TRUE(dtype_from_mpi(c.mpi, &d)) << dtype_name(c.want);
    EXPECT_EQ(d, c.want);
  }
  DType d = DType::kFloat;
  EXPECT_FALSE(dtype_from_mpi(MPI_CHAR, &d));
  EXPECT_FALSE(dtype_from_mpi(MPI_WCHAR, &d));
  EXPECT_FALSE(dtype_from_mpi(MPI_DATATYPE_NULL, &d));
  EXPECT_FALSE(dtype_from_mpi(MPI_PACKED, &d));
  EXPECT_EQ(d, DType::kFloat);
  EXPECT_FALSE(dtype_from_mpi(MPI_INT, nullptr));
}

// classify_reduction is the C API's one check of an MPI (datatype, op) pair.
TEST(MpiTypes, ClassifyReduction) {
  DType d = DType::kCount;
  ROp r = ROp::kCount;
  EXPECT_EQ(classify_reduction(MPI_INT, MPI_SUM, &d, &r), MpiReduction::kNative);
  EXPECT_EQ(d, DType::kInt32);
  EXPECT_EQ(r, ROp::kSum);
  EXPECT_EQ(classify_reduction(MPI_C_BOOL, MPI_LXOR, &d, &r), MpiReduction::kNative);
  // Predefined op on a predefined type MPI does not define it for: MPI_ERR_OP.
  EXPECT_EQ(classify_reduction(MPI_BYTE, MPI_SUM, &d, &r), MpiReduction::kUndefined);
  EXPECT_EQ(classify_reduction(MPI_FLOAT, MPI_BXOR, &d, &r), MpiReduction::kUndefined);
  EXPECT_EQ(classify_reduction(MPI_C_BOOL, MPI_MIN, &d, &r), MpiReduction::kUndefined);
  // Complex SUM/PROD and MINLOC/MAXLOC on pairs are skipring's; other mixes are MPI_ERR_OP.
  EXPECT_EQ(classify_reduction(MPI_2INT, MPI_MAXLOC, &d, &r), MpiReduction::kNative);
  EXPECT_EQ(d, DType::kIntInt);
  EXPECT_EQ(r, ROp::kMaxloc);
  EXPECT_EQ(classify_reduction(MPI_DOUBLE_INT, MPI_MINLOC, &d, &r), MpiReduction::kNative);
  EXPECT_EQ(classify_reduction(MPI_C_DOUBLE_COMPLEX, MPI_PROD, &d, &r), MpiReduction::kNative);
  EXPECT_EQ(d, DType::kComplexDouble);
  EXPECT_EQ(classify_reduction(MPI_2INT, MPI_SUM, &d, &r), MpiReduction::kUndefined);
  EXPECT_EQ(classify_reduction(MPI_DOUBLE, MPI_MINLOC, &d, &r), MpiReduction::kUndefined);
  EXPECT_EQ(classify_reduction(MPI_C_FLOAT_COMPLEX, MPI_MAX, &d, &r), MpiReduction::kUndefined);
  // Not skipring's: PMPI.
  EXPECT_EQ(classify_reduction(MPI_CHAR, MPI_SUM, &d, &r), MpiReduction::kOther);
  EXPECT_EQ(classify_reduction(MPI_INT, MPI_REPLACE, &d, &r), MpiReduction::kOther);
  // Agrees with op_valid on every pair of the mapped types and ops.
  const MPI_Datatype types[] = {MPI_INT8_T, MPI_UINT16_T,  MPI_INT,         MPI_UINT64_T,
                                MPI_FLOAT,  MPI_DOUBLE,    MPI_LONG_DOUBLE, MPI_C_BOOL,
                                MPI_BYTE,   MPI_C_COMPLEX, MPI_2INT,        MPI_SHORT_INT};
  const MPI_Op ops[] = {MPI_SUM,  MPI_PROD, MPI_MIN, MPI_MAX,  MPI_LAND,   MPI_LOR,
                        MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC};
  for (MPI_Datatype t : types) {
    for (MPI_Op op : ops) {
      DType dt;
      ROp rop;
      ASSERT_TRUE(dtype_from_mpi(t, &dt) && rop_from_mpi(op, &rop));
      EXPECT_EQ(classify_reduction(t, op, &d, &r),
                op_valid(rop, dt) ? MpiReduction::kNative : MpiReduction::kUndefined)
          << dtype_name(dt) << " " << rop_name(rop);
    }
  }
}

TEST(MpiTypes, FortranTypesNeedInitializedMpi) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  DType d = DType::kCount;
  if (!initialized) {
    // The size of Fortran INTEGER is only known to a running MPI library.
    EXPECT_FALSE(dtype_from_mpi(MPI_INTEGER, &d));
    EXPECT_FALSE(dtype_from_mpi(MPI_REAL, &d));
    EXPECT_FALSE(dtype_from_mpi(MPI_DOUBLE_PRECISION, &d));
    EXPECT_FALSE(dtype_from_mpi(MPI_COMPLEX, &d));
    EXPECT_FALSE(dtype_from_mpi(MPI_DOUBLE_COMPLEX, &d));
    EXPECT_FALSE(dtype_from_mpi(MPI_2REAL, &d));
    EXPECT_FALSE(dtype_from_mpi(MPI_2INTEGER, &d));
  } else if (MPI_INTEGER != MPI_DATATYPE_NULL) {
    int size = 0;
    MPI_Type_size(MPI_INTEGER, &size);
    if (size == 4 || size == 8) {
      ASSERT_TRUE(dtype_from_mpi(MPI_INTEGER, &d));
      EXPECT_EQ(d, size == 4 ? DType::kInt32 : DType::kInt64);
    }
  }
}

}  // namespace
}  // namespace skipring
