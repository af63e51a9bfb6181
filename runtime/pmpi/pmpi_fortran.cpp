// libskipring_pmpi.so: Fortran bindings of MPI_Allreduce, MPI_Reduce_scatter_block,
// MPI_Reduce_scatter, MPI_Allgather, MPI_Bcast, MPI_Reduce, MPI_Init, MPI_Init_thread and
// MPI_Finalize. The MPI library's own Fortran entry points call PMPI_* directly, so the C
// wrappers never see Fortran calls; these definitions (found first under LD_PRELOAD)
// convert the arguments and take the same path as C callers.
//
// Covered: `include 'mpif.h'` and `use mpi` (symbols mpi_allreduce_ and its other
// manglings), Open MPI's `use mpi_f08` layer, which calls the ompi_*_f functions, and the
// mpi_f08 MPI_Init / MPI_Init_thread / MPI_Finalize of both MPIs (mpi_init_f08_ ...; MPICH's
// mpi_f08 MPI_Allreduce calls the C MPI_Allreduce, intercepted by pmpi_allreduce.cpp). In
// Open MPI's mpi_f08, MPI_Allreduce and PMPI_Allreduce both end in ompi_allreduce_f, so an
// f08 PMPI_Allreduce call is intercepted too (the mpif.h / use mpi pmpi_allreduce_ is not).
#include <dlfcn.h>

#include <initializer_list>
#include <vector>

#include "runtime/pmpi/pmpi_internal.h"

// Fortran's MPI_IN_PLACE and MPI_BOTTOM are variables whose address is the sentinel.
// Open MPI: common blocks /mpi_fortran_in_place/ and /mpi_fortran_bottom/, named as the
// Fortran compiler mangles them (gfortran: mpi_fortran_in_place_). MPICH: the addresses
// are recorded at Fortran MPI_Init in MPIR_F_MPI_IN_PLACE / MPIR_F_MPI_BOTTOM. All are weak
// references, so the library loads whatever MPI provides; a missing one has address null.
extern "C" {
extern int mpi_fortran_in_place_ __attribute__((weak));
extern int mpi_fortran_in_place__ __attribute__((weak));
extern int mpi_fortran_in_place __attribute__((weak));
extern int MPI_FORTRAN_IN_PLACE __attribute__((weak));
extern int mpi_fortran_bottom_ __attribute__((weak));
extern int mpi_fortran_bottom__ __attribute__((weak));
extern int mpi_fortran_bottom __attribute__((weak));
extern int MPI_FORTRAN_BOTTOM __attribute__((weak));
extern void* MPIR_F_MPI_IN_PLACE __attribute__((weak));
extern void* MPIR_F_MPI_BOTTOM __attribute__((weak));
}

namespace skipring::pmpi {
namespace {

bool matches_sentinel(const void* p, std::initializer_list<const void*> symbol_addresses,
                      void* const* recorded_address) {
  if (p == nullptr) return false;
  for (const void* address : symbol_addresses) {
    if (address != nullptr && address == p) return true;
  }
  return recorded_address != nullptr && *recorded_address != nullptr && *recorded_address == p;
}

bool is_fortran_in_place(const void* p) {
  return matches_sentinel(p,
                          {&mpi_fortran_in_place_, &mpi_fortran_in_place__, &mpi_fortran_in_place,
                           &MPI_FORTRAN_IN_PLACE},
                          &MPIR_F_MPI_IN_PLACE);
}

bool is_fortran_bottom(const void* p) {
  return matches_sentinel(
      p, {&mpi_fortran_bottom_, &mpi_fortran_bottom__, &mpi_fortran_bottom, &MPI_FORTRAN_BOTTOM},
      &MPIR_F_MPI_BOTTOM);
}

// Translates a Fortran buffer argument into what the C API expects.
void* translate_buffer(void* p) {
  if (is_fortran_in_place(p)) return MPI_IN_PLACE;
  if (is_fortran_bottom(p)) return MPI_BOTTOM;
  return p;
}

// Stores an MPI error code where the Fortran caller asked for it.
void set_ierr(MPI_Fint* ierr, int code) {
  if (ierr != nullptr) *ierr = static_cast<MPI_Fint>(code);
}

void fortran_allreduce(void* sendbuf, void* recvbuf, const MPI_Fint* count,
                       const MPI_Fint* datatype, const MPI_Fint* op, const MPI_Fint* comm,
                       MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             // A Fortran MPI_IN_PLACE as recvbuf becomes the C one, which is rejected
             // (MPI_ERR_BUFFER) instead of reducing into the sentinel variable.
             return allreduce(translate_buffer(sendbuf), translate_buffer(recvbuf),
                              static_cast<int>(*count), MPI_Type_f2c(*datatype), MPI_Op_f2c(*op),
                              MPI_Comm_f2c(*comm));
           }));
}

