/* A plain C MPI program (no skipring API) that exercises MPI_Allreduce and checks every
 * result itself; run with libskipring_pmpi.so preloaded (and without it) by ctest. Covers
 * several types and predefined ops, in place and not, counts 0, 1, 7 and 100003, a split
 * communicator, fallbacks (user-defined commutative and non-commutative ops, a derived
 * datatype), MAXLOC on MPI_2INT (skipring's own since issue 40) and errors returned under
 * MPI_ERRORS_RETURN. Exits non-zero on any wrong result. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures = 0;
static int g_checks = 0;
static int g_world_rank = 0;

#define CHECK(cond, ...)                                                                     \
  do {                                                                                       \
    ++g_checks;                                                                              \
    if (!(cond)) {                                                                           \
      if (g_failures < 20) {                                                                 \
        fprintf(stderr, "pmpi_allreduce_c: rank %d: FAILED %s:%d: ", g_world_rank, __FILE__, \
                __LINE__);                                                                   \
        fprintf(stderr, __VA_ARGS__);                                                        \
        fprintf(stderr, "\n");                                                               \
      }                                                                                      \
      ++g_failures;                                                                          \
    }                                                                                        \
  } while (0)

static const int kCounts[] = {0, 1, 7, 100003};
enum { kNumCounts = sizeof(kCounts) / sizeof(kCounts[0]) };

typedef enum { kSum, kProd, kMax, kMin, kBand, kBor, kBxor } OpKind;

static MPI_Op mpi_op(OpKind kind) {
  switch (kind) {
    case kSum:
      return MPI_SUM;
    case kProd:
      return MPI_PROD;
    case kMax:
      return MPI_MAX;
    case kMin:
      return MPI_MIN;
    case kBand:
      return MPI_BAND;
    case kBor:
      return MPI_BOR;
    default:
      return MPI_BXOR;
  }
}

static const char* op_name(OpKind kind) {
  static const char* const kNames[] = {"SUM", "PROD", "MAX", "MIN", "BAND", "BOR", "BXOR"};
  return kNames[kind];
}

typedef enum { kInt, kLongLong, kUnsigned, kUint8, kFloat, kDouble } TypeKind;

static MPI_Datatype mpi_type(TypeKind t) {
  switch (t) {
    case kInt:
      return MPI_INT;
    case kLongLong:
      return MPI_LONG_LONG;
    case kUnsigned:
      return MPI_UNSIGNED;
    case kUint8:
      return MPI_UINT8_T;
    case kFloat:
      return MPI_FLOAT;
    default:
      return MPI_DOUBLE;
  }
}

static const char* type_name(TypeKind t) {
  static const char* const kNames[] = {"int", "long long", "unsigned", "uint8", "float", "double"};
  return kNames[t];
}

static size_t type_size(TypeKind t) {
  switch (t) {
    case kInt:
      return sizeof(int);
    case kLongLong:
      return sizeof(long long);
    case kUnsigned:
      return sizeof(unsigned);
    case kUint8:
      return sizeof(uint8_t);
    case kFloat:
      return sizeof(float);
    default:
      return sizeof(double);
  }
}

static void store(TypeKind t, void* buf, int i, long long v) {
  switch (t) {
    case kInt:
      ((int*)buf)[i] = (int)v;
      break;
    case kLongLong:
      ((long long*)buf)[i] = v;
      break;
    case kUnsigned:
      ((unsigned*)buf)[i] = (unsigned)v;
      break;
    case kUint8:
      ((uint8_t*)buf)[i] = (uint8_t)v;
      break;
    case kFloat:
      ((float*)buf)[i] = (float)v;
      break;
    case kDouble:
      ((double*)buf)[i] = (double)v;
      break;
  }
}

/* True when buf[i] holds `want` as type t represents it. */
static int holds(TypeKind t, const void* buf, int i, long long want) {
  switch (t) {
    case kInt:
      return ((const int*)buf)[i] == (int)want;
    case kLongLong:
      return ((const long long*)buf)[i] == want;
    case kUnsigned:
      return ((const unsigned*)buf)[i] == (unsigned)want;
    case kUint8:
      return ((const uint8_t*)buf)[i] == (uint8_t)want;
    case kFloat:
      return ((const float*)buf)[i] == (float)want;
    default:
      return ((const double*)buf)[i] == (double)want;
  }
}

