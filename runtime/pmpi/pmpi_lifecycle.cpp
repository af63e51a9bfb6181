// libskipring_pmpi.so: MPI_Init / MPI_Init_thread / MPI_Finalize interposers (C), the
// one-time skipring initialization, and the per-rank SKIPRING_REPORT line at finalize.
//
// Configuration errors: when a SKIPRING_* variable holds a bad value, skipring_init logs a
// message naming it; the wrapper also prints that message itself (so it appears whatever
// the log level), then raises the error (MPI_ERR_ARG) on MPI_COMM_WORLD's error handler.
// With the default MPI_ERRORS_ARE_FATAL the job aborts right at MPI_Init instead of
// running with a configuration the user did not ask for; if the handler returns, MPI_Init
// returns the error code and every later intercepted MPI_Allreduce raises it again.
//
// Agreement at MPI_Init (agree_at_init): SKIPRING_ENABLE must be the same on every rank, and a
// rank with invalid values fails every rank, each with a message; otherwise mismatched ranks
// would meet in mismatched collectives at the first all-reduce. (MPI initialized without these
// wrappers, e.g. by a program calling PMPI_Init itself, skips this agreement.)
//
// Finalization: every finalize wrapper (C, Fortran, mpi_f08) writes the report and finalizes
// skipring before PMPI_Finalize; an attribute on MPI_COMM_SELF does the same from inside
// MPI_Finalize for a path that passes none of them (on_self_delete).
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/config.h"
#include "runtime/pmpi/pmpi_internal.h"
#include "skipring/skipring.h"

