// Internal element types and reduction operations. The protocol core and the kernels use
// these instead of MPI handles so they run without MPI (in-process harness, unit tests).
#pragma once

#include <cstddef>
#include <cstdint>

namespace skipring {

enum class DType : uint8_t {
  kInt8,
  kUint8,
  kInt16,
  kUint16,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat,
  kDouble,
  kLongDouble,
  kBool,  // C99 _Bool / C++ bool, one byte
  kByte,  // MPI_BYTE: only bitwise ops
  // 16-bit floating point (skipring extensions: skipring_type_float16() / _bfloat16(), or
  // MPICH's MPIX_C_FLOAT16): stored as their IEEE bits, reduced in single precision and rounded
  // to nearest even once per operation (collectives/half.h).
  kFloat16,   // IEEE 754 binary16
  kBfloat16,  // bfloat16: the upper half of a binary32
  kCount
};

enum class ROp : uint8_t {
  kSum,
  kProd,
  kMin,
  kMax,
  kLand,
  kLor,
  kLxor,
  kBand,
  kBor,
  kBxor,
  kCount
};

constexpr int kNumDTypes = static_cast<int>(DType::kCount);
constexpr int kNumROps = static_cast<int>(ROp::kCount);

// Size in bytes of one element.
size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* rop_name(ROp op);

// True when MPI defines `op` on `t` (MPI-3.1 section 5.9.2 table): SUM/PROD/MIN/MAX on
// integers and floats (MIN/MAX not on bool), logical ops on integers and bool, bitwise ops
// on integers and byte.
bool op_valid(ROp op, DType t);

}  // namespace skipring
