// libskipring_pmpi.so: the C MPI_Allreduce interposer. Supported all-reduces go to
// skipring_allreduce; everything else (disabled, unsupported op/type/communicator, invalid
// arguments, calls made from inside skipring) goes to PMPI_Allreduce.
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
bool rejected_by_pmpi(const void* sendbuf, const void* recvbuf, int count, MPI_Datatype datatype,
                      MPI_Op op, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL || datatype == MPI_DATATYPE_NULL || op == MPI_OP_NULL) {
    return true;
  }
  if (count < 0 || recvbuf == MPI_IN_PLACE) return true;
  // Aliased send and receive buffers are erroneous (MPI_IN_PLACE is the way to do that).
  return count > 0 && sendbuf == recvbuf && sendbuf != MPI_BOTTOM;
}

int fallback(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm) {
  skipring_count_fallback();
  return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int allreduce_impl(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                   MPI_Comm comm) {
  if (rejected_by_pmpi(sendbuf, recvbuf, count, datatype, op, comm)) {
    return fallback(sendbuf, recvbuf, count, datatype, op, comm);
  }
  const int init_rc = ensure_skipring_init();
  if (init_rc != MPI_SUCCESS) {
    // MPI not (or no longer) initialized: PMPI_Allreduce reports that itself.
    if (init_rc == kMpiNotActive) {
      return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    }
    return raise_error(comm, init_rc);  // bad SKIPRING_* value
  }
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