namespace skipring::pmpi {

std::atomic<int> g_init_state{kInitPending};

namespace {

std::mutex g_init_mutex;
std::atomic<bool> g_init_done{false};  // skipring_init has been called (g_init_rc valid)
int g_init_rc = MPI_SUCCESS;  // written before g_init_done is set (and by after_init's agreement,
                              // inside MPI_Init, before any other call can read it)
std::atomic<bool> g_finalizing{false};     // before_finalize has started
std::atomic<bool> g_finalized{false};      // PMPI_Finalize has returned (after_finalize)
thread_local bool t_in_lifecycle = false;  // inside an init / finalize wrapper (LifecycleScope)

// ensure_skipring_init's per-call answer (pmpi_internal.h), from the three above: kept after
// each change of them (under g_init_mutex, or at finalization's start).
void publish_init_state() {
  g_init_state.store(g_finalizing.load(std::memory_order_acquire) ? kMpiNotActive : g_init_rc,
                     std::memory_order_release);
}

bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

// Prints why skipring_init failed, naming the variable (parsed again from the environment
// so the text does not depend on the log level).
void print_config_error(int rc) {
  std::string message;
  Config ignored;
  if (load_config(process_env(), &ignored, &message) == Status::kOk || message.empty()) {
    message = skipring_error_string(rc);
  }
  std::fprintf(stderr, "skipring: MPI_Init: invalid skipring configuration: %s\n", message.c_str());
  std::fflush(stderr);
}

// One line per rank, parsed by tools; keep the format exactly.
void write_report() {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  skipring_totals_t totals{};
  const int rc = skipring_get_totals(&totals);
  char line[768];
  if (rc == MPI_SUCCESS) {
    // The fields after time_s were added by issue 40 (the ones before never change): the calls
    // run by the MPI library's all-reduce (`mpi`, inside calls) and the fallbacks by reason;
    // then mpi_small (issue 40 item 5): calls of MPI_Reduce_scatter(_block), MPI_Allgather,
    // MPI_Bcast and MPI_Reduce handed to PMPI below their size threshold (neither calls nor
    // fallbacks).
    uint64_t c[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const char* const names[8] = {"mpi",
                                  "fallback_datatype",
                                  "fallback_op",
                                  "fallback_comm",
                                  "fallback_memory",
                                  "fallback_disabled",
                                  "fallback_other",
                                  "fallback_thread"};
    for (int i = 0; i < 8; ++i) (void)skipring_get_counter(names[i], &c[i]);
    std::snprintf(line, sizeof(line),
                  "skipring: rank=%d calls=%" PRIu64 " fallbacks=%" PRIu64 " skips=%" PRIu64
                  " late=%" PRIu64 " bytes=%" PRIu64 " time_s=%.6f mpi=%" PRIu64
                  " fallback_datatype=%" PRIu64 " fallback_op=%" PRIu64 " fallback_comm=%" PRIu64
                  " fallback_memory=%" PRIu64 " fallback_disabled=%" PRIu64
                  " fallback_other=%" PRIu64 " fallback_thread=%" PRIu64 " mpi_small=%" PRIu64 "\n",
                  rank, totals.calls, totals.fallbacks, totals.skips, totals.late, totals.bytes,
                  totals.time_s, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], small_calls());
  } else {
    std::snprintf(line, sizeof(line), "skipring: report unavailable on rank %d: %s\n", rank,
                  skipring_error_string(rc));
  }
  std::fputs(line, stderr);
  std::fflush(stderr);
}

// Agreement at MPI_Init, where every rank is (one small all-reduce on MPI_COMM_WORLD):
//  - SKIPRING_ENABLE must be the same on every rank: an enabled rank's first all-reduce sets up
//    a communicator (collectives of its own on the application's communicator) while a
//    disabled rank calls PMPI_Allreduce, and the two would meet in mismatched collectives (a
//    hang, or worse);
//  - a rank whose SKIPRING_* values are invalid fails every intercepted call: the others must
//    know, or they would wait for it in their first all-reduce.
// Returns MPI_SUCCESS, or an error code with the message (the same on every rank) in *why.
// `local_rc` is this rank's skipring_init result.
int agree_at_init(int local_rc, std::string* why) {
  const int mine = local_rc == MPI_SUCCESS && !global_config().enable ? 0 : 1;
  const int bad = local_rc == MPI_SUCCESS ? 0 : 1;
  int in[3] = {mine, -mine, bad}, out[3] = {0, 0, 0};
  if (PMPI_Allreduce(in, out, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) {
    *why = "the agreement all-reduce on SKIPRING_ENABLE failed";
    return MPI_ERR_OTHER;
  }
  if (out[0] == -out[1] && out[2] == 0) return MPI_SUCCESS;
  int size = 1;
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  const int pair[2] = {mine, bad};
  std::vector<int> all(2 * static_cast<size_t>(size), 0);
  if (PMPI_Allgather(pair, 2, MPI_INT, all.data(), 2, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
    *why = "SKIPRING_ENABLE or another SKIPRING_* value differs across ranks";
    return MPI_ERR_ARG;
  }
  std::string on, off, invalid;
  for (int r = 0; r < size; ++r) {
    std::string& list = all[2 * static_cast<size_t>(r) + 1] != 0 ? invalid
                        : all[2 * static_cast<size_t>(r)] != 0   ? on
                                                                 : off;
    // snprintf and +=, not std::to_string or operator+: their instantiations would be exported
    // from this library (libstdc++'s namespace has default visibility; check_exports.sh).
    char num[16];
    std::snprintf(num, sizeof(num), "%s%d", list.empty() ? "" : ",", r);
    list += num;
  }
  if (!invalid.empty()) {
    *why = "invalid SKIPRING_* values on rank(s) ";
    *why += invalid;
    *why += " (their own message names the variable): skipring is off on every rank";
    return MPI_ERR_ARG;
  }
  *why = "SKIPRING_ENABLE differs across ranks: 1 on ranks ";
  *why += on;
  *why += "; 0 on ranks ";
  *why += off;
  *why +=
      " (it must be the same on every rank: set it in the job's environment, e.g. "
      "mpirun -x SKIPRING_ENABLE with Open MPI, mpiexec -genv SKIPRING_ENABLE 1 with MPICH)";
  return MPI_ERR_ARG;
}

// The report and skipring's finalization, once per process, from whichever comes first: a
// finalize wrapper, or the delete callback below.
void finalize_once() {
  if (g_finalizing.exchange(true)) return;  // second MPI_Finalize, or the callback after a wrapper
  publish_init_state();
  if (g_init_done.load(std::memory_order_acquire) && g_init_rc == MPI_SUCCESS &&
      global_config().report) {
    write_report();
  }
  ReentryGuard guard;
  (void)guarded([] { return skipring_finalize(); });
}

// MPI deletes MPI_COMM_SELF's attributes at the start of MPI_Finalize, however it was reached
// (MPI-3.1 8.7.1), with MPI still usable. Some paths pass no wrapper of this library: a program
// calling PMPI_Finalize itself, or a Fortran binding calling PMPI_Finalize directly that this
// library does not know by name. This callback writes the report and finalizes skipring there.
// (Open MPI's MPI_Finalized is already true at this point, hence no mpi_active() check.)
int on_self_delete(MPI_Comm, int, void*, void*) {
  return guarded([] {
    finalize_once();
    return MPI_SUCCESS;
  });
}

// Sets that attribute once, after skipring_init succeeded (so it is deleted before skipring's
// own MPI_COMM_SELF attribute: deletion runs in reverse order of setting).
void set_finalize_hook() {
  int keyval = MPI_KEYVAL_INVALID;
  if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_self_delete, &keyval, nullptr) ==
      MPI_SUCCESS) {
    PMPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
  }
}

}  // namespace

LifecycleScope::LifecycleScope() : nested_(t_in_lifecycle) { t_in_lifecycle = true; }
LifecycleScope::~LifecycleScope() { t_in_lifecycle = nested_; }

int ensure_skipring_init_slow() {
  if (g_init_done.load(std::memory_order_acquire)) {
    return g_finalizing.load(std::memory_order_relaxed) ? kMpiNotActive : g_init_rc;
  }
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_finalizing.load(std::memory_order_relaxed)) return kMpiNotActive;
  if (!g_init_done.load(std::memory_order_relaxed)) {
    if (!mpi_active()) return kMpiNotActive;
    int rc;
    {
      ReentryGuard guard;
      rc = guarded([] { return skipring_init(); });
      if (rc == MPI_SUCCESS) set_finalize_hook();
    }
    g_init_rc = rc;
    g_init_done.store(true, std::memory_order_release);
    publish_init_state();
  }
  return g_init_rc;
}

