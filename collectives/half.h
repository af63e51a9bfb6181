// 16-bit floating-point formats for the reduce kernels: IEEE 754 binary16 ("float16", 1 sign,
// 5 exponent, 10 fraction bits) and bfloat16 (the upper 16 bits of a binary32). Values are kept
// as their bits; an operation widens both operands to float (exact for both formats), applies
// the float operation and rounds the result back to nearest, ties to even. NaN results become
// the format's default quiet NaN (0x7E00 / 0x7FC0), so a NaN's bits never depend on operand
// order, as for float and double (collectives/reduce_kernels.cpp).
#pragma once

#include <cstdint>
#include <cstring>

namespace skipring {

struct Float16Bits {
  uint16_t bits;
};
struct Bfloat16Bits {
  uint16_t bits;
};

constexpr uint16_t kFloat16QuietNaN = 0x7E00;
constexpr uint16_t kBfloat16QuietNaN = 0x7FC0;

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float float16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t frac = h & 0x3FFu;
  if (exp == 0x1F) return float_from_bits(sign | 0x7F800000u | (frac << 13));  // inf / NaN
  if (exp != 0) return float_from_bits(sign | ((exp + 112) << 23) | (frac << 13));
  if (frac == 0) return float_from_bits(sign);  // +-0
  // Subnormal: frac * 2^-24; normalise into a binary32 (always normal there).
  int e = -14;
  while ((frac & 0x400u) == 0) {
    frac <<= 1;
    --e;
  }
  return float_from_bits(sign | (static_cast<uint32_t>(e + 127) << 23) | ((frac & 0x3FFu) << 13));
}

inline uint16_t float_to_float16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return kFloat16QuietNaN;
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 2^16: inf
  if (abs < 0x38800000u) {
    // Below 2^-14: a float16 subnormal (or zero), a multiple of 2^-24. Shift the 24-bit
    // significand right so that one unit is 2^-24, rounding to nearest even.
    if (abs < 0x33000000u) return sign;  // below 2^-25: rounds to zero (2^-25 ties to even 0)
    const uint32_t exp = abs >> 23;      // 102 .. 112
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // value = mant * 2^(exp-150); unit 2^-24: shift 126-exp
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent, round the 23-bit fraction to 10 bits (a carry into the
  // exponent is the right result, up to infinity at the top of the range).
  uint32_t v = abs - 0x38000000u;  // exponent 127-based -> 15-based, fraction untouched
  const uint32_t rem = v & 0x1FFFu;
  v >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) ++v;
  return static_cast<uint16_t>(sign | v);
}

inline float bfloat16_to_float(uint16_t b) {
  return float_from_bits(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kBfloat16QuietNaN;
  const uint32_t rem = u & 0xFFFFu;
  uint32_t v = u >> 16;
  if (rem > 0x8000u || (rem == 0x8000u && (v & 1u))) ++v;  // carries into the exponent (to inf)
  return static_cast<uint16_t>(v);
}

}  // namespace skipring
