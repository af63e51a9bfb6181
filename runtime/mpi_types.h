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

}  // namespace skipring
