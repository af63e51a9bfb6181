/* A plain C MPI program that exercises MPI_Reduce_scatter_block, MPI_Reduce_scatter,
 * MPI_Allgather, MPI_Bcast and MPI_Reduce and checks every result bitwise against a reference
 * computed here on the host (not with MPI: Open MPI's op/avx is wrong on 8-bit SUM). Run by
 * ctest with libskipring_pmpi.so preloaded (and without it). Covers MPI_INT, MPI_FLOAT and
 * MPI_DOUBLE, MPI_SUM and MPI_MAX, several roots, MPI_IN_PLACE where MPI allows it, counts from
 * 0 to above a few MiB, equal and unequal reduce-scatter counts, a split communicator.
 *
 * Options:
 *   --routing auto|all|none  with the preload: check, call by call, where each call ran, from
 *                            the change of skipring_get_totals' `calls` (found with dlsym):
 *                            auto: the drop-in's default thresholds: a reduce-scatter of
 *                            <= 16 KiB goes to the MPI library, one of >= 2 MiB to skipring
 *                            (the threshold, 128 KiB, lies between); MPI_Allgather, MPI_Bcast
 *                            and MPI_Reduce always go to the MPI library (faster on one host);
 *                            all: every non-empty call goes to skipring
 *                            (SKIPRING_AUTO_MPI=0); none: no call does (SKIPRING_ENABLE=0).
 *                            Unequal MPI_Reduce_scatter counts never go to skipring.
 *   --inplace-reduce-root0   in-place MPI_Reduce only at root 0 (MPICH 4.0's own MPI_Reduce
 *                            crashes with MPI_IN_PLACE at a non-zero root from about 1000
 *                            elements; the drop-in hands MPI_Reduce to it by default)
 *   --errors                 erroneous calls (bad root, aliasing, MPI_IN_PLACE misuse, a negative
 *                            count) must return their MPI error class under MPI_ERRORS_RETURN
 *                            (the drop-in's checks; plain MPIs differ and may abort)
 * Exits non-zero on any failure. */
#include <dlfcn.h>
#include <mpi.h>
#include <skipring/skipring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures = 0;
static int g_checks = 0;
static int g_world_rank = 0;
static int g_inplace_root0 = 0;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    ++g_checks;                                                                                \
    if (!(cond)) {                                                                             \
      if (g_failures < 20) {                                                                   \
        fprintf(stderr, "pmpi_collectives_c: rank %d: FAILED %s:%d: ", g_world_rank, __FILE__, \
                __LINE__);                                                                     \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, "\n");                                                                 \
      }                                                                                        \
      ++g_failures;                                                                            \
    }                                                                                          \
  } while (0)

/* --- types and values ---------------------------------------------------------------------- */

typedef enum { kInt, kFloat, kDouble, kNumTypes } TypeKind;
static const char* const kTypeNames[kNumTypes] = {"int", "float", "double"};

static MPI_Datatype mpi_type(TypeKind t) {
  return t == kInt ? MPI_INT : t == kFloat ? MPI_FLOAT : MPI_DOUBLE;
}
static size_t type_size(TypeKind t) {
  return t == kInt ? sizeof(int) : t == kFloat ? sizeof(float) : sizeof(double);
}

/* Rank r's element i: a small integer k, stored as k (int) or k / 4 (float, double): every sum
 * and max over a few ranks is exact, so the result is bitwise the host reference in any order. */
static long value(int r, long i, int salt) { return (r * 7 + i * 3 + salt) % 11 - 3; }

static void store(TypeKind t, void* buf, long i, long k) {
  if (t == kInt) {
    ((int*)buf)[i] = (int)k;
  } else if (t == kFloat) {
    ((float*)buf)[i] = (float)((double)k / 4.0);
  } else {
    ((double*)buf)[i] = (double)k / 4.0;
  }
}

typedef enum { kSum, kMax } OpKind;
static MPI_Op mpi_op(OpKind o) { return o == kSum ? MPI_SUM : MPI_MAX; }

/* The reduction of value(r, i, salt) over ranks 0..size-1. */
static long reduced(OpKind o, int size, long i, int salt) {
  long acc = value(0, i, salt);
  for (int r = 1; r < size; ++r) {
    const long v = value(r, i, salt);
    acc = o == kSum ? acc + v : (v > acc ? v : acc);
  }
  return acc;
}

/* True when element i of buf is bitwise `k` stored as type t. */
static int element_is(TypeKind t, const void* buf, long i, long k) {
  unsigned char want[8];
  store(t, want, 0, k);
  return memcmp((const unsigned char*)buf + (size_t)i * type_size(t), want, type_size(t)) == 0;
}