// The other collectives (issue 40 item 5), as MPI_Allreduce: C handles, the Fortran sentinels
// translated, then the C path.
void fortran_reduce_scatter_block(void* sendbuf, void* recvbuf, const MPI_Fint* recvcount,
                                  const MPI_Fint* datatype, const MPI_Fint* op,
                                  const MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             return reduce_scatter_block(translate_buffer(sendbuf), translate_buffer(recvbuf),
                                         static_cast<int>(*recvcount), MPI_Type_f2c(*datatype),
                                         MPI_Op_f2c(*op), MPI_Comm_f2c(*comm));
           }));
}

void fortran_reduce_scatter(void* sendbuf, void* recvbuf, const MPI_Fint* recvcounts,
                            const MPI_Fint* datatype, const MPI_Fint* op, const MPI_Fint* comm,
                            MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             const MPI_Comm c = MPI_Comm_f2c(*comm);
             // recvcounts has one entry per rank of the (local) group; MPI_Fint may be wider
             // than int, so they are copied (an invalid communicator: PMPI's error, no copy).
             int size = 0;
             std::vector<int> counts;
             if (c != MPI_COMM_NULL && recvcounts != nullptr &&
                 PMPI_Comm_size(c, &size) == MPI_SUCCESS) {
               counts.assign(recvcounts, recvcounts + size);
             }
             return reduce_scatter(
                 translate_buffer(sendbuf), translate_buffer(recvbuf),
                 recvcounts != nullptr && c != MPI_COMM_NULL ? counts.data() : nullptr,
                 MPI_Type_f2c(*datatype), MPI_Op_f2c(*op), c);
           }));
}

void fortran_allgather(void* sendbuf, const MPI_Fint* sendcount, const MPI_Fint* sendtype,
                       void* recvbuf, const MPI_Fint* recvcount, const MPI_Fint* recvtype,
                       const MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             return allgather(translate_buffer(sendbuf), static_cast<int>(*sendcount),
                              MPI_Type_f2c(*sendtype), translate_buffer(recvbuf),
                              static_cast<int>(*recvcount), MPI_Type_f2c(*recvtype),
                              MPI_Comm_f2c(*comm));
           }));
}

void fortran_bcast(void* buffer, const MPI_Fint* count, const MPI_Fint* datatype,
                   const MPI_Fint* root, const MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             return bcast(translate_buffer(buffer), static_cast<int>(*count),
                          MPI_Type_f2c(*datatype), static_cast<int>(*root), MPI_Comm_f2c(*comm));
           }));
}

void fortran_reduce(void* sendbuf, void* recvbuf, const MPI_Fint* count, const MPI_Fint* datatype,
                    const MPI_Fint* op, const MPI_Fint* root, const MPI_Fint* comm,
                    MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             return reduce(translate_buffer(sendbuf), translate_buffer(recvbuf),
                           static_cast<int>(*count), MPI_Type_f2c(*datatype), MPI_Op_f2c(*op),
                           static_cast<int>(*root), MPI_Comm_f2c(*comm));
           }));
}

// The MPI library's Fortran profiling entry points (pmpi_init_ ...), looked up at run time
// so that this library needs no Fortran MPI library at link time. They do the Fortran-side
// set-up (e.g. MPICH records the sentinel addresses there).
template <typename Fn>
Fn find_fortran_pmpi(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = dlsym(RTLD_DEFAULT, name)) return reinterpret_cast<Fn>(symbol);
  }
  return nullptr;
}

