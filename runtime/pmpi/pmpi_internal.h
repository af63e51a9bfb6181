// Internals shared by the translation units of libskipring_pmpi.so (the PMPI drop-in):
// the re-entry guard, one-time skipring initialization, and the C entry points that the
// Fortran bindings call after converting their arguments.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>

// Marks a symbol that the preloaded library must export (everything else is hidden).
#define SKIPRING_PMPI_EXPORT __attribute__((visibility("default")))

namespace skipring::pmpi {

// Runs `body` (returning an MPI error code) so that nothing thrown reaches a C or Fortran
// caller: any exception becomes MPI_ERR_INTERN. Every wrapper of this library goes through it.
template <typename F>
int guarded(F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return MPI_ERR_INTERN;
  }
}

// True while this thread is executing inside skipring (or inside a wrapper that calls into
// skipring); MPI_Allreduce calls made from there go straight to PMPI_Allreduce.
bool inside_skipring();

// Sets the re-entry flag of the calling thread for its lifetime (restores the old value).
class ReentryGuard {
 public:
  ReentryGuard();
  ~ReentryGuard();
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;

 private:
  bool previous_;
};

// Marks the calling thread as inside one of this library's MPI_Init / MPI_Init_thread /
// MPI_Finalize wrappers for its lifetime. The MPI library's own entry points may call back into
// another of them (MPICH's Fortran pmpi_init_ calls the C MPI_Init, its mpi_finalize_ the C
// MPI_Finalize; Open MPI's mpi_f08 calls ompi_init_f): the inner one sees nested() and only
// calls PMPI, the outermost does skipring's work once.
class LifecycleScope {
 public:
  LifecycleScope();
  ~LifecycleScope();
  LifecycleScope(const LifecycleScope&) = delete;
  LifecycleScope& operator=(const LifecycleScope&) = delete;
  bool nested() const { return nested_; }

 private:
  bool nested_;
};

// What ensure_skipring_init returns while MPI is not initialized, or once finalization began.
inline constexpr int kMpiNotActive = -1;

// Runs skipring_init() once per process and returns its result; later calls return the
// stored result without calling skipring_init again. Returns kMpiNotActive (and does not
// initialize) before MPI_Init and from the start of MPI_Finalize on.
// Per call it is one load of g_init_state (the result once known, kMpiNotActive once
// finalization began, kInitPending before): it runs before every intercepted all-reduce.
inline constexpr int kInitPending = -2;
extern std::atomic<int> g_init_state;
int ensure_skipring_init_slow();
inline int ensure_skipring_init() {
  const int s = g_init_state.load(std::memory_order_acquire);
  return s != kInitPending ? s : ensure_skipring_init_slow();
}

// Called right after PMPI_Init / PMPI_Init_thread (or their Fortran counterparts) returned
// `init_rc`. On success it initializes skipring; a bad SKIPRING_* value (which
// skipring_init logs, naming the variable) is raised on MPI_COMM_WORLD's error handler
// (fatal by default) and returned. Returns `init_rc` when that is already an error.
int after_init(int init_rc);

// Called right before PMPI_Finalize (C or Fortran): writes the SKIPRING_REPORT line and
// frees skipring's state. Also run, once, by the delete callback of an attribute on
// MPI_COMM_SELF (deleted at the start of MPI_Finalize), which covers finalize paths that reach
// PMPI_Finalize without any wrapper of this library.
void before_finalize();
// Called right after PMPI_Finalize returned (C or Fortran): MPI is finished for good.
void after_finalize();

// Invokes the communicator's error handler as an MPI function does and returns `code`.
// (MPI_Comm_call_errhandler itself returns MPI_SUCCESS when the handler returns, e.g. with
// MPI_ERRORS_RETURN; a failed call must still return its error code.)
int raise_error(MPI_Comm comm, int code);

// The name of an argument-error class the wrappers raise ("MPI_ERR_COMM", ...; MPI_ERR_BUFFER
// for any other code).
const char* class_name(int code);

// Why no MPI function may be called now ("before MPI_Init", "after MPI_Finalize"), or nullptr
// when MPI is usable (inside MPI_Finalize included: its attribute callbacks may communicate).
const char* mpi_unusable();

// The whole MPI_Allreduce wrapper behaviour; never throws. The Fortran bindings call it
// with C handles and with MPI_IN_PLACE / MPI_BOTTOM already translated.
int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm);

// The other interposed collectives' whole behaviour (pmpi_collectives.cpp), for the C wrappers
// and the Fortran bindings (C handles, MPI_IN_PLACE / MPI_BOTTOM translated); never throw.
int reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm);
int reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
           int root, MPI_Comm comm);

// Calls of those collectives handed to PMPI because they were below their size threshold (the
// report line's mpi_small field).
uint64_t small_calls();

}  // namespace skipring::pmpi
