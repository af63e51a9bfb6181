// The C API's argument checks and handle classification: which (datatype, op) pairs and
// communicators skipring runs itself, why a call goes to the MPI library instead, and
// skipring_handles and skipring's 16-bit float datatypes.
#include <mpi.h>

#include "runtime/api_common.h"
#include "runtime/config.h"
#include "runtime/log.h"

namespace skipring::api {
namespace {

// The (datatype, op) pair as skipring sees it (classify_reduction); kOther while disabled.
// The last native pair this thread classified: an application repeats its (type, op), and the
// classification walks the type list (~50 instructions per call, a tenth of the small sizes'
// per-call overhead). Only native pairs are kept: their handles are predefined (or skipring's
// own 16-bit types, never freed), so a handle equal to one is that type; a freed derived type's
// handle, reused by MPI, can never match.
struct LastReduction {
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  DType dt = DType::kInt8;
  ROp rop = ROp::kSum;
};
thread_local LastReduction t_last_reduction;

}  // namespace

int check_allreduce_args(const char* fn, const void* sendbuf, const void* recvbuf, int count,
                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, bool drain,
                         AllreduceArgs* out) {
  if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = ensure_init(fn); rc != MPI_SUCCESS) return rc;
  if (int rc = comm_state(comm, false, &out->c, drain); rc != MPI_SUCCESS) return rc;
  out->kind = reduction_of(datatype, op, &out->dt, &out->rop);
  if (out->kind == MpiReduction::kUndefined) return MPI_ERR_OP;
  return check_allreduce_buffers(fn, sendbuf, recvbuf, count, out->kind, out->dt);
}

int check_allreduce_buffers(const char* fn, const void* sendbuf, const void* recvbuf, int count,
                            MpiReduction kind, DType dt) {
  // Only sendbuf may be MPI_IN_PLACE (Open MPI: MPI_ERR_BUFFER, also with both in place).
  if (recvbuf == MPI_IN_PLACE) {
    return reject(fn, MPI_ERR_BUFFER,
                  sendbuf == MPI_IN_PLACE ? "sendbuf and recvbuf are both MPI_IN_PLACE (only "
                                            "sendbuf may be)"
                                          : "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (aliased(sendbuf, recvbuf, count)) return reject(fn, MPI_ERR_BUFFER, kAliasWhy);
  if (kind == MpiReduction::kNative && sendbuf != MPI_IN_PLACE &&
      overlapping(sendbuf, recvbuf, static_cast<size_t>(count) * dtype_size(dt))) {
    return reject(fn, MPI_ERR_BUFFER, kOverlapWhy);
  }
  return MPI_SUCCESS;
}

int reduction_fallback_reason(MPI_Datatype datatype) {
  if (!global_config().enable) return SKIPRING_FALLBACK_DISABLED;
  DType dt;
  return dtype_from_mpi(datatype, &dt) ? SKIPRING_FALLBACK_OP : SKIPRING_FALLBACK_DATATYPE;
}

MpiReduction reduction_of(MPI_Datatype datatype, MPI_Op op, DType* dt, ROp* rop) {
  if (!global_config().enable) return MpiReduction::kOther;
  LastReduction& last = t_last_reduction;
  if (datatype == last.datatype && op == last.op && datatype != MPI_DATATYPE_NULL) {
    *dt = last.dt;
    *rop = last.rop;
    return MpiReduction::kNative;
  }
  const MpiReduction kind = classify_reduction(datatype, op, dt, rop);
  if (kind == MpiReduction::kNative) last = LastReduction{datatype, op, *dt, *rop};
  return kind;
}

bool intra_comm(MPI_Comm comm) {
  int inter = 0;
  return MPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter;
}

bool native_comm(MPI_Comm comm) {
  void* attr = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(comm, state().keyval, &attr, &found) == MPI_SUCCESS && found) return true;
  return intra_comm(comm);
}

bool handles(MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, DType* dt, ROp* rop) {
  return reduction_of(datatype, op, dt, rop) == MpiReduction::kNative && native_comm(comm);
}

bool handles_type(MPI_Datatype datatype, MPI_Comm comm, DType* dt) {
  return global_config().enable && dtype_from_mpi(datatype, dt) && intra_comm(comm);
}

int type_fallback_reason(bool same, MPI_Datatype datatype, bool memory) {
  DType dt;
  if (!global_config().enable) return SKIPRING_FALLBACK_DISABLED;
  if (!same || !dtype_from_mpi(datatype, &dt)) return SKIPRING_FALLBACK_DATATYPE;
  return memory ? SKIPRING_FALLBACK_MEMORY : SKIPRING_FALLBACK_COMM;
}

int root_error(int root, MPI_Comm comm) {
  int size = 0;
  if (MPI_Comm_size(comm, &size) != MPI_SUCCESS) return MPI_ERR_COMM;
  return root < 0 || root >= size ? MPI_ERR_ROOT : MPI_SUCCESS;
}

int extension_fallback_error(const char* fn, MPI_Datatype datatype, MPI_Op op) {
  ROp rop;
  if (!is_extension_type(datatype) || !rop_from_mpi(op, &rop)) return MPI_SUCCESS;
  return reject(fn, MPI_ERR_TYPE,
                "skipring's float16/bfloat16 datatypes are reduced by skipring only, and this call "
                "would go to PMPI (SKIPRING_ENABLE=0, an inter-communicator, or device buffers "
                "without a device path)");
}

}  // namespace skipring::api

using namespace skipring;
using namespace skipring::api;

extern "C" {

MPI_Datatype skipring_type_float16(void) {
  try {
    return extension_type(DType::kFloat16);
  } catch (...) {
    return MPI_DATATYPE_NULL;
  }
}

MPI_Datatype skipring_type_bfloat16(void) {
  try {
    return extension_type(DType::kBfloat16);
  } catch (...) {
    return MPI_DATATYPE_NULL;
  }
}

int skipring_handles(MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, int* handled) {
  return guarded([&]() -> int {
    if (handled == nullptr) return MPI_ERR_ARG;
    *handled = 0;
    if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    if (int rc = ensure_init("skipring_handles"); rc != MPI_SUCCESS) return rc;
    DType dt;
    ROp rop;
    *handled = handles(datatype, op, comm, &dt, &rop) ? 1 : 0;
    return MPI_SUCCESS;
  });
}

}  // extern "C"
