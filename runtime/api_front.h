// The C API's front path for the `mpi` row (runtime/api_allreduce.cpp), for libskipring_pmpi.so's
// MPI_Allreduce, which tries it before its own argument checks: a hit implies what those checks
// establish (a valid communicator, type, op and count, skipring initialised and enabled), and the
// front path checks the buffers itself. Exported through runtime/libskipring.map.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "runtime/config.h"  // SKIPRING_INTERNAL_API

namespace skipring {

class Communicator;

// The front path's memory of one thread (api_allreduce.cpp): the last (communicator, datatype,
// op, count) it handed to the MPI library through the `mpi` row, with what the full checks
// derived for it. Zero-initialised (count 0: no entry), so that a thread-local of it needs no
// guard (MPI's null handles are addresses in Open MPI: a thread-local initialised with them is
// initialised dynamically, with a guard tested on every access).
struct FrontEntry {
  MPI_Comm comm{};
  MPI_Datatype datatype{};
  MPI_Op op{};
  int count = 0;  // > 0 for a valid entry
  uint64_t generation = 0;
  Communicator* c = nullptr;
  size_t bytes = 0;
  MPI_Datatype mpi_dt{};  // skipring's fixed-width handle for the data
  MPI_Op mpi_op{};
  uint64_t epoch = 0;  // the communicator's front epoch when the entry was made (front_holds)
};

// The MPI library's return code for a repeat of the last call that auto handed to it, as
// remembered in `slot` (the calling thread's), or -1 where the call must take the full path
// (skipring_allreduce, which remembers its calls in its own slot). The drop-in passes a slot of
// its own: an initial-exec thread-local of the preloaded library is one %fs-relative load, where
// libskipring.so's thread-locals (general dynamic: the library may be dlopen()ed, by PyTorch's
// backend for one, and links CUDA's runtime, whose 4 KiB of TLS rule out initial-exec) cost a
// call to the TLS descriptor's resolver.
SKIPRING_INTERNAL_API int allreduce_front_path(FrontEntry* slot, const void* sendbuf, void* recvbuf,
                                               int count, MPI_Datatype datatype, MPI_Op op,
                                               MPI_Comm comm) noexcept;
// After a call that took the full path: copies into `slot` what skipring_allreduce remembered
// of it on this thread, where it handed exactly this call (communicator, datatype, op, count)
// to the MPI library; else leaves `slot` as it is.
SKIPRING_INTERNAL_API void allreduce_front_remember(FrontEntry* slot, int count,
                                                    MPI_Datatype datatype, MPI_Op op,
                                                    MPI_Comm comm) noexcept;

}  // namespace skipring
