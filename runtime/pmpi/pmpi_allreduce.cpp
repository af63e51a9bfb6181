// libskipring_pmpi.so: the C MPI_Allreduce interposer. Supported all-reduces go to
// skipring_allreduce; everything else (disabled, unsupported op/type/communicator, invalid
// arguments, calls made from inside skipring) goes to PMPI_Allreduce.
//
// Arguments are checked before any PMPI call (issue 15): MPI_COMM_NULL (MPI_ERR_COMM), a
// negative count (MPI_ERR_COUNT), MPI_DATATYPE_NULL (MPI_ERR_TYPE), MPI_OP_NULL (MPI_ERR_OP) and
// a null buffer with a predefined type (MPI_ERR_BUFFER) are raised on the communicator's error
// handler with a message, never passed to PMPI_Allreduce (where MPICH 4.0 aborts on count < 0).
//
// Edges (issue 13): recvbuf == MPI_IN_PLACE (alone or with sendbuf), and sendbuf == recvbuf
// with count > 0 (aliasing; erroneous in MPI, which has MPI_IN_PLACE for it) are raised as
// MPI_ERR_BUFFER on the communicator's error handler with a message on stderr, whatever the
// type and op: Open MPI 4.1's own check returns MPI_ERR_BUFFER for them too, except that it
// lets an aliased count of 1 through. A call before MPI_Init or after MPI_Finalize returns
// MPI_ERR_OTHER with a message, where plain Open MPI and MPICH abort the job.
#include <cstdio>

#include "runtime/api_front.h"
#include "runtime/config.h"
#include "runtime/pmpi/pmpi_internal.h"
#include "skipring/skipring.h"