/* Contributions are small integers, exact in float and double in any reduction order, and
 * no result overflows any tested type (Open MPI 4.1's AVX reduction kernels saturate on
 * small-integer overflow instead of wrapping, so overflow is not portable). Signed types
 * get negative values too. */
static int is_unsigned(TypeKind t) { return t == kUnsigned || t == kUint8; }

static long long contribution(TypeKind t, OpKind op, int rank, int i) {
  if (op == kProd) return ((rank + i) % 3 == 1) ? 2 : 1; /* products up to 2^size */
  long long v = (long long)((rank * 7 + i * 3) % 11);
  if (op == kBand || op == kBor || op == kBxor) return (v * 23) & 0xff;
  return is_unsigned(t) ? v : v - 3;
}

/* Expected element i over ranks 0..size-1, computed in 64-bit integers. */
static long long expected(TypeKind t, OpKind op, int size, int i) {
  long long acc = contribution(t, op, 0, i);
  for (int r = 1; r < size; ++r) {
    long long v = contribution(t, op, r, i);
    switch (op) {
      case kSum:
        acc += v;
        break;
      case kProd:
        acc *= v;
        break;
      case kMax:
        acc = v > acc ? v : acc;
        break;
      case kMin:
        acc = v < acc ? v : acc;
        break;
      case kBand:
        acc &= v;
        break;
      case kBor:
        acc |= v;
        break;
      case kBxor:
        acc ^= v;
        break;
    }
  }
  return acc;
}

static int applicable(TypeKind t, OpKind op) {
  int is_float = t == kFloat || t == kDouble;
  return !(is_float && (op == kBand || op == kBor || op == kBxor));
}

static void run_case(MPI_Comm comm, const char* comm_name, TypeKind t, OpKind op, int count,
                     int in_place) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  size_t bytes = type_size(t) * (size_t)(count > 0 ? count : 1);
  void* send = malloc(bytes);
  void* recv = malloc(bytes);
  for (int i = 0; i < count; ++i) {
    store(t, in_place ? recv : send, i, contribution(t, op, rank, i));
    if (!in_place) store(t, recv, i, 99); /* must be overwritten */
  }
  int rc =
      MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, count, mpi_type(t), mpi_op(op), comm);
  CHECK(rc == MPI_SUCCESS, "%s %s %s count=%d in_place=%d: rc=%d", comm_name, type_name(t),
        op_name(op), count, in_place, rc);
  int bad = 0;
  for (int i = 0; i < count && bad < 3; ++i) {
    long long want = expected(t, op, size, i);
    if (!holds(t, recv, i, want)) {
      ++bad;
      CHECK(0, "%s %s %s count=%d in_place=%d: element %d wrong (want %lld)", comm_name,
            type_name(t), op_name(op), count, in_place, i, want);
    }
  }
  /* The send buffer is input only. */
  for (int i = 0; !in_place && i < count; ++i) {
    if (!holds(t, send, i, contribution(t, op, rank, i))) {
      CHECK(0, "%s %s %s count=%d: send buffer modified at %d", comm_name, type_name(t),
            op_name(op), count, i);
      break;
    }
  }
  free(send);
  free(recv);
}

static void run_predefined(MPI_Comm comm, const char* comm_name) {
  static const TypeKind kTypes[] = {kInt, kLongLong, kUnsigned, kUint8, kFloat, kDouble};
  static const OpKind kOps[] = {kSum, kProd, kMax, kMin, kBand, kBor, kBxor};
  for (size_t ti = 0; ti < sizeof(kTypes) / sizeof(kTypes[0]); ++ti) {
    for (size_t oi = 0; oi < sizeof(kOps) / sizeof(kOps[0]); ++oi) {
      if (!applicable(kTypes[ti], kOps[oi])) continue;
      for (int ci = 0; ci < kNumCounts; ++ci) {
        /* The large count only for a few combinations, to keep the run short. */
        if (kCounts[ci] > 1000 && !(kOps[oi] == kSum || kTypes[ti] == kInt)) continue;
        for (int in_place = 0; in_place <= 1; ++in_place) {
          run_case(comm, comm_name, kTypes[ti], kOps[oi], kCounts[ci], in_place);
        }
      }
    }
  }
}

/* User-defined commutative op: sum modulo 1000. */
static void sum_mod_1000_fn(void* in, void* inout, int* len, MPI_Datatype* type) {
  (void)type;
  int* a = (int*)in;
  int* b = (int*)inout;
  for (int i = 0; i < *len; ++i) b[i] = (a[i] + b[i]) % 1000;
}