static void* alloc(size_t bytes) {
  void* p = malloc(bytes > 0 ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "pmpi_collectives_c: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(p, 0x5a, bytes > 0 ? bytes : 1);
  return p;
}

/* --- where each call ran ---------------------------------------------------------------------- */

typedef enum { kRoutingOff, kRoutingAuto, kRoutingAll, kRoutingNone } Routing;
static Routing g_routing = kRoutingOff;
static int (*g_get_totals)(skipring_totals_t*) = NULL;

static uint64_t skipring_calls(void) {
  skipring_totals_t t;
  memset(&t, 0, sizeof(t));
  if (g_get_totals != NULL) g_get_totals(&t);
  return t.calls;
}

enum { kSmallBytes = 16 * 1024, kLargeBytes = 2 * 1024 * 1024 };

/* Checks that the call that moved `bytes` (the whole vector) and changed skipring's call count
 * from `before` ran where the routing mode says; `possible`: skipring has a path for it;
 * `by_size`: the default thresholds may give it to skipring (a reduce-scatter). */
static void check_route(const char* what, size_t bytes, uint64_t before, int possible,
                        int by_size) {
  if (g_routing == kRoutingOff) return;
  const uint64_t ran = skipring_calls() - before;
  int want;
  if (!possible || g_routing == kRoutingNone || bytes == 0) {
    want = bytes == 0 && g_routing == kRoutingAll ? -1 : 0;
  } else if (g_routing == kRoutingAll) {
    want = 1;
  } else if (!by_size || bytes <= kSmallBytes) {
    want = 0;
  } else if (bytes >= kLargeBytes) {
    want = 1;
  } else {
    want = -1; /* between the thresholds' bounds: either */
  }
  if (want >= 0) {
    CHECK(ran == (uint64_t)want, "%s (%zu bytes): %s (skipring calls +%llu)", what, bytes,
          want ? "expected to run on skipring" : "expected to run on the MPI library",
          (unsigned long long)ran);
  }
}

/* --- the collectives ------------------------------------------------------------------------ */

static void test_reduce_scatter_block(MPI_Comm comm, TypeKind t, OpKind o, long block, int in_place,
                                      int salt) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const size_t es = type_size(t);
  const long total = block * size;
  void* send = alloc((size_t)total * es);
  void* recv = alloc((size_t)(in_place ? total : block) * es);
  void* in = in_place ? recv : send;
  for (long i = 0; i < total; ++i) store(t, in, i, value(rank, i, salt));
  const uint64_t before = skipring_calls();
  const int rc = MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, (int)block,
                                          mpi_type(t), mpi_op(o), comm);
  char what[96];
  snprintf(what, sizeof(what), "MPI_Reduce_scatter_block %s %s block=%ld in_place=%d",
           kTypeNames[t], o == kSum ? "SUM" : "MAX", block, in_place);
  check_route(what, (size_t)total * es, before, 1, 1);
  CHECK(rc == MPI_SUCCESS, "%s: rc %d", what, rc);
  long bad = 0;
  for (long j = 0; j < block; ++j) {
    bad += !element_is(t, recv, j, reduced(o, size, rank * block + j, salt));
  }
  CHECK(bad == 0, "%s: %ld wrong elements", what, bad);
  free(send);
  free(recv);
}

static void test_reduce_scatter(MPI_Comm comm, TypeKind t, OpKind o, long base, int unequal,
                                int in_place, int salt) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const size_t es = type_size(t);
  int* counts = malloc(sizeof(int) * (size_t)size);
  long total = 0, mine = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = (int)(unequal ? base + 3 * r : base);
    if (r < rank) mine += counts[r];
    total += counts[r];
  }
  void* send = alloc((size_t)total * es);
  void* recv = alloc((size_t)(in_place ? total : counts[rank]) * es);
  void* in = in_place ? recv : send;
  for (long i = 0; i < total; ++i) store(t, in, i, value(rank, i, salt));
  const uint64_t before = skipring_calls();
  const int rc = MPI_Reduce_scatter(in_place ? MPI_IN_PLACE : send, recv, counts, mpi_type(t),
                                    mpi_op(o), comm);
  char what[112];
  snprintf(what, sizeof(what), "MPI_Reduce_scatter %s %s base=%ld unequal=%d in_place=%d",
           kTypeNames[t], o == kSum ? "SUM" : "MAX", base, unequal, in_place);
  check_route(what, (size_t)total * es, before, !unequal, 1);
  CHECK(rc == MPI_SUCCESS, "%s: rc %d", what, rc);
  long bad = 0;
  for (long j = 0; j < counts[rank]; ++j) {
    bad += !element_is(t, recv, j, reduced(o, size, mine + j, salt));
  }
  CHECK(bad == 0, "%s: %ld wrong elements", what, bad);
  free(counts);
  free(send);
  free(recv);
}

