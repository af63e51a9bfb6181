// float16 / bfloat16 (collectives/half.h and the reduce kernels on DType::kFloat16 / kBfloat16)
// against an independent reference: every finite float16 value decoded from its fields in
// double, rounding by search for the nearest representable value (ties to the even bit
// pattern), and every ISA variant of the kernels compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/half.h"
#include "collectives/reduce_kernels.h"
#include "common/status.h"

namespace skipring {
namespace kernels_internal {
int num_isas();
bool isa_available(int isa);
Status reduce_isa(int isa, ROp op, DType t, void* dst, const void* a, const void* b, size_t count);
}  // namespace kernels_internal

namespace {

// float16 decoded from its fields, in double (exact).
double f16_value(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int frac = h & 0x3FF;
  if (exp == 0x1F) {
    return frac ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  }
  if (exp == 0) return sign * std::ldexp(frac, -24);
  return sign * std::ldexp(1024 + frac, exp - 25);
}

double bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Nearest float16 to x by search over the ordered non-negative finite values (0x0000 ..
// 0x7BFF); ties to the even pattern; beyond the largest finite value by at least half an ulp of
// 2^15 (i.e. >= 65520): infinity.
uint16_t ref_to_f16(double x) {
  if (std::isnan(x)) return kFloat16QuietNaN;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= 65520.0) return sign | 0x7C00;
  uint16_t lo = 0;
  uint16_t hi = 0x7BFF;
  while (hi - lo > 1) {  // largest pattern with value <= a
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (f16_value(mid) <= a) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  if (f16_value(hi) <= a) lo = hi;
  if (lo == 0x7BFF) return sign | lo;
  const uint16_t up = static_cast<uint16_t>(lo + 1);
  const double dl = a - f16_value(lo);
  const double du = f16_value(up) - a;
  const uint16_t pick = dl < du ? lo : du < dl ? up : ((lo & 1) ? up : lo);
  return sign | pick;
}

uint16_t ref_to_bf16(float f) {
  if (std::isnan(f)) return kBfloat16QuietNaN;
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t lo = static_cast<uint16_t>((u >> 16) & 0x7FFF);  // truncation: value <= a
  if (lo == 0x7F80) return sign | lo;                             // infinity
  const uint16_t up = static_cast<uint16_t>(lo + 1);
  // Above the largest finite value, 0x7F80 is infinity; IEEE rounds to it from its unbounded
  // exponent's value, 2^128 (overflow at and beyond the midpoint).
  const double up_value = up == 0x7F80 ? std::ldexp(1.0, 128) : bf16_value(up);
  const double dl = a - bf16_value(lo);
  const double du = up_value - a;
  const uint16_t pick = dl < du ? lo : du < dl ? up : ((lo & 1) ? up : lo);
  return sign | pick;
}

TEST(Half, Float16ConversionKnownValues) {
  EXPECT_EQ(float_to_float16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_float16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_float16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_float16(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_float16(65520.0f), 0x7C00);  // the tie rounds to even: infinity
  EXPECT_EQ(float_to_float16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_float16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_float16(std::ldexp(1.5f, -25)), 0x0001);  // above the tie
  EXPECT_EQ(float_to_float16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_float16(2049.0f), 0x6800);                // tie: 2048 (even)
  EXPECT_EQ(float_to_float16(2051.0f), 0x6802);                // tie: 2052 (even)
  EXPECT_EQ(float_to_float16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_float16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_float16(std::nanf("")), kFloat16QuietNaN);
  EXPECT_FLOAT_EQ(float16_to_float(0x3555), 0.333251953125f);
}

TEST(Half, Float16EveryValueRoundTripsAndDecodes) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = static_cast<uint16_t>(h);
    const float f = float16_to_float(v);
    const double ref = f16_value(v);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(float_to_float16(f), kFloat16QuietNaN) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << std::hex << h;
    ASSERT_EQ(float_to_float16(f), v) << std::hex << h;
  }
}

TEST(Half, Float16RoundingMatchesNearestSearch) {
  // Every float16 value and the points between neighbours (midpoints, and just off them),
  // plus random floats over the whole range.
  std::vector<float> probes;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double v = f16_value(static_cast<uint16_t>(h));
    const double next = h + 1 < 0x7C00 ? f16_value(static_cast<uint16_t>(h + 1)) : 65536.0;
    const float mid = static_cast<float>((v + next) / 2);  // exact in float
    probes.push_back(mid);
    probes.push_back(std::nextafter(mid, 0.0f));
    probes.push_back(std::nextafter(mid, 1e30f));
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = bits(rng) & 0x47FFFFFFu;  // up to ~2^16 in magnitude, either sign
    float f;
    std::memcpy(&f, &u, sizeof(f));
    probes.push_back(f);
  }
  for (float f : probes) {
    for (float g : {f, -f}) {
      ASSERT_EQ(float_to_float16(g), ref_to_f16(g)) << g;
    }
  }
}

TEST(Half, Bfloat16RoundingMatchesNearest) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(1.00390625f), 0x3F80);  // tie (0x3F808000): even
  EXPECT_EQ(float_to_bfloat16(1.01171875f), 0x3F82);  // tie (0x3F818000): even, up
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(float_to_bfloat16(std::nanf("")), kBfloat16QuietNaN);
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 500000; ++i) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, sizeof(f));
    ASSERT_EQ(float_to_bfloat16(f), ref_to_bf16(f)) << std::hex << u;
  }
}

