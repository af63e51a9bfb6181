// Test data shared by the harness tests.
#include "tests/unit/test_data.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "collectives/elem_types.h"

namespace skipring {
namespace testdata {
namespace {

template <typename T>
void fill_typed(void* p, size_t count, std::mt19937_64& rng, ROp op, bool wide) {
  T* v = static_cast<T*>(p);
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      std::uniform_real_distribution<double> d(op == ROp::kProd ? 0.9 : -100.0,
                                               op == ROp::kProd ? 1.1 : 100.0);
      double x = d(rng);
      if (wide && op == ROp::kSum) x *= std::ldexp(1.0, static_cast<int>(rng() % 40) - 20);
      std::memset(&v[i], 0, sizeof(T));  // long double padding stays zero
      v[i] = static_cast<T>(x);
    } else {
      v[i] = static_cast<T>(rng() % (op == ROp::kProd ? 5 : 1000));
    }
  }
}

// Complex numbers whose sums and products are exact in any order, signed zeros included: SUM
// parts in -10..10; PROD factors 1, 2 + i and 2 - i, whose products (5^k (2 +- i)^m: 16 factors
// stay below 2^19 in magnitude) have no zero part except a positive real's +0 imaginary part, so
// no order can make a -0 (a factor with a zero part and a negative one, such as -1 or i, could).
template <typename R>
void fill_complex(void* p, size_t count, std::mt19937_64& rng, ROp op) {
  auto* v = static_cast<ComplexOf<R>*>(p);
  const int factors[3][2] = {{1, 0}, {2, 1}, {2, -1}};
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rng();
    if (op == ROp::kProd) {
      v[i].re = static_cast<R>(factors[r % 3][0]);
      v[i].im = static_cast<R>(factors[r % 3][1]);
    } else {
      v[i].re = static_cast<R>(static_cast<int>(r % 21) - 10);
      v[i].im = static_cast<R>(static_cast<int>((r >> 8) % 21) - 10);
    }
  }
}

// MINLOC/MAXLOC pairs: values from a small set (so ranks tie) and indices 0..15.
template <typename V, typename I>
void fill_loc(void* p, size_t count, std::mt19937_64& rng) {
  auto* v = static_cast<LocPair<V, I>*>(p);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rng();
    v[i].value = static_cast<V>(static_cast<int>(r % 5) - 2);
    v[i].index = static_cast<I>((r >> 8) % 16);
  }
}

}  // namespace

bool is_float(DType t) {
  return t == DType::kFloat || t == DType::kDouble || t == DType::kLongDouble;
}

void fill(DType t, void* p, size_t count, std::mt19937_64& rng, ROp op, bool wide) {
  switch (t) {
    case DType::kInt8:
      return fill_typed<int8_t>(p, count, rng, op, wide);
    case DType::kUint8:
      return fill_typed<uint8_t>(p, count, rng, op, wide);
    case DType::kInt16:
      return fill_typed<int16_t>(p, count, rng, op, wide);
    case DType::kUint16:
      return fill_typed<uint16_t>(p, count, rng, op, wide);
    case DType::kInt32:
      return fill_typed<int32_t>(p, count, rng, op, wide);
    case DType::kUint32:
      return fill_typed<uint32_t>(p, count, rng, op, wide);
    case DType::kInt64:
      return fill_typed<int64_t>(p, count, rng, op, wide);
    case DType::kUint64:
      return fill_typed<uint64_t>(p, count, rng, op, wide);
    case DType::kFloat:
      return fill_typed<float>(p, count, rng, op, wide);
    case DType::kDouble:
      return fill_typed<double>(p, count, rng, op, wide);
    case DType::kLongDouble:
      return fill_typed<long double>(p, count, rng, op, wide);
    case DType::kBool: {
      auto* b = static_cast<uint8_t*>(p);
      for (size_t i = 0; i < count; ++i) b[i] = rng() & 1;
      return;
    }
    case DType::kByte: {
      auto* b = static_cast<uint8_t*>(p);
      for (size_t i = 0; i < count; ++i) b[i] = static_cast<uint8_t>(rng());
      return;
    }
    case DType::kComplexFloat:
      return fill_complex<float>(p, count, rng, op);
    case DType::kComplexDouble:
      return fill_complex<double>(p, count, rng, op);
    case DType::kComplexLongDouble:
      return fill_complex<long double>(p, count, rng, op);
    case DType::kFloatInt:
      return fill_loc<float, int>(p, count, rng);
    case DType::kDoubleInt:
      return fill_loc<double, int>(p, count, rng);
    case DType::kLongInt:
      return fill_loc<long, int>(p, count, rng);
    case DType::kIntInt:
      return fill_loc<int, int>(p, count, rng);
    case DType::kShortInt:
      return fill_loc<short, int>(p, count, rng);
    case DType::kLongDoubleInt:
      return fill_loc<long double, int>(p, count, rng);
    case DType::kFloatFloat:
      return fill_loc<float, float>(p, count, rng);
    case DType::kDoubleDouble:
      return fill_loc<double, double>(p, count, rng);
    default:
      return;
  }
}

long double value_at(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::kFloat:
      return reinterpret_cast<const float*>(p)[i];
    case DType::kDouble:
      return reinterpret_cast<const double*>(p)[i];
    case DType::kLongDouble:
      return reinterpret_cast<const long double*>(p)[i];
    default:
      return 0;
  }
}

Buffers make_inputs(const harness::Options& o, uint64_t seed, bool wide) {
  std::mt19937_64 rng(seed);
  const size_t bytes = o.count * dtype_size(o.dtype);
  Buffers in(o.collectives, std::vector<std::vector<uint8_t>>(o.n));
  for (auto& coll : in) {
    for (auto& r : coll) {
      r.assign(bytes, 0);
      fill(o.dtype, r.data(), o.count, rng, o.op, wide);
    }
  }
  return in;
}

}  // namespace testdata
}  // namespace skipring