static void test_allgather(MPI_Comm comm, TypeKind t, long block, int in_place, int salt) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const size_t es = type_size(t);
  const long total = block * size;
  void* send = alloc((size_t)block * es);
  void* recv = alloc((size_t)total * es);
  if (in_place) {
    for (long j = 0; j < block; ++j) store(t, recv, rank * block + j, value(rank, j, salt));
  } else {
    for (long j = 0; j < block; ++j) store(t, send, j, value(rank, j, salt));
  }
  const uint64_t before = skipring_calls();
  const int rc =
      in_place
          ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)block, mpi_type(t), comm)
          : MPI_Allgather(send, (int)block, mpi_type(t), recv, (int)block, mpi_type(t), comm);
  char what[96];
  snprintf(what, sizeof(what), "MPI_Allgather %s block=%ld in_place=%d", kTypeNames[t], block,
           in_place);
  check_route(what, (size_t)total * es, before, 1, 0);
  CHECK(rc == MPI_SUCCESS, "%s: rc %d", what, rc);
  long bad = 0;
  for (int r = 0; r < size; ++r) {
    for (long j = 0; j < block; ++j) bad += !element_is(t, recv, r * block + j, value(r, j, salt));
  }
  CHECK(bad == 0, "%s: %ld wrong elements", what, bad);
  free(send);
  free(recv);
}

static void test_bcast(MPI_Comm comm, TypeKind t, long count, int root, int salt) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  void* buf = alloc((size_t)count * type_size(t));
  if (rank == root) {
    for (long i = 0; i < count; ++i) store(t, buf, i, value(root, i, salt));
  }
  const uint64_t before = skipring_calls();
  const int rc = MPI_Bcast(buf, (int)count, mpi_type(t), root, comm);
  char what[96];
  snprintf(what, sizeof(what), "MPI_Bcast %s count=%ld root=%d", kTypeNames[t], count, root);
  check_route(what, (size_t)count * type_size(t), before, 1, 0);
  CHECK(rc == MPI_SUCCESS, "%s: rc %d", what, rc);
  long bad = 0;
  for (long i = 0; i < count; ++i) bad += !element_is(t, buf, i, value(root, i, salt));
  CHECK(bad == 0, "%s: %ld wrong elements", what, bad);
  free(buf);
}

/* null_recv: non-roots pass NULL as recvbuf (not significant there). */
static void test_reduce(MPI_Comm comm, TypeKind t, OpKind o, long count, int root, int in_place,
                        int null_recv, int salt) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const size_t es = type_size(t);
  void* send = alloc((size_t)count * es);
  void* recv = alloc((size_t)count * es);
  const int root_in_place = in_place && rank == root;
  void* in = root_in_place ? recv : send;
  for (long i = 0; i < count; ++i) store(t, in, i, value(rank, i, salt));
  const uint64_t before = skipring_calls();
  const int rc =
      MPI_Reduce(root_in_place ? MPI_IN_PLACE : send, rank != root && null_recv ? NULL : recv,
                 (int)count, mpi_type(t), mpi_op(o), root, comm);
  char what[112];
  snprintf(what, sizeof(what), "MPI_Reduce %s %s count=%ld root=%d in_place=%d", kTypeNames[t],
           o == kSum ? "SUM" : "MAX", count, root, in_place);
  check_route(what, (size_t)count * es, before, 1, 0);
  CHECK(rc == MPI_SUCCESS, "%s: rc %d", what, rc);
  if (rank == root) {
    long bad = 0;
    for (long i = 0; i < count; ++i) bad += !element_is(t, recv, i, reduced(o, size, i, salt));
    CHECK(bad == 0, "%s: %ld wrong elements", what, bad);
  }
  free(send);
  free(recv);
}

