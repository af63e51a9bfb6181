// Vectorised element-wise reduction kernels for every (op, type) pair MPI defines.
#pragma once

#include <cstddef>

#include "collectives/dtype.h"
#include "common/status.h"

namespace skipring {

// dst[i] = a[i] op b[i] for i < count. dst may alias a or b exactly (same pointer);
// partial overlap is not allowed. The result is the same bits whatever the aliasing.
// Returns Status::kErrType for a type outside DType, Status::kErrOp when op_valid(op, t) is
// false (nothing written).
Status reduce(ROp op, DType t, void* dst, const void* a, const void* b, size_t count);

}  // namespace skipring