using FortranInitFn = void (*)(MPI_Fint* ierr);
using FortranInitThreadFn = void (*)(MPI_Fint* required, MPI_Fint* provided, MPI_Fint* ierr);
using FortranFinalizeFn = void (*)(MPI_Fint* ierr);

void fortran_init(MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             int code;
             LifecycleScope scope;
             auto pmpi_init = scope.nested()
                                  ? nullptr
                                  : find_fortran_pmpi<FortranInitFn>(
                                        {"pmpi_init_", "pmpi_init__", "pmpi_init", "PMPI_INIT"});
             if (pmpi_init != nullptr) {
               MPI_Fint fortran_rc = MPI_SUCCESS;
               pmpi_init(&fortran_rc);
               code = fortran_rc;
             } else {
               code = PMPI_Init(nullptr, nullptr);
             }
             if (!scope.nested()) code = after_init(code);
             return code;
           }));
}

void fortran_init_thread(MPI_Fint* required, MPI_Fint* provided, MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             int code;
             LifecycleScope scope;
             auto pmpi_init_thread = scope.nested()
                                         ? nullptr
                                         : find_fortran_pmpi<FortranInitThreadFn>(
                                               {"pmpi_init_thread_", "pmpi_init_thread__",
                                                "pmpi_init_thread", "PMPI_INIT_THREAD"});
             if (pmpi_init_thread != nullptr) {
               MPI_Fint fortran_rc = MPI_SUCCESS;
               pmpi_init_thread(required, provided, &fortran_rc);
               code = fortran_rc;
             } else {
               int c_provided = MPI_THREAD_SINGLE;
               code = PMPI_Init_thread(nullptr, nullptr, static_cast<int>(*required), &c_provided);
               *provided = static_cast<MPI_Fint>(c_provided);
             }
             if (!scope.nested()) code = after_init(code);
             return code;
           }));
}

void fortran_finalize(MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             int code;
             LifecycleScope scope;
             if (!scope.nested()) before_finalize();
             auto pmpi_finalize =
                 scope.nested()
                     ? nullptr
                     : find_fortran_pmpi<FortranFinalizeFn>(
                           {"pmpi_finalize_", "pmpi_finalize__", "pmpi_finalize", "PMPI_FINALIZE"});
             if (pmpi_finalize != nullptr) {
               MPI_Fint fortran_rc = MPI_SUCCESS;
               pmpi_finalize(&fortran_rc);
               code = fortran_rc;
             } else {
               code = PMPI_Finalize();
             }
             if (!scope.nested()) after_finalize();
             return code;
           }));
}

// mpi_f08's MPI_Init, MPI_Init_thread and MPI_Finalize (symbols mpi_init_f08_ ...; the error
// argument is optional there: absent, the pointer is null). MPICH's call PMPI_Init,
// PMPI_Init_thread and PMPI_Finalize directly, so no other wrapper would see them; Open MPI's
// call ompi_init_f ... (wrapped below too: those see nested() and only call PMPI). Each runs
// the MPI library's own definition, the next one after this library (RTLD_NEXT), so whatever
// else it does is kept.
template <typename Fn>
Fn next_definition(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

void f08_init(const char* name, MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             LifecycleScope scope;
             int code;
             if (auto next = next_definition<FortranInitFn>(name)) {
               MPI_Fint fortran_rc = MPI_SUCCESS;
               next(&fortran_rc);
               code = fortran_rc;
             } else {
               code = PMPI_Init(nullptr, nullptr);
             }
             return scope.nested() ? code : after_init(code);
           }));
}

void f08_init_thread(const char* name, MPI_Fint* required, MPI_Fint* provided, MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             LifecycleScope scope;
             int code;
             if (auto next = next_definition<FortranInitThreadFn>(name)) {
               MPI_Fint fortran_rc = MPI_SUCCESS;
               next(required, provided, &fortran_rc);
               code = fortran_rc;
             } else {
               int c_provided = MPI_THREAD_SINGLE;
               code = PMPI_Init_thread(nullptr, nullptr, static_cast<int>(*required), &c_provided);
               *provided = static_cast<MPI_Fint>(c_provided);
             }
             return scope.nested() ? code : after_init(code);
           }));
}