namespace skipring::pmpi {
namespace {

// Set while this thread runs skipring code, so that MPI_Allreduce calls skipring itself
// makes are not intercepted again.
// initial-exec: no __tls_get_addr call on the per-call path (the library is preloaded).
__attribute__((tls_model("initial-exec"))) thread_local bool t_inside_skipring = false;
// The front path's memory of this thread's calls (runtime/api_front.h): initial-exec as well, so
// a repeat reads it with one %fs-relative load.
__attribute__((tls_model("initial-exec"))) thread_local FrontEntry t_front;

// MPI's argument errors that can be detected from the arguments themselves, checked before any
// PMPI call and raised on the error handler like MPI's own checks: MPICH 4.0 aborts inside
// PMPI_Allreduce on a negative count (an assertion, whatever the error handler) and Open MPI's
// PMPI_Allreduce dereferences a null buffer. Returns the error class (MPI_SUCCESS: none) and the
// reason in *why. The buffers' own errors (MPI_IN_PLACE misuse, aliasing) are buffer_error's.
// A null buffer is an error only with a predefined datatype: it is MPI_BOTTOM in both MPIs, a
// valid base for a derived datatype of absolute addresses.
int argument_error(const void* sendbuf, const void* recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, const char** why) {
  if (comm == MPI_COMM_NULL) {
    *why = "comm is MPI_COMM_NULL";
    return MPI_ERR_COMM;
  }
  if (count < 0) {
    *why = "count is negative";
    return MPI_ERR_COUNT;
  }
  if (datatype == MPI_DATATYPE_NULL) {
    *why = "datatype is MPI_DATATYPE_NULL";
    return MPI_ERR_TYPE;
  }
  if (op == MPI_OP_NULL) {
    *why = "op is MPI_OP_NULL";
    return MPI_ERR_OP;
  }
  const bool null_recv = recvbuf == nullptr;
  const bool null_send = sendbuf == nullptr;
  if (count > 0 && (null_recv || null_send)) {
    int integers = 0, addresses = 0, types = 0, combiner = 0;
    if (PMPI_Type_get_envelope(datatype, &integers, &addresses, &types, &combiner) == MPI_SUCCESS &&
        combiner == MPI_COMBINER_NAMED) {
      *why = null_recv ? "recvbuf is NULL with a predefined datatype and count > 0"
                       : "sendbuf is NULL with a predefined datatype and count > 0";
      return MPI_ERR_BUFFER;
    }
  }
  return MPI_SUCCESS;
}

// Why the buffers are erroneous (nullptr: they are not): only sendbuf may be MPI_IN_PLACE, and
// sendbuf and recvbuf must not be the same buffer (MPI_BOTTOM excepted: absolute addresses).
const char* buffer_error(const void* sendbuf, const void* recvbuf, int count) {
  if (recvbuf == MPI_IN_PLACE) {
    return sendbuf == MPI_IN_PLACE
               ? "sendbuf and recvbuf are both MPI_IN_PLACE (only sendbuf may be)"
               : "recvbuf is MPI_IN_PLACE (only sendbuf may be)";
  }
  if (count > 0 && sendbuf == recvbuf && sendbuf != MPI_BOTTOM) {
    return "sendbuf and recvbuf are the same buffer (aliasing is erroneous in MPI; pass "
           "MPI_IN_PLACE as sendbuf for an in-place all-reduce)";
  }
  return nullptr;
}

int allreduce_impl(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                   MPI_Comm comm) {
  const int init_rc = ensure_skipring_init();
  if (init_rc == kMpiNotActive) {
    // Before MPI_Init or after MPI_Finalize no MPI function but a few may be called: say so
    // and return an error. Inside MPI_Finalize (attribute callbacks) MPI still works.
    if (const char* when = mpi_unusable()) {
      std::fprintf(stderr, "skipring: MPI_Allreduce called %s: returns MPI_ERR_OTHER\n", when);
      std::fflush(stderr);
      return MPI_ERR_OTHER;
    }
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  }
  const char* why = nullptr;
  int code = argument_error(sendbuf, recvbuf, count, datatype, op, comm, &why);
  if (code == MPI_SUCCESS && (why = buffer_error(sendbuf, recvbuf, count)) != nullptr) {
    code = MPI_ERR_BUFFER;
  }
  if (code != MPI_SUCCESS) {
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "skipring: rank %d: MPI_Allreduce: %s: %s\n", rank, why, class_name(code));
    std::fflush(stderr);
    // MPI_COMM_NULL has no error handler: MPI_COMM_WORLD's, as MPI itself does.
    return raise_error(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
  }
  if (init_rc != MPI_SUCCESS) return raise_error(comm, init_rc);  // bad SKIPRING_* value
  if (!global_config().enable) {
    skipring_count_fallback_reason(SKIPRING_FALLBACK_DISABLED);
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  }
  // skipring_allreduce itself hands what it does not run natively to PMPI_Allreduce, counting
  // the fallback with its reason (one classification per call: asking skipring_handles first
  // cost an attribute lookup and a type and op classification more per call).
  int rc;
  {
    ReentryGuard guard;
    rc = skipring_allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  }
  return rc == MPI_SUCCESS ? MPI_SUCCESS : raise_error(comm, rc);
}

// MPI_Iallreduce (issue 40): the same checks as MPI_Allreduce, then skipring_iallreduce (its
// progress thread under MPI_THREAD_MULTIPLE, else PMPI_Iallreduce, counted with the reason).
int iallreduce_impl(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                    MPI_Comm comm, MPI_Request* request) {
  const int init_rc = ensure_skipring_init();
  if (init_rc == kMpiNotActive) {
    if (const char* when = mpi_unusable()) {
      std::fprintf(stderr, "skipring: MPI_Iallreduce called %s: returns MPI_ERR_OTHER\n", when);
      std::fflush(stderr);
      return MPI_ERR_OTHER;
    }
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  const char* why = nullptr;
  int code = argument_error(sendbuf, recvbuf, count, datatype, op, comm, &why);
  if (code == MPI_SUCCESS && (why = buffer_error(sendbuf, recvbuf, count)) != nullptr) {
    code = MPI_ERR_BUFFER;
  }
  if (code == MPI_SUCCESS && request == nullptr) {
    why = "request is NULL";
    code = MPI_ERR_REQUEST;
  }
  if (code != MPI_SUCCESS) {
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "skipring: rank %d: MPI_Iallreduce: %s: %s\n", rank, why,
                 code == MPI_ERR_REQUEST ? "MPI_ERR_REQUEST" : class_name(code));
    std::fflush(stderr);
    return raise_error(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
  }
  if (init_rc != MPI_SUCCESS) return raise_error(comm, init_rc);
  if (!global_config().enable) {
    skipring_count_fallback_reason(SKIPRING_FALLBACK_DISABLED);
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  int rc;
  {
    ReentryGuard guard;
    rc = skipring_iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  return rc == MPI_SUCCESS ? MPI_SUCCESS : raise_error(comm, rc);
}

}  // namespace

bool inside_skipring() { return t_inside_skipring; }

ReentryGuard::ReentryGuard() : previous_(t_inside_skipring) { t_inside_skipring = true; }
ReentryGuard::~ReentryGuard() { t_inside_skipring = previous_; }

int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm) {
  if (inside_skipring()) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  try {
    // A repeat of a call skipring handed to the MPI library (runtime/api_front.h) before the
    // checks below, which a hit has passed already (np 2, 8-byte calls back to back: the drop-in
    // took 30-40 ns over Open MPI's 0.4-0.6 us with its checks in front).
    // Where every buffer is host memory (no CUDA driver) the test and the call are inline here
    // (api_front.h): no call into libskipring.so, one line of the entry, of g_front and of the
    // communicator; else libskipring's front path, which classifies the buffers.
    if (ensure_skipring_init() == MPI_SUCCESS) {
      const FrontEntry& f = t_front;
      if (g_front.memory_host_only.load(std::memory_order_acquire)) {
        if (front_hit(f, sendbuf, recvbuf, count, datatype, op, comm)) {
          const int rc = front_call(f, sendbuf, recvbuf, count, op, comm);
          return rc == MPI_SUCCESS ? MPI_SUCCESS : raise_error(comm, rc);
        }
      } else {
        const int rc = allreduce_front_path(&t_front, sendbuf, recvbuf, count, datatype, op, comm);
        if (rc >= 0) return rc == MPI_SUCCESS ? MPI_SUCCESS : raise_error(comm, rc);
      }
    }
    const int rc = allreduce_impl(sendbuf, recvbuf, count, datatype, op, comm);
    if (rc == MPI_SUCCESS) allreduce_front_remember(&t_front, count, datatype, op, comm);
    return rc;
  } catch (...) {
    // Nothing may propagate into a C or Fortran caller; the error handler hears of it as of
    // any failed all-reduce (its own exceptions end in guarded()).
    return guarded([&] { return raise_error(comm, MPI_ERR_INTERN); });
  }
}

}  // namespace skipring::pmpi

extern "C" SKIPRING_PMPI_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
                                                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                                   MPI_Request* request) {
  using namespace skipring::pmpi;
  if (inside_skipring()) {
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  try {
    return iallreduce_impl(sendbuf, recvbuf, count, datatype, op, comm, request);
  } catch (...) {
    return guarded([&] { return raise_error(comm, MPI_ERR_INTERN); });
  }
}

extern "C" SKIPRING_PMPI_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return skipring::pmpi::allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

// MPI_Wait and MPI_Waitall: a request of a nonblocking all-reduce that skipring's progress thread
// is still running is first waited for asleep (skipring_block_on_requests), then completed by
// the MPI library's own wait. Its wait polls: with one rank per core the progress thread would
// run only when the scheduler preempts the poll (Linux: ~4 ms at a time), which made an
// MPI_Iallreduce + MPI_Wait of 4 MiB take 4 ms against 0.6 ms for the same call when Open MPI
// yields while idle (np 2 on 2 cores). Every other request goes straight to PMPI (one load when
// no nonblocking all-reduce is pending).
extern "C" SKIPRING_PMPI_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (!skipring::pmpi::inside_skipring() && request != nullptr) {
    skipring_block_on_requests(1, request);
  }
  return PMPI_Wait(request, status);
}

extern "C" SKIPRING_PMPI_EXPORT int MPI_Waitall(int count, MPI_Request requests[],
                                                MPI_Status statuses[]) {
  if (!skipring::pmpi::inside_skipring() && count > 0 && requests != nullptr) {
    skipring_block_on_requests(count, requests);
  }
  return PMPI_Waitall(count, requests, statuses);
}
