// Mapping of MPI datatype and op handles to skipring's internal DType / ROp.
#pragma once

#include <mpi.h>

#include "collectives/dtype.h"

namespace skipring {

// True and *out set when `t` is a predefined MPI type skipring reduces natively (C integer
// types of every width, fixed-width int/uint types, float, double, long double, C bool,
// MPI_BYTE, the C and C++ complex types, the C MINLOC/MAXLOC pair types, and the Fortran
// INTEGER/REAL/DOUBLE PRECISION, COMPLEX/DOUBLE COMPLEX/COMPLEX8/COMPLEX16 and
// 2REAL/2DOUBLE PRECISION/2INTEGER types where their sizes have a DType), and for skipring's
// 16-bit float types (extension_type; MPICH's MPIX_C_FLOAT16 is float16 too). A pair type
// whose MPI extent is not the C struct's size is not mapped.
bool dtype_from_mpi(MPI_Datatype t, DType* out);
// skipring's 16-bit floating-point datatypes (C API skipring_type_float16 / _bfloat16;
// t = DType::kFloat16 or kBfloat16): committed contiguous pairs of bytes to MPI, created on
// first use and kept to the end. MPI_DATATYPE_NULL when MPI is not active or creating it failed,
// or for any other t.
MPI_Datatype extension_type(DType t);
// True when `t` is one of those (MPI cannot reduce it: no PMPI fallback with a predefined op).
bool is_extension_type(MPI_Datatype t);

// True and *out set for MPI_SUM ... MPI_BXOR, MPI_MINLOC and MPI_MAXLOC (not REPLACE/NO_OP/user
// ops).
bool rop_from_mpi(MPI_Op op, ROp* out);

// What a reduction given as MPI handles is to skipring.
enum class MpiReduction {
  kNative,     // skipring reduces it: dtype_from_mpi, rop_from_mpi and op_valid all hold
  kUndefined,  // a predefined op on a predefined type that MPI does not define it for
               // (e.g. MPI_SUM on MPI_BYTE): the caller's error, MPI_ERR_OP
  kOther,      // anything else (user ops, REPLACE, derived or unsupported types): PMPI's
};
// The one check of an MPI (datatype, op) pair, used by every entry point of the C API. *dt and
// *rop are set unless it returns kOther.
MpiReduction classify_reduction(MPI_Datatype datatype, MPI_Op op, DType* dt, ROp* rop);

}  // namespace skipring
