// The C API's front path for the `mpi` row (runtime/api_allreduce.cpp), for libskipring_pmpi.so's
// MPI_Allreduce, which tries it before its own argument checks: a hit implies what those checks
// establish (a valid communicator, type, op and count, skipring initialised and enabled), and the
// front path checks the buffers itself. Exported through runtime/libskipring.map, with g_front
// (runtime/front_flags.h), which the inline front_hit reads.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/config.h"       // SKIPRING_INTERNAL_API
#include "runtime/front_flags.h"  // g_front

namespace skipring {

// What the `mpi` row's front path reads and writes on a communicator per call, in one cache line
// (a Communicator's, Communicator::front_line()): the epoch an entry is checked against, the
// counters, the communicator's collective sequence number, and what skipring_last_stats will
// report for the last front-path call (Communicator::last_stats() builds the stats from it on
// demand instead of this path writing them: they are a second line).
struct alignas(64) FrontLine {
  // Bumped wherever what the `mpi` choice depends on changes (Communicator::bump_front): every
  // entry made before is stale.
  std::atomic<uint64_t> epoch{1};
  // The front path's calls and bytes on this communicator (api_counters.cpp adds them to the
  // process totals): one writer at a time (the thread calling the communicator: MPI orders
  // collectives on a communicator), so a relaxed load and store, no locked instruction.
  struct Totals {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> bytes{0};
  } totals;
  uint64_t seq = 0;  // the communicator's collectives so far (each call's sequence number)
  // The last front-path call's sequence number and bytes, while stats_pending.
  uint64_t last_seq = 0;
  uint64_t last_bytes = 0;
  bool stats_pending = false;  // that call is the communicator's last and not yet in its stats

  // Counts one call handed to the MPI library through the `mpi` row.
  void count_call(size_t bytes) {
    totals.calls.store(totals.calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    totals.bytes.store(totals.bytes.load(std::memory_order_relaxed) + bytes,
                       std::memory_order_relaxed);
    last_seq = seq++;
    last_bytes = bytes;
    stats_pending = true;
  }
};

// The front path's memory of one thread (api_allreduce.cpp): the last (communicator, datatype,
// op, count) it handed to the MPI library through the `mpi` row, with what the full checks
// derived for it, in one cache line. Zero-initialised (count 0: no entry), so that a
// thread-local of it needs no guard (MPI's null handles are addresses in Open MPI: a
// thread-local initialised with them is initialised dynamically, with a guard tested on every
// access). Made only where skipring's op handle is the caller's (every predefined op).
struct alignas(64) FrontEntry {
  MPI_Comm comm{};
  MPI_Datatype datatype{};
  MPI_Op op{};
  FrontLine* line = nullptr;  // the communicator's
  MPI_Datatype mpi_dt{};      // skipring's fixed-width handle for the data
  uint64_t generation = 0;    // g_front.comm_generation when the entry was made
  uint64_t epoch = 0;         // line->epoch when the entry was made
  int count = 0;              // > 0 for a valid entry
  uint32_t elem_bytes = 0;
};
static_assert(sizeof(FrontEntry) == 64, "one cache line");
static_assert(sizeof(FrontLine) == 64, "one cache line");

// sendbuf and recvbuf the same buffer without MPI_IN_PLACE: erroneous in MPI (aliased
// arguments). MPI_BOTTOM is exempt (absolute addresses in a derived datatype).
inline bool aliased(const void* sendbuf, const void* recvbuf, int count) {
  return count > 0 && sendbuf == recvbuf && sendbuf != MPI_BOTTOM && sendbuf != MPI_IN_PLACE;
}
// The input and output ranges of `bytes` each overlap without being the same buffer (that is
// aliased()'s case): erroneous in MPI (the output must not share storage with the input), and
// the result would depend on when each part is read.
inline bool overlapping(const void* sendbuf, const void* recvbuf, size_t bytes) {
  if (bytes == 0 || sendbuf == recvbuf || sendbuf == nullptr || recvbuf == nullptr) return false;
  const auto s = reinterpret_cast<uintptr_t>(sendbuf);
  const auto r = reinterpret_cast<uintptr_t>(recvbuf);
  return s < r + bytes && r < s + bytes;
}

// Whether `f` holds this call: the same communicator, datatype, op and count, no communicator
// state deleted since (generation), no nonblocking call pending, MPI not finalized, buffers that
// pass the buffer checks, and the communicator's choice unchanged (epoch). The memory type is
// the caller's to check.
inline bool front_hit(const FrontEntry& f, const void* sendbuf, const void* recvbuf, int count,
                      MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return f.count > 0 && count == f.count && comm == f.comm && datatype == f.datatype &&
         op == f.op && f.generation == g_front.comm_generation.load(std::memory_order_acquire) &&
         g_front.nb_pending.load(std::memory_order_acquire) == 0 &&
         !g_front.finalized.load(std::memory_order_acquire) && recvbuf != MPI_IN_PLACE &&
         recvbuf != nullptr && sendbuf != nullptr && !aliased(sendbuf, recvbuf, count) &&
         (sendbuf == MPI_IN_PLACE ||
          !overlapping(sendbuf, recvbuf, static_cast<size_t>(count) * f.elem_bytes)) &&
         f.line->epoch.load(std::memory_order_acquire) == f.epoch;
}

// A hit's call: the MPI library's all-reduce with skipring's type handle, counted.
inline int front_call(const FrontEntry& f, const void* sendbuf, void* recvbuf, int count, MPI_Op op,
                      MPI_Comm comm) {
  const int rc = PMPI_Allreduce(sendbuf, recvbuf, count, f.mpi_dt, op, comm);
  if (rc == MPI_SUCCESS) f.line->count_call(static_cast<size_t>(count) * f.elem_bytes);
  return rc;
}

// The MPI library's return code for a repeat of the last call that auto handed to it, as
// remembered in `slot` (the calling thread's), or -1 where the call must take the full path
// (skipring_allreduce, which remembers its calls in its own slot). The drop-in passes a slot of
// its own: an initial-exec thread-local of the preloaded library is one %fs-relative load, where
// libskipring.so's thread-locals (general dynamic: the library may be dlopen()ed, by PyTorch's
// backend for one, and links CUDA's runtime, whose 4 KiB of TLS rule out initial-exec) cost a
// call to the TLS descriptor's resolver. Where every buffer is known to be host memory
// (g_front.memory_host_only) the drop-in runs front_hit and front_call itself, inline.
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
