/* An unmodified MPI program that overlaps MPI_Iallreduce with computation (issue 40), run with
 * libskipring_pmpi.so preloaded. Checks, on every rank:
 *  - results of MPI_Iallreduce (int sum, out of place and in place, 8 B to 4 MiB) completed by
 *    MPI_Wait after computing, by an MPI_Test loop, by MPI_Waitall over two outstanding calls on
 *    one communicator, and with a blocking MPI_Allreduce started while one is pending (MPI's
 *    order: the blocking one completes after it); a size the MPI library's row takes with the
 *    progress thread busy on one rank and idle on the others;
 *  - --late-ms MS: rank 1 enters every call MS late; the other ranks' MPI_Iallreduce calls
 *    return at once (a late rank must not stall their computation; at most MS / 4 each).
 *  - --overlap: IMB-NBC's overlap measure at 1, 4 and 16 MiB (printed, not asserted: a machine
 *    with fewer cores than ranks x 2 threads cannot overlap): t_pure = MPI_Iallreduce + MPI_Wait,
 *    t_cpu = a computation meant to last t_pure, timed alone (fastest of 5, as IMB-NBC times it),
 * t_ovrl = MPI_Iallreduce + that computation + MPI_Wait; overlap = (t_pure + t_cpu - t_ovrl) /
 * min(t_pure, t_cpu).
 *  - --overlap-idle: the same with the computation replaced by a sleep as long: what a rank
 *    whose progress thread has a core of its own sees (this machine has 2 cores for 2 ranks).
 * Options: --single (MPI_Init_thread with MPI_THREAD_SINGLE: the calls go to PMPI_Iallreduce),
 * --late-ms MS, --overlap, --overlap-idle. Prints "N passed, M failed"; exits 1 on any failure. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank = 0, g_size = 1, g_failed = 0, g_passed = 0;

#define CHECK(cond, ...)                         \
  do {                                           \
    if (cond) {                                  \
      ++g_passed;                                \
    } else {                                     \
      ++g_failed;                                \
      fprintf(stderr, "rank %d FAIL: ", g_rank); \
      fprintf(stderr, __VA_ARGS__);              \
      fprintf(stderr, "\n");                     \
    }                                            \
  } while (0)

static volatile double g_sink = 0;
/* About `seconds` of arithmetic (no MPI call). */
static void compute(double seconds) {
  const double end = MPI_Wtime() + seconds;
  double x = 1.0;
  while (MPI_Wtime() < end) {
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  }
  g_sink += x;
}

