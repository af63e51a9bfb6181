// Mapping of MPI datatype and op handles to skipring's internal DType / ROp.
#pragma once

#include <mpi.h>

#include "collectives/dtype.h"

namespace skipring {

// True and *out set when `t` is a predefined MPI type skipring reduces natively (C integer
// types of every width, fixed-width int/uint types, float, double, long double, C bool,
// MPI_BYTE, and the Fortran INTEGER/REAL/DOUBLE PRECISION types).
bool dtype_from_mpi(MPI_Datatype t, DType* out);
// True and *out set for MPI_SUM ... MPI_BXOR (not MAXLOC/MINLOC/REPLACE/NO_OP/user ops).
bool rop_from_mpi(MPI_Op op, ROp* out);

// What a reduction given as MPI handles is to skipring.
enum class MpiReduction {
  kNative,     // skipring reduces it: dtype_from_mpi, rop_from_mpi and op_valid all hold
  kUndefined,  // a predefined op on a predefined type that MPI does not define it for
               // (e.g. MPI_SUM on MPI_BYTE): the caller's error, MPI_ERR_OP
  kOther,      // anything else (user ops, MAXLOC, derived or unsupported types): PMPI's
};
// The one check of an MPI (datatype, op) pair, used by every entry point of the C API. *dt and
// *rop are set unless it returns kOther.
MpiReduction classify_reduction(MPI_Datatype datatype, MPI_Op op, DType* dt, ROp* rop);

}  // namespace skipring
