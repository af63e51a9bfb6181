/* preload_latency: MPI_Allreduce against PMPI_Allreduce in the same run, for the PMPI drop-in's
 * latency table (issue 40; scripts/latency_table.py runs it). A plain MPI program: run it with
 * libskipring_pmpi.so preloaded and MPI_Allreduce is skipring's, while PMPI_Allreduce is always
 * the MPI library's own. Per size (float sum, out of place): warm-up calls of each, then ITERS
 * iterations, each timing one call of each after a barrier (the two alternate, and which goes
 * first alternates too, so both see the same machine); a call's time is the slowest rank's. With
 * -k K each timed iteration is K calls back to back, as an application's loop issues them, and a
 * call's time their mean. Prints one line per size: size_bytes p50_us(MPI_Allreduce)
 * p50_us(PMPI_Allreduce) ratio, then the same three by the interquartile mean, and checks the first
 * MPI_Allreduce result of every size (exits 1 on a wrong element). -t picks the datatype and op
 * instead of float SUM: c_double_complex (SUM) or double_int (MAXLOC), what scientific codes also
 * reduce (issue 40 item 3).
 *
 * usage: preload_latency [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-k K]
 *                        [-t float|c_double_complex|double_int] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  double v;
  int i;
} double_int_t;

/* Element e of `rank`'s input, for each type: small integers, exact in any order. */
static void fill(int type, void* buf, size_t count, int rank) {
  for (size_t e = 0; e < count; ++e) {
    if (type == 0) {
      ((float*)buf)[e] = (float)((e + (size_t)rank) % 7);
    } else if (type == 1) {
      ((double*)buf)[2 * e] = (double)((e + (size_t)rank) % 7);
      ((double*)buf)[2 * e + 1] = (double)((e + 2 * (size_t)rank) % 5);
    } else {
      ((double_int_t*)buf)[e].v = (double)((e + (size_t)rank) % 7);
      ((double_int_t*)buf)[e].i = rank;
    }
  }
}

/* Wrong elements of the reduction of every rank's fill() in `out`. */
static long count_wrong(int type, const void* out, size_t count, int size) {
  long wrong = 0;
  for (size_t e = 0; e < count; ++e) {
    if (type == 0) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += (float)((e + (size_t)r) % 7);
      wrong += ((const float*)out)[e] != want;
    } else if (type == 1) {
      double re = 0, im = 0;
      for (int r = 0; r < size; ++r) {
        re += (double)((e + (size_t)r) % 7);
        im += (double)((e + 2 * (size_t)r) % 5);
      }
      wrong += ((const double*)out)[2 * e] != re || ((const double*)out)[2 * e + 1] != im;
    } else {
      double best = -1;
      int at = -1;
      for (int r = 0; r < size; ++r) {
        const double v = (double)((e + (size_t)r) % 7);
        if (v > best) best = v, at = r; /* ties: the smaller rank, MAXLOC's rule */
      }
      wrong += ((const double_int_t*)out)[e].v != best || ((const double_int_t*)out)[e].i != at;
    }
  }
  return wrong;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The interquartile mean of v (sorted by median() before): the mean without the lowest and the
 * highest n / 4 values, which resolves differences below the clock's tick. */
static double iqm_sorted(const double* v, int n) {
  const int cut = n / 4;
  double sum = 0;
  for (int i = cut; i < n - cut; ++i) sum += v[i];
  return sum / (double)(n - 2 * cut);
}