void f08_finalize(const char* name, MPI_Fint* ierr) {
  set_ierr(ierr, guarded([&] {
             LifecycleScope scope;
             if (!scope.nested()) before_finalize();
             int code;
             if (auto next = next_definition<FortranFinalizeFn>(name)) {
               MPI_Fint fortran_rc = MPI_SUCCESS;
               next(&fortran_rc);
               code = fortran_rc;
             } else {
               code = PMPI_Finalize();
             }
             if (!scope.nested()) after_finalize();
             return code;
           }));
}

}  // namespace
}  // namespace skipring::pmpi

// Every common Fortran name mangling, plus Open MPI's mpi_f08 back-end names.
#define SKIPRING_PMPI_FORTRAN_ALLREDUCE(name)                                             \
  SKIPRING_PMPI_EXPORT void name(void* sendbuf, void* recvbuf, MPI_Fint* count,           \
                                 MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,        \
                                 MPI_Fint* ierr) {                                        \
    skipring::pmpi::fortran_allreduce(sendbuf, recvbuf, count, datatype, op, comm, ierr); \
  }
#define SKIPRING_PMPI_FORTRAN_REDUCE_SCATTER_BLOCK(name)                                          \
  SKIPRING_PMPI_EXPORT void name(void* sendbuf, void* recvbuf, MPI_Fint* recvcount,               \
                                 MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,                \
                                 MPI_Fint* ierr) {                                                \
    skipring::pmpi::fortran_reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, \
                                                 ierr);                                           \
  }
#define SKIPRING_PMPI_FORTRAN_REDUCE_SCATTER(name)                                           \
  SKIPRING_PMPI_EXPORT void name(void* sendbuf, void* recvbuf, MPI_Fint* recvcounts,         \
                                 MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,           \
                                 MPI_Fint* ierr) {                                           \
    skipring::pmpi::fortran_reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm, \
                                           ierr);                                            \
  }
#define SKIPRING_PMPI_FORTRAN_ALLGATHER(name)                                                     \
  SKIPRING_PMPI_EXPORT void name(void* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,          \
                                 void* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,          \
                                 MPI_Fint* comm, MPI_Fint* ierr) {                                \
    skipring::pmpi::fortran_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, \
                                      comm, ierr);                                                \
  }
#define SKIPRING_PMPI_FORTRAN_BCAST(name)                                           \
  SKIPRING_PMPI_EXPORT void name(void* buffer, MPI_Fint* count, MPI_Fint* datatype, \
                                 MPI_Fint* root, MPI_Fint* comm, MPI_Fint* ierr) {  \
    skipring::pmpi::fortran_bcast(buffer, count, datatype, root, comm, ierr);       \
  }
#define SKIPRING_PMPI_FORTRAN_REDUCE(name)                                                         \
  SKIPRING_PMPI_EXPORT void name(void* sendbuf, void* recvbuf, MPI_Fint* count,                    \
                                 MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* root, MPI_Fint* comm, \
                                 MPI_Fint* ierr) {                                                 \
    skipring::pmpi::fortran_reduce(sendbuf, recvbuf, count, datatype, op, root, comm, ierr);       \
  }
#define SKIPRING_PMPI_FORTRAN_INIT(name) \
  SKIPRING_PMPI_EXPORT void name(MPI_Fint* ierr) { skipring::pmpi::fortran_init(ierr); }
#define SKIPRING_PMPI_FORTRAN_INIT_THREAD(name)                                            \
  SKIPRING_PMPI_EXPORT void name(MPI_Fint* required, MPI_Fint* provided, MPI_Fint* ierr) { \
    skipring::pmpi::fortran_init_thread(required, provided, ierr);                         \
  }
#define SKIPRING_PMPI_FORTRAN_FINALIZE(name) \
  SKIPRING_PMPI_EXPORT void name(MPI_Fint* ierr) { skipring::pmpi::fortran_finalize(ierr); }