// The kernels: reference = the float operation on the decoded values, rounded by the search.
double ref_op(ROp op, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  switch (op) {
    case ROp::kSum:
      return static_cast<float>(static_cast<float>(a) + static_cast<float>(b));
    case ROp::kProd:
      return static_cast<float>(static_cast<float>(a) * static_cast<float>(b));
    case ROp::kMin:
      if (a == b) return std::signbit(a) ? a : b;  // MIN(+0, -0) = -0
      return a < b ? a : b;
    case ROp::kMax:
      if (a == b) return std::signbit(a) ? b : a;
      return a > b ? a : b;
    default:
      return 0;
  }
}

class HalfKernels : public ::testing::TestWithParam<DType> {};

TEST_P(HalfKernels, EveryOpAndIsaMatchesReference) {
  const DType t = GetParam();
  const bool f16 = t == DType::kFloat16;
  std::mt19937 rng(f16 ? 3 : 5);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFF);
  constexpr size_t kN = 4099;  // odd, beyond the vector width, with a tail
  std::vector<uint16_t> a(kN), b(kN);
  for (size_t i = 0; i < kN; ++i) {
    a[i] = static_cast<uint16_t>(bits(rng));
    b[i] = static_cast<uint16_t>(bits(rng));
  }
  // Edge cases up front: zeros of both signs, infinities, NaN, max, smallest subnormal.
  const uint16_t edges16[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7BFF, 0x0001, 0x3C00};
  const uint16_t edgesbf[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F7F, 0x0001, 0x3F80};
  for (size_t i = 0; i < 8; ++i) {
    for (size_t j = 0; j < 8; ++j) {
      a[i * 8 + j] = f16 ? edges16[i] : edgesbf[i];
      b[i * 8 + j] = f16 ? edges16[j] : edgesbf[j];
    }
  }
  for (ROp op : {ROp::kSum, ROp::kProd, ROp::kMin, ROp::kMax}) {
    ASSERT_TRUE(op_valid(op, t));
    std::vector<uint16_t> want(kN);
    for (size_t i = 0; i < kN; ++i) {
      const double x = f16 ? f16_value(a[i]) : bf16_value(a[i]);
      const double y = f16 ? f16_value(b[i]) : bf16_value(b[i]);
      const double r = ref_op(op, x, y);
      want[i] = f16 ? ref_to_f16(r) : ref_to_bf16(static_cast<float>(r));
    }
    std::vector<uint16_t> got(kN);
    ASSERT_EQ(reduce(op, t, got.data(), a.data(), b.data(), kN), Status::kOk);
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_EQ(got[i], want[i]) << rop_name(op) << " " << dtype_name(t) << " i=" << i << std::hex
                                 << " a=" << a[i] << " b=" << b[i];
    }
    for (int isa = 0; isa < kernels_internal::num_isas(); ++isa) {
      if (!kernels_internal::isa_available(isa)) continue;
      std::vector<uint16_t> in_place = a;  // dst == a
      ASSERT_EQ(
          kernels_internal::reduce_isa(isa, op, t, in_place.data(), in_place.data(), b.data(), kN),
          Status::kOk);
      EXPECT_EQ(in_place, want) << rop_name(op) << " isa " << isa;
    }
  }
  for (ROp op : {ROp::kLand, ROp::kLor, ROp::kLxor, ROp::kBand, ROp::kBor, ROp::kBxor}) {
    EXPECT_FALSE(op_valid(op, t));
    uint16_t d = 0;
    EXPECT_EQ(reduce(op, t, &d, a.data(), b.data(), 1), Status::kErrOp);
  }
  EXPECT_EQ(dtype_size(t), 2u);
}

INSTANTIATE_TEST_SUITE_P(Types, HalfKernels, ::testing::Values(DType::kFloat16, DType::kBfloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace skipring