int main(int argc, char** argv) {
  long min_b = 8, max_b = 64L << 20, factor = 4, iters = 60, warmup = 5, k_calls = 1;
  int type = 0; /* 0 float SUM, 1 C double complex SUM, 2 double-int MAXLOC */
  for (int i = 1; i + 1 < argc; i += 2) {
    const long v = atol(argv[i + 1]);
    if (strcmp(argv[i], "-t") == 0) {
      if (strcmp(argv[i + 1], "float") == 0) {
        type = 0;
      } else if (strcmp(argv[i + 1], "c_double_complex") == 0) {
        type = 1;
      } else if (strcmp(argv[i + 1], "double_int") == 0) {
        type = 2;
      } else {
        fprintf(stderr, "preload_latency: -t float, c_double_complex or double_int\n");
        return 2;
      }
    } else if (strcmp(argv[i], "-b") == 0)
      min_b = v;
    else if (strcmp(argv[i], "-e") == 0)
      max_b = v;
    else if (strcmp(argv[i], "-f") == 0)
      factor = v;
    else if (strcmp(argv[i], "-n") == 0)
      iters = v;
    else if (strcmp(argv[i], "-w") == 0)
      warmup = v;
    else if (strcmp(argv[i], "-k") == 0)
      k_calls = v;
    else {
      fprintf(stderr, "preload_latency: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (min_b < 4 || max_b < min_b || factor < 2 || iters < 1 || warmup < 0 || k_calls < 1) {
    fprintf(stderr, "preload_latency: bad arguments\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const MPI_Datatype dt = type == 0 ? MPI_FLOAT : type == 1 ? MPI_C_DOUBLE_COMPLEX : MPI_DOUBLE_INT;
  const MPI_Op op = type == 2 ? MPI_MAXLOC : MPI_SUM;
  const size_t elem = type == 0   ? sizeof(float)
                      : type == 1 ? 2 * sizeof(double)
                                  : sizeof(double_int_t);
  const size_t max_count = (size_t)max_b / elem;
  void* in = malloc(max_count * elem + 1);
  void* out = malloc(max_count * elem + 1);
  double* t_sr = malloc((size_t)iters * sizeof(double));
  double* t_mpi = malloc((size_t)iters * sizeof(double));
  if (!in || !out || !t_sr || !t_mpi) {
    fprintf(stderr, "preload_latency: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  /* Small integers: every sum is exact whatever the order. */
  fill(type, in, max_count, rank);
  long wrong = 0;
  if (rank == 0)
    printf(
        "# size_bytes p50_MPI_Allreduce_us p50_PMPI_Allreduce_us ratio iqm_MPI_Allreduce_us "
        "iqm_PMPI_Allreduce_us iqm_ratio (%d ranks)\n",
        size);
  for (long b = min_b; b <= max_b; b *= factor) {
    const int count = (int)(b / (long)elem);
    if (count < 1) continue;
    for (long w = 0; w < warmup; ++w) {
      MPI_Allreduce(in, out, count, dt, op, MPI_COMM_WORLD);
      PMPI_Allreduce(in, out, count, dt, op, MPI_COMM_WORLD);
    }
    for (long it = 0; it < iters; ++it) {
      double t[2];
      /* Which goes first alternates: the first call after a barrier meets the ranks' exit skew
       * of the barrier, the second one what the first left. */
      for (int k = 0; k < 2; ++k) {
        const int which = (int)((it + k) % 2); /* 0: MPI_Allreduce, 1: PMPI_Allreduce */
        PMPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (long c = 0; c < k_calls; ++c) {
          if (which == 0) {
            MPI_Allreduce(in, out, count, dt, op, MPI_COMM_WORLD);
          } else {
            PMPI_Allreduce(in, out, count, dt, op, MPI_COMM_WORLD);
          }
        }
        t[which] = (MPI_Wtime() - t0) / (double)k_calls;
        if (which == 0 && it == 0) wrong += count_wrong(type, out, (size_t)count, size);
      }
      double slowest[2];
      PMPI_Allreduce(t, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t_sr[it] = slowest[0];
      t_mpi[it] = slowest[1];
    }
    if (rank == 0) {
      const double a = median(t_sr, (int)iters) * 1e6, m = median(t_mpi, (int)iters) * 1e6;
      const double qa = iqm_sorted(t_sr, (int)iters) * 1e6,
                   qm = iqm_sorted(t_mpi, (int)iters) * 1e6;
      printf("%ld %.3f %.3f %.3f %.4f %.4f %.4f\n", b, a, m, a / m, qa, qm, qa / qm);
      fflush(stdout);
    }
  }
  long all_wrong = 0;
  PMPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("# wrong elements: %ld\n", all_wrong);
  free(in);
  free(out);
  free(t_sr);
  free(t_mpi);
  MPI_Finalize();
  return all_wrong == 0 ? 0 : 1;
}
