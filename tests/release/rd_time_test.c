/* time_s covers the direct recursive-doubling path (issue 15): small all-reduces with
 * SKIPRING_ALGO=rd (skipring_set_algo) and nothing asking for per-step records run straight on
 * MPI (runtime/rd_direct.cpp), which used to report time_s = 0 in skipring_last_stats and add
 * nothing to the totals (hence time_s=0.000000 on the SKIPRING_REPORT line). Checks, on every
 * rank: the algorithm reported is "rd", the result is exact, the call's time_s is > 0 and not
 * absurd, and the totals' time_s grew by at least the sum of the calls' times. Exit 0 on
 * success, 1 with a message naming the rank and check otherwise. */
#include <mpi.h>
#include <skipring/skipring.h>
#include <stdio.h>
#include <string.h>

static int fail(int rank, const char* what, double value) {
  fprintf(stderr, "rd_time_test: rank %d: %s (%g)\n", rank, what, value);
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int bad = 0;
  if (skipring_init() != MPI_SUCCESS || skipring_set_algo("rd") != MPI_SUCCESS) {
    bad = fail(rank, "skipring_init / skipring_set_algo(\"rd\") failed", 0);
  }
  skipring_totals_t before, after;
  if (!bad && skipring_get_totals(&before) != MPI_SUCCESS) bad = fail(rank, "totals", 0);
  double sum_time = 0;
  const int calls = 200;
  for (int i = 0; i < calls && !bad; ++i) {
    /* 1 to 16 int64 elements: 8 to 128 bytes. */
    const int count = 1 + i % 16;
    long long in[16], out[16];
    for (int k = 0; k < count; ++k) in[k] = (long long)(rank + 1) * (k + i);
    if (skipring_allreduce(in, out, count, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
      bad = fail(rank, "skipring_allreduce failed", i);
      break;
    }
    for (int k = 0; k < count; ++k) {
      if (out[k] != (long long)(k + i) * nranks * (nranks + 1) / 2) {
        bad = fail(rank, "wrong sum at call", i);
        break;
      }
    }
    skipring_stats_t st;
    if (skipring_last_stats(MPI_COMM_WORLD, &st) != MPI_SUCCESS) {
      bad = fail(rank, "skipring_last_stats failed", i);
      break;
    }
    if (strcmp(st.algo, "rd") != 0) {
      fprintf(stderr, "rd_time_test: rank %d: call %d ran '%s', not rd\n", rank, i, st.algo);
      bad = 1;
      break;
    }
    if (!(st.time_s > 0) || st.time_s > 60) {
      bad = fail(rank, "time_s of a direct recursive-doubling call is not in (0, 60] s", st.time_s);
      break;
    }
    sum_time += st.time_s;
  }
  if (!bad && skipring_get_totals(&after) != MPI_SUCCESS) bad = fail(rank, "totals", 0);
  if (!bad) {
    if (after.calls - before.calls != (uint64_t)calls) {
      bad = fail(rank, "totals: calls did not grow by the number of calls",
                 (double)(after.calls - before.calls));
    }
    /* The totals add whole nanoseconds per call: at most 1 ns per call below the sum. */
    const double grown = after.time_s - before.time_s;
    if (!(grown > 0) || grown < sum_time - calls * 1e-9) {
      bad = fail(rank, "totals: time_s did not grow by the calls' time_s", grown);
    }
  }
  int any_bad = 0;
  PMPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("rd_time_test: %d ranks, %d direct recursive-doubling calls: %s\n", nranks, calls,
           any_bad ? "FAILED" : "time_s > 0 in the stats and the totals");
  }
  MPI_Finalize();
  return any_bad ? 1 : 0;
}
