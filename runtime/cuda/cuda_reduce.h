// CUDA reduce kernels (cuda_reduce.cu): dst[i] = a[i] op b[i] on device memory, for every
// (op, type) pair the host kernels (collectives/reduce_kernels.h) handle except long double,
// which has no device type. Same bits as the host kernels: integer SUM/PROD wrap modulo 2^bits,
// float/double SUM and PROD are single IEEE round-to-nearest operations in the operand order
// a op b (no contraction, no flush to zero) with any NaN result replaced by the default quiet
// NaN, MIN/MAX give the default quiet NaN for a NaN operand, MIN(+0, -0) = -0 and
// MAX(+0, -0) = +0, logical ops give 0 or 1. dst may alias a or b exactly.
//
// Only compiled with SKIPRING_HAVE_CUDA. The header has no CUDA types, so plain C++ (the CUDA
// DeviceOps, the tests) includes it.
#pragma once

#include <cstddef>

#include "collectives/dtype.h"
#include "common/status.h"

namespace skipring {
namespace cuda {

// Whether the device kernels handle (op, t): op_valid(op, t) and t is not long double.
bool reduce_supported(ROp op, DType t);

// Enqueues dst = a op b (count elements) on `stream` (a cudaStream_t; nullptr: the legacy
// default stream) of the current device. Any alignment is accepted (16-byte aligned buffers take
// the vectorised path). Returns kErrType / kErrOp as the host reduce() does (nothing enqueued),
// kErrBuffer for a null pointer with count > 0, kErrDevice when the launch fails
// (*cuda_error, when given, is then the cudaError_t).
Status reduce_async(ROp op, DType t, void* dst, const void* a, const void* b, size_t count,
                    void* stream, int* cuda_error = nullptr);

}  // namespace cuda
}  // namespace skipring