/* `seconds` of sleep: a "computation" that leaves the core to the progress thread. */
static void idle(double seconds) {
  struct timespec ts;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int value(int rank, int i, int call) { return (rank + 1) * 3 + i % 17 + call; }
static int expected(int i, int call) {
  int s = 0;
  for (int r = 0; r < g_size; ++r) s += value(r, i, call);
  return s;
}

static int* fill(int count, int call) {
  int* v = malloc((size_t)(count > 0 ? count : 1) * sizeof(int));
  for (int i = 0; i < count; ++i) v[i] = value(g_rank, i, call);
  return v;
}

static int wrong(const int* out, int count, int call) {
  int bad = 0;
  for (int i = 0; i < count; ++i) bad += out[i] != expected(i, call);
  return bad;
}

static void basic(MPI_Comm comm) {
  const int counts[] = {2, 1024, 262144, 1048576}; /* 8 B .. 4 MiB */
  for (int k = 0; k < 4; ++k) {
    const int n = counts[k];
    for (int in_place = 0; in_place < 2; ++in_place) {
      const int call = k * 2 + in_place;
      int* in = fill(n, call);
      int* out = malloc((size_t)n * sizeof(int));
      MPI_Request req;
      int rc;
      if (in_place) {
        memcpy(out, in, (size_t)n * sizeof(int));
        rc = MPI_Iallreduce(MPI_IN_PLACE, out, n, MPI_INT, MPI_SUM, comm, &req);
      } else {
        rc = MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &req);
      }
      CHECK(rc == MPI_SUCCESS, "Iallreduce count %d: rc %d", n, rc);
      compute(0.002);
      MPI_Status st;
      rc = MPI_Wait(&req, &st);
      CHECK(rc == MPI_SUCCESS && req == MPI_REQUEST_NULL, "Wait count %d: rc %d", n, rc);
      CHECK(wrong(out, n, call) == 0, "count %d%s: %d wrong elements", n,
            in_place ? " in place" : "", wrong(out, n, call));
      free(in);
      free(out);
    }
  }
  /* MPI_Waitall over a nonblocking all-reduce, MPI_REQUEST_NULL and a point-to-point receive
   * whose sender (the partner rank) sends, blocking and large (rendezvous), before it starts
   * its own all-reduce: the drop-in's MPI_Waitall sleeps until skipring's progress thread has
   * run the all-reduce, which needs the partner, whose send needs this rank's receive to
   * progress meanwhile (it does: the progress thread's MPI calls progress every request). */
  {
    const int n = 262144, m = 262144; /* 1 MiB each */
    const int partner = g_rank ^ 1;
    int* in = fill(n, 40);
    int* out = malloc((size_t)n * sizeof(int));
    int* msg = malloc((size_t)m * sizeof(int));
    for (int i = 0; i < m; ++i) msg[i] = (partner < g_size && (g_rank & 1)) ? g_rank * 7 + i : 0;
    MPI_Request reqs[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (partner < g_size && (g_rank & 1)) {
      MPI_Send(msg, m, MPI_INT, partner, 77, comm);
      MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &reqs[0]);
      CHECK(MPI_Wait(&reqs[0], MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait after Send");
    } else {
      MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &reqs[0]);
      if (partner < g_size) MPI_Irecv(msg, m, MPI_INT, partner, 77, comm, &reqs[2]);
      MPI_Status sts[3];
      CHECK(MPI_Waitall(3, reqs, sts) == MPI_SUCCESS, "mixed Waitall");
      int bad = 0;
      for (int i = 0; partner < g_size && i < m; ++i) bad += msg[i] != partner * 7 + i;
      CHECK(bad == 0, "mixed Waitall: %d wrong elements received", bad);
    }
    CHECK(wrong(out, n, 40) == 0, "mixed Waitall: wrong all-reduce elements");
    free(in);
    free(out);
    free(msg);
  }
  /* An MPI_Test loop. */
  {
    const int n = 65536;
    int* in = fill(n, 20);
    int* out = malloc((size_t)n * sizeof(int));
    MPI_Request req;
    MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &req);
    int done = 0;
    long polls = 0;
    while (!done) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      ++polls;
    }
    CHECK(wrong(out, n, 20) == 0, "Test loop: wrong elements");
    free(in);
    free(out);
  }
  /* Two outstanding on one communicator, then a blocking one started while pending. */
  {
    const int n = 131072;
    int* a_in = fill(n, 30);
    int* b_in = fill(n, 31);
    int* c_in = fill(n, 32);
    int* a = malloc((size_t)n * sizeof(int));
    int* b = malloc((size_t)n * sizeof(int));
    int* c = malloc((size_t)n * sizeof(int));
    MPI_Request reqs[2];
    MPI_Iallreduce(a_in, a, n, MPI_INT, MPI_SUM, comm, &reqs[0]);
    MPI_Iallreduce(b_in, b, n, MPI_INT, MPI_SUM, comm, &reqs[1]);
    const int rc = MPI_Allreduce(c_in, c, n, MPI_INT, MPI_SUM, comm);
    CHECK(rc == MPI_SUCCESS, "blocking while pending: rc %d", rc);
    CHECK(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "Waitall");
    CHECK(wrong(a, n, 30) == 0 && wrong(b, n, 31) == 0 && wrong(c, n, 32) == 0,
          "two outstanding + blocking: wrong elements");
    free(a_in);
    free(b_in);
    free(c_in);
    free(a);
    free(b);
    free(c);
  }
  /* A size the MPI library's row takes (auto), with skipring's progress thread busy on rank 0
   * and idle on the others: rank 0 starts two at once, the others wait for the first and pause
   * before the second, which they then issue with their progress thread idle. Every rank must
   * issue the same MPI operation for the second call whichever thread does it (a busy progress
   * thread once ran the blocking PMPI_Allreduce of that row while an idle rank called
   * PMPI_Iallreduce, and both hung). */
  {
    const int n = 1024;
    int* a_in = fill(n, 50);
    int* b_in = fill(n, 51);
    int* a = malloc((size_t)n * sizeof(int));
    int* b = malloc((size_t)n * sizeof(int));
    for (int round = 0; round < 3; ++round) {
      MPI_Request reqs[2];
      MPI_Iallreduce(a_in, a, n, MPI_INT, MPI_SUM, comm, &reqs[0]);
      if (g_rank != 0) {
        MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
        idle(0.01);
      }
      MPI_Iallreduce(b_in, b, n, MPI_INT, MPI_SUM, comm, &reqs[1]);
      CHECK(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "busy/idle %d: Waitall",
            round);
      CHECK(wrong(a, n, 50) == 0 && wrong(b, n, 51) == 0, "busy/idle %d: wrong elements", round);
    }
    free(a_in);
    free(b_in);
    free(a);
    free(b);
  }
}