/* User-defined non-commutative op: a o b = a (the result is rank 0's contribution). */
static void take_first_fn(void* in, void* inout, int* len, MPI_Datatype* type) {
  (void)type;
  memcpy(inout, in, sizeof(int) * (size_t)*len);
}

/* User-defined op on pairs of ints (a contiguous derived type): element-wise sum. */
static void pair_sum_fn(void* in, void* inout, int* len, MPI_Datatype* type) {
  (void)type;
  int* a = (int*)in;
  int* b = (int*)inout;
  for (int i = 0; i < 2 * *len; ++i) b[i] += a[i];
}

static void run_fallbacks(MPI_Comm comm) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  enum { kN = 1001 };
  int* send = malloc(sizeof(int) * kN);
  int* recv = malloc(sizeof(int) * kN);

  MPI_Op sum_mod;
  MPI_Op_create(sum_mod_1000_fn, 1, &sum_mod);
  for (int in_place = 0; in_place <= 1; ++in_place) {
    for (int i = 0; i < kN; ++i) (in_place ? recv : send)[i] = (rank * 311 + i * 17) % 1000;
    int rc = MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, kN, MPI_INT, sum_mod, comm);
    CHECK(rc == MPI_SUCCESS, "user op rc=%d", rc);
    for (int i = 0; i < kN; ++i) {
      int want = 0;
      for (int r = 0; r < size; ++r) want = (want + (r * 311 + i * 17) % 1000) % 1000;
      if (recv[i] != want) {
        CHECK(0, "user op in_place=%d element %d: got %d want %d", in_place, i, recv[i], want);
        break;
      }
    }
  }
  MPI_Op_free(&sum_mod);

  MPI_Op take_first;
  MPI_Op_create(take_first_fn, 0, &take_first);
  for (int i = 0; i < kN; ++i) send[i] = rank * 100000 + i;
  int rc = MPI_Allreduce(send, recv, kN, MPI_INT, take_first, comm);
  CHECK(rc == MPI_SUCCESS, "non-commutative op rc=%d", rc);
  for (int i = 0; i < kN; ++i) {
    if (recv[i] != i) {
      CHECK(0, "non-commutative op element %d: got %d want %d", i, recv[i], i);
      break;
    }
  }
  MPI_Op_free(&take_first);

  /* MAXLOC on MPI_2INT (a fallback before issue 40, skipring's own now). */
  int pair[2] = {(rank * 5) % size, rank};
  int out[2] = {-1, -1};
  rc = MPI_Allreduce(pair, out, 1, MPI_2INT, MPI_MAXLOC, comm);
  CHECK(rc == MPI_SUCCESS, "MAXLOC rc=%d", rc);
  {
    int best = -1, loc = -1;
    for (int r = 0; r < size; ++r) {
      int v = (r * 5) % size;
      if (v > best) {
        best = v;
        loc = r;
      }
    }
    CHECK(out[0] == best && out[1] == loc, "MAXLOC got (%d,%d) want (%d,%d)", out[0], out[1], best,
          loc);
  }

  /* A derived (contiguous) datatype, with a user op (Open MPI rejects predefined ops on
   * derived types). */
  MPI_Datatype two_ints;
  MPI_Type_contiguous(2, MPI_INT, &two_ints);
  MPI_Type_commit(&two_ints);
  MPI_Op pair_sum;
  MPI_Op_create(pair_sum_fn, 1, &pair_sum);
  for (int i = 0; i < 10; ++i) send[i] = rank + i;
  rc = MPI_Allreduce(send, recv, 5, two_ints, pair_sum, comm);
  CHECK(rc == MPI_SUCCESS, "derived type rc=%d", rc);
  for (int i = 0; i < 10; ++i) {
    int want = size * (size - 1) / 2 + size * i;
    CHECK(recv[i] == want, "derived type element %d: got %d want %d", i, recv[i], want);
  }
  MPI_Op_free(&pair_sum);
  MPI_Type_free(&two_ints);
  free(send);
  free(recv);
}

static int g_handler_calls = 0;
static void counting_handler(MPI_Comm* comm, int* code, ...) {
  (void)comm;
  (void)code;
  ++g_handler_calls;
}

/* Invalid calls must come back as errors through the communicator's error handler.
 * `null_buffer`: also pass a null receive buffer with a supported type, which skipring
 * rejects with MPI_ERR_BUFFER (plain Open MPI dereferences it, so only with the library), and
 * overlapping buffers (MPI_ERR_BUFFER with the library; plain MPI does not check them). */
