// The C API's other collectives: reduce-scatter (block), allgather, broadcast and reduce.
// Same pattern as skipring_allreduce: MPI's argument errors first, then PMPI for what skipring
// does not run natively, then the communicator's collective (staged for device buffers).
#include <mpi.h>

#include <cstdint>

#include "runtime/api_common.h"
#include "runtime/api_device.h"
#include "runtime/log.h"

namespace skipring::api {
namespace {

// The native path's common tail: the communicator's state (created on first use), then `call`
// (Status (Communicator*)) unless the communicator is broken, then the stats.
template <typename F>
int run_native(MPI_Comm comm, F&& call) {
  Communicator* c = nullptr;
  if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
  Status st = call(c);  // refused, saying why, when the communicator is broken
  if (!ok(st)) return to_mpi_error(st);
  account(c);
  return MPI_SUCCESS;
}

// The staged form of run_native: `body` (int (Staged&, Communicator*)) stages, runs the
// collective and returns an MPI error code (staged_result).
template <typename F>
int run_staged(MPI_Comm comm, const char* fn, DeviceOps* ops, F&& body) {
  Communicator* c = nullptr;
  if (int rc = comm_state(comm, true, &c); rc != MPI_SUCCESS) return rc;
  Staged s(fn, c, ops);
  if (s.failed()) return s.rc();
  return body(s, c);
}

int reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (recvcount < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_reduce_scatter_block"); rc != MPI_SUCCESS) return rc;
  DType dt;
  ROp rop;
  const MpiReduction kind = reduction_of(datatype, op, &dt, &rop);
  if (kind == MpiReduction::kUndefined) return MPI_ERR_OP;
  // Only sendbuf may be MPI_IN_PLACE (Open MPI: MPI_ERR_ARG). Open MPI does not check
  // aliasing here; skipring rejects it as skipring_allreduce does (MPI_ERR_BUFFER).
  if (recvbuf == MPI_IN_PLACE) {
    return reject("skipring_reduce_scatter_block", MPI_ERR_ARG,
                  "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (aliased(sendbuf, recvbuf, recvcount)) {
    return reject("skipring_reduce_scatter_block", MPI_ERR_BUFFER, kAliasWhy);
  }
  const unsigned dev = recvcount > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_reduce_scatter_block") : nullptr;
  if (kind != MpiReduction::kNative || !native_comm(comm) || (dev != 0 && ops == nullptr)) {
    if (int rc = extension_fallback_error("skipring_reduce_scatter_block", datatype, op);
        rc != MPI_SUCCESS) {
      return rc;
    }
    count_fallback(kind != MpiReduction::kNative ? reduction_fallback_reason(datatype)
                   : dev != 0 && ops == nullptr  ? SKIPRING_FALLBACK_MEMORY
                                                 : SKIPRING_FALLBACK_COMM,
                   "skipring_reduce_scatter_block", datatype, op);
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  }
  if (recvcount > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (dev != 0) {
    return run_staged(comm, "skipring_reduce_scatter_block", ops, [&](Staged& s, Communicator* c) {
      const size_t block = static_cast<size_t>(recvcount) * dtype_size(dt);
      const size_t total = block * static_cast<size_t>(c->size());
      const bool in_place = sendbuf == MPI_IN_PLACE;
      const void* in = src;
      void* out = recvbuf;
      if (dev & 2u) {
        out = s.buffer(1, in_place ? total : block);
        if (in_place) {
          s.to_host(out, recvbuf, total);
          in = out;
        }
      }
      if (dev & 1u) {
        uint8_t* staged = s.buffer(0, total);
        s.to_host(staged, sendbuf, total);
        in = staged;
      }
      s.sync();
      if (s.failed()) return s.rc();
      const Status st = c->reduce_scatter_block(in, out, static_cast<size_t>(recvcount), dt, rop);
      return staged_result(s, c, st, (dev & 2u) ? recvbuf : nullptr, out, block);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->reduce_scatter_block(src, recvbuf, static_cast<size_t>(recvcount), dt, rop);
  });
}

int allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (recvcount < 0 || (sendbuf != MPI_IN_PLACE && sendcount < 0)) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_allgather"); rc != MPI_SUCCESS) return rc;
  // Only sendbuf may be MPI_IN_PLACE (Open MPI: MPI_ERR_ARG). Open MPI does not check
  // aliasing here; skipring rejects it as skipring_allreduce does (MPI_ERR_BUFFER).
  if (recvbuf == MPI_IN_PLACE) {
    return reject("skipring_allgather", MPI_ERR_ARG,
                  "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (aliased(sendbuf, recvbuf, recvcount)) {
    return reject("skipring_allgather", MPI_ERR_BUFFER, kAliasWhy);
  }
  DType dt;
  const bool same = sendbuf == MPI_IN_PLACE || (sendtype == recvtype && sendcount == recvcount);
  const unsigned dev = recvcount > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_allgather") : nullptr;
  if (!same || !handles_type(recvtype, comm, &dt) || (dev != 0 && ops == nullptr)) {
    count_fallback(type_fallback_reason(same, recvtype, dev != 0 && ops == nullptr),
                   "skipring_allgather", recvtype);
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  }
  if (recvcount > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (dev != 0) {
    return run_staged(comm, "skipring_allgather", ops, [&](Staged& s, Communicator* c) {
      const size_t block = static_cast<size_t>(recvcount) * dtype_size(dt);
      const size_t total = block * static_cast<size_t>(c->size());
      const size_t mine = block * static_cast<size_t>(c->rank());
      const bool in_place = sendbuf == MPI_IN_PLACE;
      const void* in = src;
      uint8_t* out = static_cast<uint8_t*>(recvbuf);
      if (dev & 2u) {
        out = s.buffer(1, total);
        if (in_place) {  // this rank's block, at its place (an address only: never read here)
          s.to_host(out + mine, static_cast<const uint8_t*>(recvbuf) + mine, block);
          in = out;
        }
      }
      if (dev & 1u) {
        if (dev & 2u) {  // straight to its place in the staged result: the call runs in place
          s.to_host(out + mine, sendbuf, block);
          in = out;
        } else {
          uint8_t* staged = s.buffer(0, block);
          s.to_host(staged, sendbuf, block);
          in = staged;
        }
      }
      s.sync();
      if (s.failed()) return s.rc();
      const Status st = c->allgather(in, out, static_cast<size_t>(recvcount), dt);
      return staged_result(s, c, st, (dev & 2u) ? recvbuf : nullptr, out, total);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->allgather(src, recvbuf, static_cast<size_t>(recvcount), dt);
  });
}

int bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_bcast"); rc != MPI_SUCCESS) return rc;
  if (int rc = root_error(root, comm); rc != MPI_SUCCESS) return rc;
  // Broadcast has no in-place form (Open MPI: MPI_ERR_ARG).
  if (buffer == MPI_IN_PLACE) {
    return reject("skipring_bcast", MPI_ERR_ARG,
                  "buffer is MPI_IN_PLACE (bcast has no in-place form)");
  }
  DType dt;
  const unsigned dev = count > 0 ? device_buffers({buffer}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_bcast") : nullptr;
  if (!handles_type(datatype, comm, &dt) || (dev != 0 && ops == nullptr)) {
    count_fallback(type_fallback_reason(true, datatype, dev != 0 && ops == nullptr),
                   "skipring_bcast", datatype);
    return PMPI_Bcast(buffer, count, datatype, root, comm);
  }
  if (count > 0 && buffer == nullptr) return MPI_ERR_BUFFER;
  if (dev != 0) {
    // Only the root's buffer is read and only the others' is written.
    return run_staged(comm, "skipring_bcast", ops, [&](Staged& s, Communicator* c) {
      const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
      const bool is_root = c->rank() == root;
      uint8_t* staged = s.buffer(1, bytes);
      if (is_root) s.to_host(staged, buffer, bytes);
      s.sync();
      if (s.failed()) return s.rc();
      const Status st = c->bcast(staged, static_cast<size_t>(count), dt, root);
      return staged_result(s, c, st, is_root ? nullptr : buffer, staged, bytes);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->bcast(buffer, static_cast<size_t>(count), dt, root);
  });
}

int reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
           int root, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init("skipring_reduce"); rc != MPI_SUCCESS) return rc;
  if (int rc = root_error(root, comm); rc != MPI_SUCCESS) return rc;
  DType dt;
  ROp rop;
  const MpiReduction kind = reduction_of(datatype, op, &dt, &rop);
  if (kind == MpiReduction::kUndefined) return MPI_ERR_OP;
  int rank = 0;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS) return MPI_ERR_COMM;
  // MPI_IN_PLACE only as sendbuf at the root; recvbuf is only significant at the root (a
  // non-root may pass anything there, MPI_IN_PLACE or sendbuf included). Open MPI returns
  // MPI_ERR_ARG for each of these.
  if (rank != root && sendbuf == MPI_IN_PLACE) {
    return reject("skipring_reduce", MPI_ERR_ARG,
                  "sendbuf is MPI_IN_PLACE at a non-root rank (only the root may pass it)");
  }
  if (rank == root && recvbuf == MPI_IN_PLACE) {
    return reject("skipring_reduce", MPI_ERR_ARG,
                  "recvbuf is MPI_IN_PLACE at the root (only sendbuf may be)");
  }
  if (rank == root && aliased(sendbuf, recvbuf, count)) {
    return reject("skipring_reduce", MPI_ERR_ARG, kAliasWhy);
  }
  const unsigned dev = count > 0 ? device_buffers({sendbuf, rank == root ? recvbuf : nullptr}) : 0;
  DeviceOps* ops = dev != 0 ? device_path("skipring_reduce") : nullptr;
  if (kind != MpiReduction::kNative || !native_comm(comm) || (dev != 0 && ops == nullptr)) {
    if (int rc = extension_fallback_error("skipring_reduce", datatype, op); rc != MPI_SUCCESS) {
      return rc;
    }
    count_fallback(kind != MpiReduction::kNative ? reduction_fallback_reason(datatype)
                   : dev != 0 && ops == nullptr  ? SKIPRING_FALLBACK_MEMORY
                                                 : SKIPRING_FALLBACK_COMM,
                   "skipring_reduce", datatype, op);
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  }
  if (count > 0 && (sendbuf == nullptr || (rank == root && recvbuf == nullptr))) {
    return MPI_ERR_BUFFER;
  }
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  if (dev != 0) {
    return run_staged(comm, "skipring_reduce", ops, [&](Staged& s, Communicator* c) {
      const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
      // recvbuf is significant at the root only (dev bit 1 is never set elsewhere).
      const void* in = nullptr;
      void* out = nullptr;
      if (!stage_reduction_inputs(s, dev, sendbuf, recvbuf, bytes, &in, &out)) return s.rc();
      const Status st = c->reduce(in, out, static_cast<size_t>(count), dt, rop, root);
      return staged_result(s, c, st, (dev & 2u) ? recvbuf : nullptr, out, bytes);
    });
  }
  return run_native(comm, [&](Communicator* c) {
    return c->reduce(src, recvbuf, static_cast<size_t>(count), dt, rop, root);
  });
}

}  // namespace
}  // namespace skipring::api

using namespace skipring;
using namespace skipring::api;

extern "C" {

int skipring_reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return guarded(
      [&] { return reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm); });
}

int skipring_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                       int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return guarded(
      [&] { return allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); });
}

int skipring_bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  return guarded([&]() -> int { return bcast(buffer, count, datatype, root, comm); });
}

int skipring_reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                    int root, MPI_Comm comm) {
  return guarded(
      [&]() -> int { return reduce(sendbuf, recvbuf, count, datatype, op, root, comm); });
}

}  // extern "C"
