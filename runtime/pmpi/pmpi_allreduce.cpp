// libskipring_pmpi.so: the C MPI_Allreduce interposer. Supported all-reduces go to
// skipring_allreduce; everything else (disabled, unsupported op/type/communicator, invalid
// arguments, calls made from inside skipring) goes to PMPI_Allreduce.
//
// Edges (issue 13): recvbuf == MPI_IN_PLACE (alone or with sendbuf), and sendbuf == recvbuf
// with count > 0 (aliasing; erroneous in MPI, which has MPI_IN_PLACE for it) are raised as
// MPI_ERR_BUFFER on the communicator's error handler with a message on stderr, whatever the
// type and op: Open MPI 4.1's own check returns MPI_ERR_BUFFER for them too, except that it
// lets an aliased count of 1 through. A call before MPI_Init or after MPI_Finalize returns
// MPI_ERR_OTHER with a message, where plain Open MPI and MPICH abort the job.
#include <cstdio>

#include "runtime/config.h"
#include "runtime/pmpi/pmpi_internal.h"
#include "skipring/skipring.h"

namespace skipring::pmpi {
namespace {

// Set while this thread runs skipring code, so that MPI_Allreduce calls skipring itself
// makes are not intercepted again.
thread_local bool t_inside_skipring = false;

// Invokes the communicator's error handler as an MPI function does and returns `code`.
// (MPI_Comm_call_errhandler itself returns MPI_SUCCESS when the handler returns, e.g. with
// MPI_ERRORS_RETURN; a failed all-reduce must still return its error code.)
int raise_error(MPI_Comm comm, int code) {
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

// Arguments that PMPI_Allreduce rejects itself with the proper MPI error class, raised on
// the communicator's error handler; they never reach skipring. (A null buffer with a
// supported type is left to skipring_allreduce, which reports MPI_ERR_BUFFER; Open MPI's
// PMPI_Allreduce would dereference it.)
bool rejected_by_pmpi(MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, int count) {
  return comm == MPI_COMM_NULL || datatype == MPI_DATATYPE_NULL || op == MPI_OP_NULL || count < 0;
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

int fallback(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm) {
  skipring_count_fallback();
  return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
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
  if (rejected_by_pmpi(datatype, op, comm, count)) {
    return fallback(sendbuf, recvbuf, count, datatype, op, comm);
  }
  if (const char* why = buffer_error(sendbuf, recvbuf, count)) {
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "skipring: rank %d: MPI_Allreduce: %s: MPI_ERR_BUFFER\n", rank, why);
    std::fflush(stderr);
    return raise_error(comm, MPI_ERR_BUFFER);
  }
  if (init_rc != MPI_SUCCESS) return raise_error(comm, init_rc);  // bad SKIPRING_* value
  if (!global_config().enable) return fallback(sendbuf, recvbuf, count, datatype, op, comm);

  int handled = 0;
  int rc;
  {
    ReentryGuard guard;
    rc = skipring_handles(datatype, op, comm, &handled);
  }
  if (rc != MPI_SUCCESS || handled == 0) {
    return fallback(sendbuf, recvbuf, count, datatype, op, comm);
  }
  {
    ReentryGuard guard;
    rc = skipring_allreduce(sendbuf, recvbuf, count, datatype, op, comm);
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
    return allreduce_impl(sendbuf, recvbuf, count, datatype, op, comm);
  } catch (...) {
    // Nothing may propagate into a C or Fortran caller; the error handler hears of it as of
    // any failed all-reduce (its own exceptions end in guarded()).
    return guarded([&] { return raise_error(comm, MPI_ERR_INTERN); });
  }
}

}  // namespace skipring::pmpi

extern "C" SKIPRING_PMPI_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return skipring::pmpi::allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}