extern "C" {

SKIPRING_PMPI_FORTRAN_ALLREDUCE(mpi_allreduce_)
SKIPRING_PMPI_FORTRAN_ALLREDUCE(mpi_allreduce__)
SKIPRING_PMPI_FORTRAN_ALLREDUCE(mpi_allreduce)
SKIPRING_PMPI_FORTRAN_ALLREDUCE(MPI_ALLREDUCE)
SKIPRING_PMPI_FORTRAN_ALLREDUCE(ompi_allreduce_f)

// Every mangling and Open MPI's mpi_f08 back end (ompi_*_f); MPICH's mpi_f08 calls the C
// functions, intercepted by pmpi_collectives.cpp.
#define SKIPRING_PMPI_FORTRAN_ALL(MACRO, lower, upper) \
  MACRO(mpi_##lower##_)                                \
  MACRO(mpi_##lower##__)                               \
  MACRO(mpi_##lower)                                   \
  MACRO(MPI_##upper)                                   \
  MACRO(ompi_##lower##_f)

SKIPRING_PMPI_FORTRAN_ALL(SKIPRING_PMPI_FORTRAN_REDUCE_SCATTER_BLOCK, reduce_scatter_block,
                          REDUCE_SCATTER_BLOCK)
SKIPRING_PMPI_FORTRAN_ALL(SKIPRING_PMPI_FORTRAN_REDUCE_SCATTER, reduce_scatter, REDUCE_SCATTER)
SKIPRING_PMPI_FORTRAN_ALL(SKIPRING_PMPI_FORTRAN_ALLGATHER, allgather, ALLGATHER)
SKIPRING_PMPI_FORTRAN_ALL(SKIPRING_PMPI_FORTRAN_BCAST, bcast, BCAST)
SKIPRING_PMPI_FORTRAN_ALL(SKIPRING_PMPI_FORTRAN_REDUCE, reduce, REDUCE)

SKIPRING_PMPI_FORTRAN_INIT(mpi_init_)
SKIPRING_PMPI_FORTRAN_INIT(mpi_init__)
SKIPRING_PMPI_FORTRAN_INIT(mpi_init)
SKIPRING_PMPI_FORTRAN_INIT(MPI_INIT)
SKIPRING_PMPI_FORTRAN_INIT(ompi_init_f)

SKIPRING_PMPI_FORTRAN_INIT_THREAD(mpi_init_thread_)
SKIPRING_PMPI_FORTRAN_INIT_THREAD(mpi_init_thread__)
SKIPRING_PMPI_FORTRAN_INIT_THREAD(mpi_init_thread)
SKIPRING_PMPI_FORTRAN_INIT_THREAD(MPI_INIT_THREAD)
SKIPRING_PMPI_FORTRAN_INIT_THREAD(ompi_init_thread_f)

SKIPRING_PMPI_FORTRAN_FINALIZE(mpi_finalize_)
SKIPRING_PMPI_FORTRAN_FINALIZE(mpi_finalize__)
SKIPRING_PMPI_FORTRAN_FINALIZE(mpi_finalize)
SKIPRING_PMPI_FORTRAN_FINALIZE(MPI_FINALIZE)
SKIPRING_PMPI_FORTRAN_FINALIZE(ompi_finalize_f)

// mpi_f08 (gfortran's name of each binding; MPICH and Open MPI use the same ones).
SKIPRING_PMPI_EXPORT void mpi_init_f08_(MPI_Fint* ierr) {
  skipring::pmpi::f08_init("mpi_init_f08_", ierr);
}
SKIPRING_PMPI_EXPORT void mpi_init_thread_f08_(MPI_Fint* required, MPI_Fint* provided,
                                               MPI_Fint* ierr) {
  skipring::pmpi::f08_init_thread("mpi_init_thread_f08_", required, provided, ierr);
}
SKIPRING_PMPI_EXPORT void mpi_finalize_f08_(MPI_Fint* ierr) {
  skipring::pmpi::f08_finalize("mpi_finalize_f08_", ierr);
}

}  // extern "C"
