// The C API's blocking all-reduce: skipring_allreduce, MPI's argument errors first, then the
// MPI library for what skipring does not run natively (counted as fallbacks), device buffers
// through the staging path, the `mpi` row's fast path, and Communicator::allreduce.
#include <mpi.h>

#include "runtime/api_common.h"
#include "runtime/api_device.h"
#include "runtime/api_front.h"
#include "runtime/log.h"

namespace skipring::api {
namespace {

int fallback(int reason, const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
             MPI_Op op, MPI_Comm comm) {
  if (int rc = extension_fallback_error("skipring_allreduce", datatype, op); rc != MPI_SUCCESS) {
    return rc;
  }
  count_fallback(reason, "skipring_allreduce", datatype, op);
  return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int staged_allreduce(Communicator* c, DeviceOps* ops, unsigned dev, const void* sendbuf,
                     void* recvbuf, int count, DType dt, ROp rop) {
  Staged s("skipring_allreduce", c, ops);
  const size_t n = static_cast<size_t>(count);
  const size_t bytes = n * dtype_size(dt);
  const void* in = nullptr;
  void* out = nullptr;
  if (!stage_reduction_inputs(s, dev, sendbuf, recvbuf, bytes, &in, &out)) return s.rc();
  return staged_result(s, c, c->allreduce(in, out, n, dt, rop), (dev & 2u) ? recvbuf : nullptr, out,
                       bytes);
}

// The `mpi` row's front path (issue 40): the last (communicator, datatype, op, count) this
// thread handed to the MPI library through the fast path below, with what the full checks derived
// for it. A repeat (an application's solver loop), with no communicator state deleted since
// (generation), no nonblocking call pending, MPI not finalized, host buffers that pass the buffer
// checks and auto's choice still `mpi`, goes to PMPI_Allreduce after one thread-local lookup
// instead of three and the classification (perf of 8-byte calls at 2 ranks, a 450 ns call:
// skipring's own code took 33 ns of it before).
thread_local FrontEntry t_fast;  // skipring_allreduce's (the drop-in passes its own)

// The front path's call (runtime/api_front.h), or -1 where the call must take the full path.
inline int front_path(const FrontEntry& f, const void* sendbuf, void* recvbuf, int count,
                      MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (!front_hit(f, sendbuf, recvbuf, count, datatype, op, comm) ||
      device_buffers({sendbuf, recvbuf}) != 0) {
    return -1;
  }
  return front_call(f, sendbuf, recvbuf, count, op, comm);
}

int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm) {
  // libskipring.so's thread-locals cost a call to the TLS descriptor's resolver per access
  // (api_front.h): the address once, opaque to the compiler, which otherwise repeats the call
  // after each call it makes.
  FrontEntry* fast = &t_fast;
  asm("" : "+r"(fast));
  if (const int rc = front_path(*fast, sendbuf, recvbuf, count, datatype, op, comm); rc >= 0) {
    return rc;
  }
  AllreduceArgs a;
  if (int rc = check_allreduce_args("skipring_allreduce", sendbuf, recvbuf, count, datatype, op,
                                    comm, true, &a);
      rc != MPI_SUCCESS) {
    return rc;
  }
  const DType dt = a.dt;
  const ROp rop = a.rop;
  const MpiReduction kind = a.kind;
  Communicator* c = a.c;
  const unsigned dev = count > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_allreduce") : nullptr;
  if (dev != 0 && ops == nullptr) {
    return fallback(SKIPRING_FALLBACK_MEMORY, sendbuf, recvbuf, count, datatype, op, comm);
  }
  // A communicator that already has skipring state is an intra-communicator (checked when the
  // state was created): the per-call path skips native_comm's MPI calls.
  if (kind != MpiReduction::kNative) {
    return fallback(reduction_fallback_reason(datatype), sendbuf, recvbuf, count, datatype, op,
                    comm);
  }
  if (c == nullptr && !native_comm(comm)) {
    return fallback(SKIPRING_FALLBACK_COMM, sendbuf, recvbuf, count, datatype, op, comm);
  }
  if (count > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (c == nullptr) {
    if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
  }
  if (dev != 0) return staged_allreduce(c, ops, dev, sendbuf, recvbuf, count, dt, rop);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
  const uint64_t epoch = c->front_epoch();  // before the test: a change after it makes it stale
  if (c->mpi_cached(bytes, dt, rop)) {
    // auto hands this size to the MPI library (the `mpi` row) and chose so before: the call
    // goes straight to PMPI_Allreduce with the caller's buffers and communicator, as without
    // skipring (issue 40: everything else skipring does per call cost as much as the MPI's 8-byte
    // all-reduce on shared memory). Errors are the MPI library's, raised on comm's handler.
    // skipring's own (fixed-width) type and op, as the `mpi` row's slow path: Open MPI 4.1.4
    // reduces MPI_UNSIGNED_LONG with MIN/MAX as signed.
    const MPI_Datatype mdt = mpi_datatype(dt);
    const MPI_Op mop = mpi_op(rop);
    const int rc = PMPI_Allreduce(sendbuf, recvbuf, count, mdt, mop, comm);
    if (rc != MPI_SUCCESS) return rc;
    // (An entry passes the caller's op to the MPI library: made only where it is skipring's.)
    if (count > 0 && mop == op) {
      *fast = FrontEntry{comm,
                         datatype,
                         op,
                         c->front_line(),
                         mdt,
                         g_front.comm_generation.load(std::memory_order_acquire),
                         epoch,
                         count,
                         static_cast<uint32_t>(dtype_size(dt))};
    }
    // Counted on the communicator (no locked instruction; the totals add them up), not timed,
    // not traced (no steps).
    c->count_mpi_call(bytes);
    return MPI_SUCCESS;
  }
  // A broken communicator refuses the call itself, saying why (Communicator::refuse_broken).
  Status st = c->allreduce(src, recvbuf, static_cast<size_t>(count), dt, rop);
  if (!ok(st)) return to_mpi_error(st);
  account(c->last_stats());
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace skipring::api

namespace skipring {

int allreduce_front_path(FrontEntry* slot, const void* sendbuf, void* recvbuf, int count,
                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) noexcept {
  return api::front_path(*slot, sendbuf, recvbuf, count, datatype, op, comm);
}

void allreduce_front_remember(FrontEntry* slot, int count, MPI_Datatype datatype, MPI_Op op,
                              MPI_Comm comm) noexcept {
  const FrontEntry& f = api::t_fast;
  if (f.count > 0 && f.count == count && f.comm == comm && f.datatype == datatype && f.op == op) {
    *slot = f;
  }
}

}  // namespace skipring

using namespace skipring;
using namespace skipring::api;

extern "C" {

int skipring_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                       MPI_Op op, MPI_Comm comm) {
  return guarded([&]() -> int { return allreduce(sendbuf, recvbuf, count, datatype, op, comm); });
}

}  // extern "C"
