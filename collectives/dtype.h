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
  // Complex numbers (C float/double/long double _Complex, Fortran COMPLEX / DOUBLE COMPLEX):
  // real then imaginary part, ComplexOf<R> in collectives/elem_types.h. SUM and PROD only.
  kComplexFloat,
  kComplexDouble,
  kComplexLongDouble,
  // The value-index pairs of MPI_MINLOC / MPI_MAXLOC (MPI-3.1 5.9.4), laid out as the C struct
  // { value; index; } (LocPair<V, I> in collectives/elem_types.h): the element size is the
  // struct's, padding included (MPI's extent). MINLOC and MAXLOC only.
  kFloatInt,       // MPI_FLOAT_INT
  kDoubleInt,      // MPI_DOUBLE_INT
  kLongInt,        // MPI_LONG_INT
  kIntInt,         // MPI_2INT (and Fortran MPI_2INTEGER with a 4-byte INTEGER)
  kShortInt,       // MPI_SHORT_INT
  kLongDoubleInt,  // MPI_LONG_DOUBLE_INT
  kFloatFloat,     // Fortran MPI_2REAL (4-byte REAL): the index is a REAL too
  kDoubleDouble,   // Fortran MPI_2DOUBLE_PRECISION (or MPI_2REAL with an 8-byte REAL)
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
  kMinloc,  // on the pair types only: the smaller value; on equal values the smaller index
  kMaxloc,  // on the pair types only: the larger value; on equal values the smaller index
  kCount
};

constexpr int kNumDTypes = static_cast<int>(DType::kCount);
constexpr int kNumROps = static_cast<int>(ROp::kCount);

// Size in bytes of one element.
size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* rop_name(ROp op);

// True when MPI defines `op` on `t` (MPI-3.1 section 5.9.2 table): SUM/PROD/MIN/MAX on
// integers and floats (MIN/MAX not on bool), SUM/PROD on complex, logical ops on integers and
// bool, bitwise ops on integers and byte, MINLOC/MAXLOC on the pair types.
bool op_valid(ROp op, DType t);

// True when the device (CUDA) kernels reduce `t`: every type but long double and the complex
// and pair types, which only the host kernels reduce.
bool dtype_on_device(DType t);

}  // namespace skipring
