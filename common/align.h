// Rounding helpers for buffer layouts. Base layer: no MPI.
#pragma once

#include <cstddef>

namespace skipring {

// The smallest multiple of `a` (> 0) that is >= v.
constexpr size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace skipring
