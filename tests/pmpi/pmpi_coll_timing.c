/* Times MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast and MPI_Reduce against their PMPI_
 * namesakes in the same run, size by size: with libskipring_pmpi.so preloaded MPI_X is the
 * drop-in (SKIPRING_AUTO_MPI=0: skipring's engine at every size; default: the drop-in's choice),
 * PMPI_X the MPI library's own. Rounds alternate the two; per round the time per call is the
 * slowest rank's; each row gives the median over the rounds. Used to find the size thresholds
 * of runtime/pmpi/pmpi_collectives.cpp (docs/benchmarks.md); not a test.
 *
 * usage: pmpi_coll_timing [--max-bytes N] [--rounds R] [--only NAME]
 * Output (rank 0): one line per collective and size:
 *   <collective> <bytes> <drop-in us> <pmpi us> <ratio drop-in/pmpi>
 * bytes: the whole vector (count x 8 for bcast and reduce, size x block for the others). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kRsb, kAllgather, kBcast, kReduce, kNumColl };
static const char* const kNames[kNumColl] = {"reduce_scatter_block", "allgather", "bcast",
                                             "reduce"};

static int g_size = 1;

/* One call of collective c over `count` doubles (the whole vector), through MPI_ or PMPI_. */
static void call(int c, int pmpi, double* send, double* recv, int count) {
  const int block = count / g_size;
  switch (c) {
    case kRsb:
      if (pmpi) {
        PMPI_Reduce_scatter_block(send, recv, block, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      } else {
        MPI_Reduce_scatter_block(send, recv, block, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      }
      break;
    case kAllgather:
      if (pmpi) {
        PMPI_Allgather(send, block, MPI_DOUBLE, recv, block, MPI_DOUBLE, MPI_COMM_WORLD);
      } else {
        MPI_Allgather(send, block, MPI_DOUBLE, recv, block, MPI_DOUBLE, MPI_COMM_WORLD);
      }
      break;
    case kBcast:
      if (pmpi) {
        PMPI_Bcast(send, count, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      } else {
        MPI_Bcast(send, count, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      }
      break;
    default:
      if (pmpi) {
        PMPI_Reduce(send, recv, count, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      } else {
        MPI_Reduce(send, recv, count, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      }
      break;
  }
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Seconds per call of `iters` calls, the slowest rank's. */
static double timed(int c, int pmpi, double* send, double* recv, int count, int iters) {
  PMPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) call(c, pmpi, send, recv, count);
  double t = (MPI_Wtime() - t0) / iters, tmax = 0;
  PMPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return tmax;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  long max_bytes = 8L << 20;
  int rounds = 7;
  const char* only = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--max-bytes") == 0) max_bytes = atol(argv[i + 1]);
    if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  if (rounds < 1 || rounds > 99) rounds = 7;
  const long max_count = max_bytes / 8 + g_size;
  double* send = malloc(sizeof(double) * (size_t)max_count);
  double* recv = malloc(sizeof(double) * (size_t)max_count);
  for (long i = 0; i < max_count; ++i) send[i] = recv[i] = (double)(i % 17);
  double drop[99], pmpi[99];
  for (int c = 0; c < kNumColl; ++c) {
    if (only != NULL && strcmp(only, kNames[c]) != 0) continue;
    for (long bytes = 8L * g_size; bytes <= max_bytes; bytes *= 4) {
      const int count = (int)(bytes / 8 / g_size) * g_size;
      const long real_bytes = 8L * count;
      int iters = (int)((4L << 20) / (real_bytes + 4096));
      if (iters < 3) iters = 3;
      if (iters > 200) iters = 200;
      timed(c, 0, send, recv, count, 2); /* warm-up (and skipring's setup) */
      timed(c, 1, send, recv, count, 2);
      for (int r = 0; r < rounds; ++r) {
        if (r % 2 == 0) {
          drop[r] = timed(c, 0, send, recv, count, iters);
          pmpi[r] = timed(c, 1, send, recv, count, iters);
        } else {
          pmpi[r] = timed(c, 1, send, recv, count, iters);
          drop[r] = timed(c, 0, send, recv, count, iters);
        }
      }
      qsort(drop, (size_t)rounds, sizeof(double), cmp_double);
      qsort(pmpi, (size_t)rounds, sizeof(double), cmp_double);
      const double d = drop[rounds / 2], p = pmpi[rounds / 2];
      if (rank == 0) {
        printf("%s %ld %.2f %.2f %.3f\n", kNames[c], real_bytes, d * 1e6, p * 1e6, d / p);
        fflush(stdout);
      }
    }
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