static int g_negative_count = 1; /* --no-negative-count: skip the count -1 case */
static void run_errors(int null_buffer) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Errhandler handler;
  MPI_Comm_create_errhandler(counting_handler, &handler);
  MPI_Comm_set_errhandler(comm, handler);
  int x = 1, y = 0, cls = 0;
  float f = 1.0f, g = 0.0f;

  int rc;
  if (g_negative_count) {
    g_handler_calls = 0;
    rc = MPI_Allreduce(&x, &y, -1, MPI_INT, MPI_SUM, comm);
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_COUNT, "count -1: rc=%d class=%d", rc, cls);
    CHECK(g_handler_calls == 1, "count -1: handler called %d times", g_handler_calls);
  }

  g_handler_calls = 0;
  rc = MPI_Allreduce(&f, &g, 1, MPI_FLOAT, MPI_BAND, comm);
  MPI_Error_class(rc, &cls);
  CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_OP, "BAND on float: rc=%d class=%d", rc, cls);
  CHECK(g_handler_calls == 1, "BAND on float: handler called %d times", g_handler_calls);

  if (null_buffer) {
    g_handler_calls = 0;
    rc = MPI_Allreduce(&x, NULL, 1, MPI_INT, MPI_SUM, comm);
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_BUFFER, "null recvbuf: rc=%d class=%d", rc, cls);
    CHECK(g_handler_calls == 1, "null recvbuf: handler called %d times", g_handler_calls);
  }

  if (null_buffer) {
    /* Overlapping send and receive buffers (not the same address): erroneous in MPI, rejected
     * by skipring with MPI_ERR_BUFFER (issue 40; plain Open MPI does not check it). */
    int v[5] = {1, 2, 3, 4, 5};
    g_handler_calls = 0;
    rc = MPI_Allreduce(v, v + 1, 4, MPI_INT, MPI_SUM, comm);
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_BUFFER, "overlapping buffers: rc=%d class=%d", rc,
          cls);
    CHECK(g_handler_calls == 1, "overlapping buffers: handler called %d times", g_handler_calls);
    CHECK(v[0] == 1 && v[1] == 2 && v[4] == 5, "overlapping buffers: the buffer was written");
  }

  /* The communicator still works afterwards. */
  rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, comm);
  int size;
  MPI_Comm_size(comm, &size);
  CHECK(rc == MPI_SUCCESS && y == size, "after errors: rc=%d y=%d", rc, y);

  MPI_Errhandler_free(&handler);
  MPI_Comm_free(&comm);
}

/* Options: --init-thread (start with MPI_Init_thread instead of MPI_Init),
 * --null-buffer (see run_errors), --pmpi-finalize (end with PMPI_Finalize, as a finalize path
 * that no wrapper sees), --no-negative-count (no count -1 call: plain MPICH 4.0
 * aborts on it inside MPI_Allreduce, an assertion in its datatype code, instead of returning
 * MPI_ERR_COUNT; with the library preloaded the call never reaches MPICH). */
int main(int argc, char** argv) {
  int init_thread = 0, null_buffer = 0, pmpi_finalize = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--init-thread") == 0) {
      init_thread = 1;
    } else if (strcmp(argv[i], "--pmpi-finalize") == 0) {
      pmpi_finalize = 1;
    } else if (strcmp(argv[i], "--no-negative-count") == 0) {
      g_negative_count = 0;
    } else if (strcmp(argv[i], "--null-buffer") == 0) {
      null_buffer = 1;
    } else {
      fprintf(stderr, "pmpi_allreduce_c: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (init_thread) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);

  run_predefined(MPI_COMM_WORLD, "world");

  /* A second communicator: even and odd world ranks. */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, g_world_rank % 2, g_world_rank, &half);
  run_predefined(half, "half");
  MPI_Comm_free(&half);

  run_fallbacks(MPI_COMM_WORLD);
  run_errors(null_buffer);

  int failures = g_failures;
  int any = 0;
  /* PMPI, so the verdict does not depend on the library under test. */
  PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_world_rank == 0) {
    printf("pmpi_allreduce_c: %s (%d checks on rank 0)\n", any ? "FAILED" : "all checks passed",
           g_checks);
  }
  if (pmpi_finalize) {
    PMPI_Finalize(); /* past every finalize wrapper: the library's MPI_COMM_SELF hook reports */
  } else {
    MPI_Finalize();
  }
  return g_failures != 0 ? 1 : 0;
}
