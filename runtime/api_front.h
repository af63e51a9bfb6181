// The C API's front path for the `mpi` row (runtime/api_allreduce.cpp), for libskipring_pmpi.so's
// MPI_Allreduce, which tries it before its own argument checks: a hit implies what those checks
// establish (a valid communicator, type, op and count, skipring initialised and enabled), and the
// front path checks the buffers itself. Exported through runtime/libskipring.map.
#pragma once

#include <mpi.h>

#include "runtime/config.h"  // SKIPRING_INTERNAL_API

namespace skipring {

// The MPI library's return code for a repeat of the last call of this thread that auto handed
// to it, or -1 where the call must take the full path (skipring_allreduce).
SKIPRING_INTERNAL_API int allreduce_front_path(const void* sendbuf, void* recvbuf, int count,
                                               MPI_Datatype datatype, MPI_Op op,
                                               MPI_Comm comm) noexcept;

}  // namespace skipring
