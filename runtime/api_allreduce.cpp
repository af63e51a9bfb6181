// The C API's blocking all-reduce: skipring_allreduce, MPI's argument errors first, then the
// MPI library for what skipring does not run natively (counted as fallbacks), device buffers
// through the staging path, the `mpi` row's fast path, and Communicator::allreduce.
#include <mpi.h>

#include "runtime/api_common.h"
#include "runtime/api_device.h"
#include "runtime/log.h"

namespace skipring::api {
namespace {

int fallback(int reason, const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
             MPI_Op op, MPI_Comm comm) {
  if (int rc = extension_fallback_error("skipring_allreduce", datatype, op); rc != MPI_SUCCESS) {
    return rc;
  }
  count_fallback(reason, "skipring_allreduce");
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

int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm) {
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
  if (c->mpi_cached(bytes, dt, rop)) {
    // auto hands this size to the MPI library (the `mpi` row) and chose so before: the call
    // goes straight to PMPI_Allreduce with the caller's buffers and communicator, as without
    // skipring (issue 40: everything else skipring does per call cost as much as the MPI's 8-byte
    // all-reduce on shared memory). Errors are the MPI library's, raised on comm's handler.
    // skipring's own (fixed-width) type and op, as the `mpi` row's slow path: Open MPI 4.1.4
    // reduces MPI_UNSIGNED_LONG with MIN/MAX as signed.
    const int rc = PMPI_Allreduce(sendbuf, recvbuf, count, mpi_datatype(dt), mpi_op(rop), comm);
    if (rc != MPI_SUCCESS) return rc;
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

using namespace skipring;
using namespace skipring::api;

extern "C" {

int skipring_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                       MPI_Op op, MPI_Comm comm) {
  return guarded([&]() -> int { return allreduce(sendbuf, recvbuf, count, datatype, op, comm); });
}

}  // extern "C"