const char* mpi_unusable() {
  int initialized = 0;
  PMPI_Initialized(&initialized);
  if (initialized == 0) return "before MPI_Init";
  if (g_finalized.load(std::memory_order_acquire)) return "after MPI_Finalize";
  // Between before_finalize and the end of PMPI_Finalize (Open MPI's MPI_Finalized is already
  // true there, but attribute delete callbacks may still communicate): let PMPI decide.
  if (g_finalizing.load(std::memory_order_acquire)) return nullptr;
  int finalized = 0;
  PMPI_Finalized(&finalized);  // finalized without this library's wrapper
  return finalized != 0 ? "after MPI_Finalize" : nullptr;
}

void after_finalize() { g_finalized.store(true, std::memory_order_release); }

int after_init(int init_rc) {
  if (init_rc != MPI_SUCCESS) return init_rc;
  return guarded([] {
    const int rc = ensure_skipring_init();
    if (rc == kMpiNotActive) return MPI_SUCCESS;
    if (rc != MPI_SUCCESS) print_config_error(rc);
    std::string why;
    int agreed;
    {
      ReentryGuard guard;
      agreed = agree_at_init(rc, &why);
    }
    if (rc == MPI_SUCCESS && agreed != MPI_SUCCESS) {
      {
        // Every later intercepted all-reduce raises the error too (when the handler returns).
        std::lock_guard<std::mutex> lock(g_init_mutex);
        g_init_rc = agreed;
        publish_init_state();
      }
      int rank = -1;
      PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
      std::fprintf(stderr, "skipring: MPI_Init: rank %d: %s\n", rank, why.c_str());
      std::fflush(stderr);
    }
    const int out = rc != MPI_SUCCESS ? rc : agreed;
    if (out != MPI_SUCCESS) PMPI_Comm_call_errhandler(MPI_COMM_WORLD, out);  // aborts by default
    return out;
  });
}

void before_finalize() {
  // Finalization goes on whatever happens here (the result is not the caller's).
  (void)guarded([] {
    if (!mpi_active()) return MPI_SUCCESS;  // erroneous call: PMPI_Finalize reports it
    // Load the configuration if no intercepted call did yet (MPI was initialized through
    // PMPI directly), so SKIPRING_REPORT is honoured.
    (void)ensure_skipring_init();
    finalize_once();
    return MPI_SUCCESS;
  });
}

int raise_error(MPI_Comm comm, int code) {
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

const char* class_name(int code) {
  switch (code) {
    case MPI_ERR_COMM:
      return "MPI_ERR_COMM";
    case MPI_ERR_COUNT:
      return "MPI_ERR_COUNT";
    case MPI_ERR_TYPE:
      return "MPI_ERR_TYPE";
    case MPI_ERR_OP:
      return "MPI_ERR_OP";
    case MPI_ERR_ROOT:
      return "MPI_ERR_ROOT";
    case MPI_ERR_ARG:
      return "MPI_ERR_ARG";
    default:
      return "MPI_ERR_BUFFER";
  }
}

}  // namespace skipring::pmpi

extern "C" {

// Called from a Fortran wrapper of this library (MPICH's pmpi_init_ calls MPI_Init, its
// mpi_finalize_ MPI_Finalize), these only call PMPI: the outer wrapper does skipring's part.
SKIPRING_PMPI_EXPORT int MPI_Init(int* argc, char*** argv) {
  skipring::pmpi::LifecycleScope scope;
  const int rc = PMPI_Init(argc, argv);
  return scope.nested() ? rc : skipring::pmpi::after_init(rc);
}

SKIPRING_PMPI_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  skipring::pmpi::LifecycleScope scope;
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  return scope.nested() ? rc : skipring::pmpi::after_init(rc);
}

SKIPRING_PMPI_EXPORT int MPI_Finalize(void) {
  skipring::pmpi::LifecycleScope scope;
  if (scope.nested()) return PMPI_Finalize();
  skipring::pmpi::before_finalize();
  const int rc = PMPI_Finalize();
  skipring::pmpi::after_finalize();
  return rc;
}

}  // extern "C"