/* Every collective over `comm` at small, medium and large sizes. */
static void run_all(MPI_Comm comm) {
  int size;
  MPI_Comm_size(comm, &size);
  /* Per-rank block counts: 0, 1, 7, 1000 (below the thresholds), and about 3 MiB of doubles in
   * all (above them for every type: at least 2 MiB with 4-byte types). */
  const long large = (3L << 20) / 8 / size + 5;
  const long blocks[] = {0, 1, 7, 1000, large};
  const int nblocks = (int)(sizeof(blocks) / sizeof(blocks[0]));
  int salt = 0;
  for (int t = 0; t < kNumTypes; ++t) {
    for (int b = 0; b < nblocks; ++b) {
      const long block = blocks[b];
      const long vec = block * size; /* bcast / reduce: the whole vector */
      for (int o = 0; o < 2; ++o) {
        for (int ip = 0; ip < 2; ++ip) {
          test_reduce_scatter_block(comm, (TypeKind)t, (OpKind)o, block, ip, ++salt);
          test_reduce_scatter(comm, (TypeKind)t, (OpKind)o, block, 0, ip, ++salt);
          const int root = ip && g_inplace_root0 ? 0 : (b + o) % size;
          test_reduce(comm, (TypeKind)t, (OpKind)o, vec, root, ip, 0, ++salt);
        }
        test_reduce(comm, (TypeKind)t, (OpKind)o, vec, size - 1, 0, 1, ++salt);
      }
      test_reduce_scatter(comm, (TypeKind)t, kSum, block, 1, b % 2, ++salt);
      for (int ip = 0; ip < 2; ++ip) test_allgather(comm, (TypeKind)t, block, ip, ++salt);
      test_bcast(comm, (TypeKind)t, vec, 0, ++salt);
      test_bcast(comm, (TypeKind)t, vec, size - 1, ++salt);
      if (size > 2) test_bcast(comm, (TypeKind)t, vec + 1, 1, ++salt);
    }
  }
}

/* --- errors -------------------------------------------------------------------------------- */

static int error_class(int rc) {
  int cls = rc;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  return cls;
}

static void test_errors(void) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int size;
  MPI_Comm_size(comm, &size);
  double* a = alloc(sizeof(double) * 64 * (size_t)size);
  int rc;
  rc = MPI_Bcast(a, 4, MPI_DOUBLE, size, comm);
  CHECK(error_class(rc) == MPI_ERR_ROOT, "MPI_Bcast root=size: class %d", error_class(rc));
  rc = MPI_Bcast(a, 4, MPI_DOUBLE, -1, comm);
  CHECK(error_class(rc) == MPI_ERR_ROOT, "MPI_Bcast root=-1: class %d", error_class(rc));
  rc = MPI_Bcast(MPI_IN_PLACE, 4, MPI_DOUBLE, 0, comm);
  CHECK(error_class(rc) == MPI_ERR_ARG, "MPI_Bcast MPI_IN_PLACE: class %d", error_class(rc));
  rc = MPI_Bcast(a, -1, MPI_DOUBLE, 0, comm);
  CHECK(error_class(rc) == MPI_ERR_COUNT, "MPI_Bcast count=-1: class %d", error_class(rc));
  rc = MPI_Reduce(a, a + 64, 4, MPI_DOUBLE, MPI_SUM, size + 3, comm);
  CHECK(error_class(rc) == MPI_ERR_ROOT, "MPI_Reduce root=size+3: class %d", error_class(rc));
  {
    /* Aliased buffers are erroneous at the root only (a non-root's recvbuf is not significant,
     * so the others would enter the collective): on a communicator of one rank. */
    MPI_Comm self;
    MPI_Comm_dup(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN);
    rc = MPI_Reduce(a, a, 4, MPI_DOUBLE, MPI_SUM, 0, self);
    CHECK(error_class(rc) == MPI_ERR_ARG, "MPI_Reduce aliased at the root: class %d",
          error_class(rc));
    rc = MPI_Reduce(a, MPI_IN_PLACE, 4, MPI_DOUBLE, MPI_SUM, 0, self);
    CHECK(error_class(rc) == MPI_ERR_ARG, "MPI_Reduce recvbuf MPI_IN_PLACE at the root: class %d",
          error_class(rc));
    MPI_Comm_free(&self);
  }
  rc = MPI_Reduce(a, a + 64, 4, MPI_DOUBLE, MPI_OP_NULL, 0, comm);
  CHECK(error_class(rc) == MPI_ERR_OP, "MPI_Reduce MPI_OP_NULL: class %d", error_class(rc));
  rc = MPI_Reduce_scatter_block(a, a, 4, MPI_DOUBLE, MPI_SUM, comm);
  CHECK(error_class(rc) == MPI_ERR_BUFFER, "MPI_Reduce_scatter_block aliased: class %d",
        error_class(rc));
  rc = MPI_Reduce_scatter_block(a, a + 1, 4, MPI_DOUBLE, MPI_SUM, comm);
  CHECK(error_class(rc) == MPI_ERR_BUFFER, "MPI_Reduce_scatter_block overlapping: class %d",
        error_class(rc));
  rc = MPI_Allgather(a + 1, 2, MPI_DOUBLE, a, 2, MPI_DOUBLE, comm);
  CHECK(error_class(rc) == MPI_ERR_BUFFER, "MPI_Allgather overlapping: class %d", error_class(rc));
  rc = MPI_Reduce_scatter_block(a, MPI_IN_PLACE, 4, MPI_DOUBLE, MPI_SUM, comm);
  CHECK(error_class(rc) == MPI_ERR_ARG, "MPI_Reduce_scatter_block recvbuf MPI_IN_PLACE: class %d",
        error_class(rc));
  rc = MPI_Reduce_scatter_block(a, a + 64, -2, MPI_DOUBLE, MPI_SUM, comm);
  CHECK(error_class(rc) == MPI_ERR_COUNT, "MPI_Reduce_scatter_block count=-2: class %d",
        error_class(rc));
  int* counts = malloc(sizeof(int) * (size_t)size);
  for (int r = 0; r < size; ++r) counts[r] = 2;
  rc = MPI_Reduce_scatter(a, a, counts, MPI_DOUBLE, MPI_SUM, comm);
  CHECK(error_class(rc) == MPI_ERR_BUFFER, "MPI_Reduce_scatter aliased: class %d", error_class(rc));
  counts[size - 1] = -1;
  rc = MPI_Reduce_scatter(a, a + 64, counts, MPI_DOUBLE, MPI_SUM, comm);
  CHECK(error_class(rc) == MPI_ERR_COUNT, "MPI_Reduce_scatter negative count: class %d",
        error_class(rc));
  free(counts);
  rc = MPI_Allgather(a, 2, MPI_DOUBLE, a, 2, MPI_DOUBLE, comm);
  CHECK(error_class(rc) == MPI_ERR_BUFFER, "MPI_Allgather aliased: class %d", error_class(rc));
  rc = MPI_Allgather(a, 2, MPI_DOUBLE, MPI_IN_PLACE, 2, MPI_DOUBLE, comm);
  CHECK(error_class(rc) == MPI_ERR_ARG, "MPI_Allgather recvbuf MPI_IN_PLACE: class %d",
        error_class(rc));
  rc = MPI_Allgather(a, 2, MPI_DATATYPE_NULL, a + 64, 2, MPI_DOUBLE, comm);
  CHECK(error_class(rc) == MPI_ERR_TYPE, "MPI_Allgather sendtype null: class %d", error_class(rc));
  /* The communicator still works after the errors. */
  for (int i = 0; i < 4; ++i) a[i] = 1.0;
  rc = MPI_Bcast(a, 4, MPI_DOUBLE, 0, comm);
  CHECK(rc == MPI_SUCCESS && a[3] == 1.0, "MPI_Bcast after the errors: rc %d", rc);
  free(a);
  MPI_Comm_free(&comm);
}

