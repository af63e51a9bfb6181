/* Straggler-aware auto (SKIPRING_AUTO_STRAGGLER, issue 16), through the C API under mpirun.
 *
 *   auto_straggler_test [--expect-switch | --expect-no-switch]
 *
 * 1. Without stragglers, per size (1 MiB .. 4 MiB of floats; below, the call is too short for
 *    the preference: select_algo_stragglers' min_cost_s): the algorithm auto runs
 *    (skipring_last_stats().algo, identical on every rank). The first size where it is neither
 *    the skip-ahead ring nor recursive doubling is the test size (exit 77 when auto already
 *    picks skip-ahead or rd at every size: nothing to switch on this machine).
 * 2. Rank 1 arrives 20 ms late (skipring_set_inject "at=arrive") at 24 all-reduces of that size
 *    (three agreement periods of 8 calls).
 * 3. Injection off, 4 more calls: with --expect-switch every rank must run "skipring", with
 *    --expect-no-switch (SKIPRING_AUTO_STRAGGLER=0) still the phase-1 algorithm.
 * Every result is checked exactly (sums of small integers in float), and every rank must have
 * run the same algorithm in every call. Exit 0 pass, 1 fail, 77 skip. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skipring/skipring.h"

static int g_rank = 0, g_size = 1, g_failed = 0;

static void fail(const char* what) {
  fprintf(stderr, "auto_straggler_test rank %d: FAIL: %s\n", g_rank, what);
  g_failed = 1;
}

/* One all-reduce of n floats; checks the result; returns the algorithm (same on all ranks). */
static void one_call(float* buf, int n, char algo[16]) {
  for (int i = 0; i < n; ++i) buf[i] = (float)(g_rank + 1 + (i % 7));
  if (skipring_allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
    fail("skipring_allreduce returned an error");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const float base = (float)g_size * (float)(g_size + 1) / 2.0f;
  for (int i = 0; i < n; ++i) {
    if (buf[i] != base + (float)(g_size * (i % 7))) {
      fail("wrong sum");
      break;
    }
  }
  skipring_stats_t st;
  skipring_last_stats(MPI_COMM_WORLD, &st);
  memcpy(algo, st.algo, 16);
  algo[15] = '\0';
  char* all = malloc((size_t)16 * (size_t)g_size);
  MPI_Allgather(algo, 16, MPI_CHAR, all, 16, MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < g_size; ++r) {
    if (strncmp(all + 16 * r, algo, 16) != 0) {
      fail("ranks ran different algorithms in one all-reduce");
      break;
    }
  }
  free(all);
}

int main(int argc, char** argv) {
  int expect_switch = 1;
  if (argc > 1 && strcmp(argv[1], "--expect-no-switch") == 0) expect_switch = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_size < 2) {
    if (g_rank == 0) fprintf(stderr, "auto_straggler_test: needs at least 2 ranks\n");
    MPI_Finalize();
    return 1;
  }
  const int max_n = (4 << 20) / 4;
  float* buf = malloc(sizeof(float) * (size_t)max_n);
  char algo[16], before[16] = "";
  int n = 0;
  for (int bytes = 1 << 20; bytes <= (4 << 20) && n == 0; bytes *= 2) {
    for (int k = 0; k < 3; ++k) one_call(buf, bytes / 4, algo);
    if (g_rank == 0) printf("auto_straggler_test: no straggler, %d bytes: %s\n", bytes, algo);
    if (strcmp(algo, "skipring") != 0 && strcmp(algo, "rd") != 0) {
      n = bytes / 4;
      memcpy(before, algo, 16);
    }
  }
  if (n == 0) {
    if (g_rank == 0) {
      printf(
          "SKIPPED: auto picks skip-ahead or recursive doubling at every size from 1 MiB "
          "to 4 MiB here: no choice to switch\n");
    }
    free(buf);
    MPI_Finalize();
    return 77;
  }
  if (skipring_set_inject("rank=1,delay=20ms,at=arrive") != MPI_SUCCESS) fail("set_inject");
  int late_algo_differs = 0;
  for (int k = 0; k < 24; ++k) {
    one_call(buf, n, algo);
    late_algo_differs |= strcmp(algo, before) != 0;
  }
  if (g_rank == 0) {
    printf("auto_straggler_test: rank 1 late at 24 calls of %d bytes: last ran %s\n", n * 4, algo);
  }
  if (skipring_set_inject("") != MPI_SUCCESS) fail("set_inject off");
  for (int k = 0; k < 4; ++k) {
    one_call(buf, n, algo);
    if (expect_switch && strcmp(algo, "skipring") != 0) {
      fail("late arrivals were injected but auto did not switch to skipring");
      break;
    }
    if (!expect_switch && strcmp(algo, before) != 0) {
      fail("SKIPRING_AUTO_STRAGGLER=0 but auto changed its choice");
      break;
    }
  }
  if (!expect_switch && late_algo_differs) fail("the choice changed while ranks were late");
  if (g_rank == 0) {
    printf("auto_straggler_test: after: %s (%s)\n", algo,
           expect_switch ? "expected skipring" : "expected unchanged");
  }
  int failed = 0;
  MPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  free(buf);
  MPI_Finalize();
  if (g_rank == 0) printf("auto_straggler_test: %s\n", failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}