/* Rank 1 enters late; the others time their MPI_Iallreduce call itself. */
static void late(MPI_Comm comm, double late_s) {
  const int n = 262144; /* 1 MiB */
  int* in = fill(n, 40);
  int* out = malloc((size_t)n * sizeof(int));
  for (int it = 0; it < 4; ++it) {
    MPI_Barrier(comm);
    if (g_rank == 1) usleep((useconds_t)(late_s * 1e6));
    MPI_Request req;
    const double t0 = MPI_Wtime();
    MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &req);
    const double call = MPI_Wtime() - t0;
    compute(late_s / 2);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK(wrong(out, n, 40) == 0, "late %d: wrong elements", it);
    if (it > 0 && g_rank != 1) { /* the first call sets skipring up (collective) */
      CHECK(call < late_s / 4, "late %d: MPI_Iallreduce took %.3f ms with rank 1 %.0f ms late", it,
            call * 1e3, late_s * 1e3);
    }
  }
  free(in);
  free(out);
}

static void overlap(MPI_Comm comm, int sleep_instead) {
  const int sizes[] = {262144, 1048576, 4194304}; /* 1, 4, 16 MiB of int */
  for (int k = 0; k < 3; ++k) {
    const int n = sizes[k];
    int* in = fill(n, 50);
    int* out = malloc((size_t)n * sizeof(int));
    MPI_Request req;
    double pure = 1e30, cpu = 1e30, ovrl = 1e30;
    for (int it = 0; it < 5; ++it) {
      MPI_Barrier(comm);
      double t0 = MPI_Wtime();
      MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      const double t = MPI_Wtime() - t0;
      if (t < pure) pure = t;
    }
    /* t_cpu is timed, as IMB-NBC times its computation: a sleep of t_pure lasts longer (the
     * kernel's timer slack, ~50 us), which would otherwise be charged to the overlap. */
    for (int it = 0; it < 5; ++it) {
      MPI_Barrier(comm);
      const double t0 = MPI_Wtime();
      if (sleep_instead) {
        idle(pure);
      } else {
        compute(pure);
      }
      const double t = MPI_Wtime() - t0;
      if (t < cpu) cpu = t;
    }
    for (int it = 0; it < 5; ++it) {
      MPI_Barrier(comm);
      const double t0 = MPI_Wtime();
      MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, comm, &req);
      if (sleep_instead) {
        idle(pure);
      } else {
        compute(pure);
      }
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      const double t = MPI_Wtime() - t0;
      if (t < ovrl) ovrl = t;
    }
    CHECK(wrong(out, n, 50) == 0, "overlap %d: wrong elements", n);
    double mine[3] = {pure, ovrl, cpu}, all[3];
    MPI_Allreduce(mine, all, 3, MPI_DOUBLE, MPI_MAX, comm);
    const double t_cpu = all[2];
    double ov = (all[0] + t_cpu - all[1]) / (all[0] < t_cpu ? all[0] : t_cpu);
    if (ov < 0) ov = 0;
    if (ov > 1) ov = 1;
    if (g_rank == 0) {
      printf("overlap%s %d MiB: t_pure %.3f ms, t_cpu %.3f ms, t_ovrl %.3f ms, overlap %.0f %%\n",
             sleep_instead ? " (sleep)" : "", n * 4 >> 20, all[0] * 1e3, t_cpu * 1e3, all[1] * 1e3,
             ov * 100);
    }
    free(in);
    free(out);
  }
}

int main(int argc, char** argv) {
  int required = MPI_THREAD_MULTIPLE, want_overlap = 0, want_idle = 0;
  double late_ms = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--single") == 0) {
      required = MPI_THREAD_SINGLE;
    } else if (strcmp(argv[i], "--overlap") == 0) {
      want_overlap = 1;
    } else if (strcmp(argv[i], "--overlap-idle") == 0) {
      want_idle = 1;
    } else if (strcmp(argv[i], "--late-ms") == 0 && i + 1 < argc) {
      late_ms = atof(argv[++i]);
    } else {
      fprintf(stderr, "pmpi_iallreduce_c: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, required, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  basic(comm);
  if (late_ms > 0 && g_size > 1) late(comm, late_ms * 1e-3);
  if (want_overlap) overlap(comm, 0);
  if (want_idle) overlap(comm, 1);
  MPI_Comm_free(&comm);
  int totals[2] = {g_passed, g_failed}, sums[2];
  MPI_Allreduce(totals, sums, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) printf("%d passed, %d failed (thread level %d)\n", sums[0], sums[1], provided);
  MPI_Finalize();
  return sums[1] == 0 ? 0 : 1;
}
