// Test data shared by the harness tests: typed random inputs (valid for every op: no NaN,
// 0/1 bools, zeroed long double and pair padding; complex and MINLOC/MAXLOC pair values exact in
// any reduction order) and element access for float comparisons.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "collectives/dtype.h"
#include "tests/unit/harness.h"

namespace skipring {
namespace testdata {

using Buffers = std::vector<std::vector<std::vector<uint8_t>>>;  // [collective][rank][bytes]

bool is_float(DType t);
// Fills count elements of type t. wide: float SUM inputs span 2^-20..2^20 in magnitude so
// that the summation order shows in the low bits.
void fill(DType t, void* p, size_t count, std::mt19937_64& rng, ROp op, bool wide = false);
long double value_at(DType t, const uint8_t* p, size_t i);
// inputs[c][r] for every collective and rank of `o`.
Buffers make_inputs(const harness::Options& o, uint64_t seed, bool wide = false);

}  // namespace testdata
}  // namespace skipring