int main(int argc, char** argv) {
  int errors = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--errors") == 0) {
      errors = 1;
    } else if (strcmp(argv[i], "--inplace-reduce-root0") == 0) {
      g_inplace_root0 = 1;
    } else if (strcmp(argv[i], "--routing") == 0 && i + 1 < argc) {
      const char* m = argv[++i];
      g_routing = strcmp(m, "auto") == 0  ? kRoutingAuto
                  : strcmp(m, "all") == 0 ? kRoutingAll
                                          : kRoutingNone;
    } else {
      fprintf(stderr, "pmpi_collectives_c: unknown argument '%s'\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (g_routing != kRoutingOff) {
    *(void**)&g_get_totals = dlsym(RTLD_DEFAULT, "skipring_get_totals");
    if (g_get_totals == NULL) {
      fprintf(stderr, "pmpi_collectives_c: --routing needs libskipring_pmpi.so preloaded\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  run_all(MPI_COMM_WORLD);
  /* A split communicator: even and odd world ranks (routing is checked there too). */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, g_world_rank % 2, g_world_rank, &half);
  int half_size;
  MPI_Comm_size(half, &half_size);
  test_bcast(half, kDouble, (3L << 20) / 8, half_size - 1, 1001);
  test_reduce(half, kFloat, kSum, (3L << 20) / 4, 0, 1, 0, 1002);
  test_allgather(half, kInt, 100, 0, 1003);
  MPI_Comm_free(&half);
  if (errors) test_errors();
  int total = 0;
  MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_world_rank == 0) {
    printf("pmpi_collectives_c: %d checks on rank 0, %d failures on all ranks\n", g_checks, total);
  }
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
