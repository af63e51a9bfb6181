/* osu_style_allreduce: an all-reduce latency benchmark in the style of the OSU
 * micro-benchmarks' osu_allreduce (written for skipring's tests; no OSU code). A plain MPI
 * program that does not link skipring: run it under LD_PRELOAD=libskipring_pmpi.so to
 * measure (and, with -c, validate) the drop-in.
 *
 *   osu_style_allreduce [-m MIN:MAX] [-i ITERS] [-x WARMUP] [-c]
 *
 * Sizes in bytes, doubling from MIN to MAX (default 4:1048576), MPI_FLOAT with MPI_SUM,
 * out of place on MPI_COMM_WORLD. Per size: WARMUP untimed calls, then ITERS timed calls (each
 * timed alone, a barrier after it); each rank's mean latency, then the average, minimum and
 * maximum of those over the ranks, as osu_allreduce -f prints them. -c: every call's result
 * is checked on the host against the exact sum (integer-valued floats); the output gets a
 * Validation column and the exit status is 1 when any element on any rank was wrong. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(const char* why) {
  fprintf(stderr,
          "osu_style_allreduce: %s\n"
          "usage: osu_style_allreduce [-m MIN:MAX] [-i ITERS] [-x WARMUP] [-c]\n",
          why);
}

/* A positive integer from text, or -1. */
static long parse_count(const char* text) {
  char* end = NULL;
  const long v = strtol(text, &end, 10);
  return (end != text && *end == '\0' && v > 0) ? v : -1;
}

/* Rank r's input element i and the exact sum over n ranks (small integers: exact in float). */
static float input_value(int rank, long i) { return (float)((rank + 1) * (int)(i % 7 + 1)); }
static float expected_sum(int nranks, long i) {
  return (float)((i % 7 + 1) * ((long)nranks * (nranks + 1) / 2));
}

int main(int argc, char** argv) {
  long min_bytes = 4, max_bytes = 1 << 20, iters = 100, warmup = 10;
  int validate = 0;
  int rank = 0, nranks = 1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  for (int a = 1; a < argc; ++a) {
    const char* arg = argv[a];
    const char* value = a + 1 < argc ? argv[a + 1] : NULL;
    int bad = 0;
    if (strcmp(arg, "-c") == 0) {
      validate = 1;
    } else if (strcmp(arg, "-m") == 0 && value) {
      char copy[64];
      snprintf(copy, sizeof copy, "%s", value);
      char* colon = strchr(copy, ':');
      if (colon) {
        *colon = '\0';
        min_bytes = parse_count(copy);
        max_bytes = parse_count(colon + 1);
      } else {
        max_bytes = parse_count(copy);
      }
      bad = min_bytes < 4 || max_bytes < min_bytes || max_bytes > (1L << 30);
      ++a;
    } else if (strcmp(arg, "-i") == 0 && value) {
      iters = parse_count(value);
      bad = iters < 1;
      ++a;
    } else if (strcmp(arg, "-x") == 0 && value) {
      warmup = strcmp(value, "0") == 0 ? 0 : parse_count(value);
      bad = warmup < 0;
      ++a;
    } else {
      bad = 1;
    }
    if (bad) {
      if (rank == 0) usage("bad or incomplete option");
      MPI_Finalize();
      return 2;
    }
  }

  const long max_count = max_bytes / (long)sizeof(float);
  float* send = malloc((size_t)max_count * sizeof(float));
  float* recv = malloc((size_t)max_count * sizeof(float));
  if (!send || !recv) {
    fprintf(stderr, "osu_style_allreduce: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (long i = 0; i < max_count; ++i) send[i] = input_value(rank, i);

  if (rank == 0) {
    printf("# OSU-style MPI_Allreduce latency test (skipring tests/release; float, MPI_SUM)\n");
    printf("# %d ranks, %ld warm-up + %ld timed iterations per size%s\n", nranks, warmup, iters,
           validate ? ", validation on" : "");
    printf("%-10s%18s%18s%18s%12s%s\n", "# Size", "Avg Latency(us)", "Min Latency(us)",
           "Max Latency(us)", "Iterations", validate ? "  Validation" : "");
    fflush(stdout);
  }

  long total_wrong = 0;
  for (long bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const int count = (int)(bytes / (long)sizeof(float));
    long wrong = 0;
    double timer = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long it = 0; it < warmup + iters; ++it) {
      if (validate) memset(recv, 0xff, (size_t)count * sizeof(float)); /* NaN poison */
      const double t0 = MPI_Wtime();
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double t1 = MPI_Wtime();
      if (it >= warmup) timer += t1 - t0;
      if (validate) {
        for (int i = 0; i < count; ++i) {
          if (recv[i] != expected_sum(nranks, i)) ++wrong;
        }
        for (int i = 0; i < count; ++i) {
          if (send[i] != input_value(rank, i)) ++wrong; /* the input must stay unchanged */
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    const double latency = timer * 1e6 / (double)iters;
    double min_lat = 0, max_lat = 0, sum_lat = 0;
    long wrong_all = 0;
    MPI_Reduce(&latency, &min_lat, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&latency, &max_lat, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&latency, &sum_lat, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    /* MPI_Reduce, not the all-reduce under test, brings the counts to rank 0 (its exit status). */
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    total_wrong += wrong_all;
    if (rank == 0) {
      printf("%-10ld%18.2f%18.2f%18.2f%12ld%s\n", bytes, sum_lat / nranks, min_lat, max_lat, iters,
             validate ? (wrong_all == 0 ? "        Pass" : "        FAIL") : "");
      fflush(stdout);
    }
  }
  if (rank == 0 && validate) {
    printf("# validation: %ld wrong elements over all sizes, iterations and ranks: %s\n",
           total_wrong, total_wrong == 0 ? "OK" : "FAILED");
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
