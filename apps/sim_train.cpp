// skipring_sim_train: a data-parallel training loop under SimGrid SMPI (issue 38 item 3; built
// only with SKIPRING_SIMGRID=ON, run with scripts/sim_run.sh; scripts/sim_train.py drives it).
// Every time here is simulated time (MPI_Wtime under SMPI).
//
// A step, on every rank: the backward pass produces the gradient buckets one after another
// (--compute-us of simulated compute, split evenly before each bucket); before its first bucket
// a rank is late by a time drawn from --scenario; each bucket is all-reduced (float sum,
// blocking, in bucket order: a Horovod-style loop without overlap). Scenarios, every draw from a
// generator seeded by (--seed, step, rank), so each mode sees the same lateness:
//   none   no lateness
//   exp    every rank late by an exponential time of mean --late-us
//   pareto every rank late by a Pareto time (shape 1.5, scale --late-us / 3: mean --late-us),
//          capped at 20 x --late-us (heavy-tailed)
//   slow   rank 1 late by --late-us at every step (one persistently slow rank)
// Mode skip = skipring's ring with skip-ahead (the late path across hosts), ring = the plain
// ring (SKIPRING_SKIP=0's), mpi = SimGrid's MPI_Allreduce (its algorithm chosen by SIM_CFG, e.g.
// --cfg=smpi/coll-selector:ompi). One mode per run.
//
// Rank 0 prints one CSV line: n, model_bytes, buckets, scenario, mode, steps, step_us (mean over
// the measured steps of the simulated time per step, every rank's last bucket included),
// compute_us, late_us (mean over the steps of the largest lateness of the step: the time no
// all-reduce can take back), comm_us (step_us - compute_us - late_us: what the all-reduces cost
// after the last rank came), exact (the last step's result bitwise the same on every rank and
// within rounding of a double reference at sampled elements).
// Exit status: 0; 1 bad arguments or init error; 2 a result was wrong.
#include <fmt/core.h>
#include <mpi.h>
#include <time.h>

#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "apps/bench_util.h"
#include "apps/sim_util.h"
#include "common/hash.h"
#include "skipring/skipring.h"

#ifndef SKIPRING_SIMGRID
#error "skipring_sim_train is a SimGrid SMPI driver: build it with scripts/sim_build.sh"
#endif

namespace {

struct Options {
  uint64_t params = 25557032;       // parameters (float32): ResNet-50's
  std::string bucket_text = "25M";  // bytes per bucket
  std::string scenario = "exp";
  std::string mode = "skip";
  double compute_us = 100000;
  double late_us = 5000;
  int steps = 10;
  int warmup = 2;
  uint64_t seed = 1;
  bool header = true;
};

// The lateness of `rank` at `step`, in seconds (the same in every mode).
double lateness(const Options& o, int step, int rank) {
  const double mean = o.late_us * 1e-6;
  std::mt19937_64 gen(o.seed * 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(step) << 20) ^
                      static_cast<uint64_t>(rank));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (o.scenario == "exp") return -mean * std::log(1.0 - u(gen));
  if (o.scenario == "pareto") {
    const double shape = 1.5, scale = mean * (shape - 1) / shape;
    return std::min(20 * mean, scale / std::pow(1.0 - u(gen), 1.0 / shape));
  }
  if (o.scenario == "slow") return rank == 1 ? mean : 0.0;
  return 0.0;
}

// A rank's gradient in bucket `b` at `step`: pseudo-random in [-1, 1) (float sums then depend
// on the order of reduction, which is what the bitwise check across ranks is for).
float grad(int rank, int step, int b, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 48) ^ (static_cast<uint64_t>(step) << 36) ^
               (static_cast<uint64_t>(b) << 30) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<float>(static_cast<double>(x >> 11) * 0x1.0p-52 - 1.0);
}

int parse(int argc, char** argv, Options* o, int rank) {
  CLI::App app{"skipring_sim_train: a data-parallel training loop under SimGrid"};
  app.add_option("--params", o->params, "model parameters (float32; default ResNet-50's)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34))
      ->capture_default_str();
  app.add_option("--bucket", o->bucket_text, "bytes per gradient bucket, K/M/G suffix")
      ->capture_default_str();
  app.add_option("--scenario", o->scenario, "lateness: none | exp | pareto | slow")
      ->check(CLI::IsMember({"none", "exp", "pareto", "slow"}))
      ->capture_default_str();
  app.add_option("--mode", o->mode, "skip | ring | mpi")
      ->check(CLI::IsMember({"skip", "ring", "mpi"}))
      ->capture_default_str();
  app.add_option("--compute-us", o->compute_us, "simulated compute per step, microseconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--late-us", o->late_us, "the scenario's lateness scale, microseconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--steps", o->steps, "measured steps")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", o->warmup, "warm-up steps (no lateness)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--seed", o->seed, "seed of the lateness draws")->capture_default_str();
  app.add_flag("!--no-header", o->header, "omit the CSV header");
  if (const int rc = skipring_sim::parse_cli(app, argc, argv, rank); rc != 0) return rc;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, n = 1;
  Options o;
  if (const auto done = skipring_sim::start(&argc, &argv, &o, &rank, &n, parse)) return *done;
  const auto bucket_bytes = skipring_bench::parse_bytes(o.bucket_text);
  if (!bucket_bytes || *bucket_bytes < 4 || *bucket_bytes % 4 != 0 ||
      *bucket_bytes > (uint64_t{1} << 31)) {
    if (rank == 0)
      fmt::print(stderr, "skipring_sim_train: bad --bucket (a multiple of 4 bytes, <= 2 GiB)\n");
    MPI_Finalize();
    return 1;
  }
  if (o.scenario == "slow" && n < 2) {
    if (rank == 0) fmt::print(stderr, "skipring_sim_train: scenario slow needs 2 ranks\n");
    MPI_Finalize();
    return 1;
  }
  // Buckets of --bucket bytes, the last one what is left.
  const uint64_t model_bytes = o.params * 4;
  std::vector<size_t> counts;
  for (uint64_t left = model_bytes; left > 0;) {
    const uint64_t b = std::min<uint64_t>(left, *bucket_bytes);
    counts.push_back(static_cast<size_t>(b / 4));
    left -= b;
  }
  const size_t max_count = *std::max_element(counts.begin(), counts.end());
  if (int rc = skipring_init(); rc != MPI_SUCCESS) {
    if (rank == 0) fmt::print(stderr, "skipring_sim_train: skipring_init failed (see above)\n");
    MPI_Finalize();
    return 1;
  }
  if (o.mode != "mpi") {
    skipring_set_algo("skipring");
    skipring_set_skip(o.mode == "skip" ? 1 : 0);
  }
  // One send and one receive buffer of the largest bucket, reused bucket after bucket (every
  // call is blocking): n = 64 ranks hold 2 x 25 MiB each instead of the whole model twice.
  std::vector<float> send(max_count), recv(max_count);
  const double per_bucket_compute = o.compute_us * 1e-6 / static_cast<double>(counts.size());
  bool exact = true;
  double t_start = 0, late_sum = 0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const bool measured = step >= o.warmup;
    if (step == o.warmup) {
      MPI_Barrier(MPI_COMM_WORLD);
      t_start = MPI_Wtime();
    }
    double late_max = 0;
    if (measured) {
      for (int r = 0; r < n; ++r) late_max = std::max(late_max, lateness(o, step, r));
      late_sum += late_max;
    }
    for (size_t b = 0; b < counts.size(); ++b) {
      const size_t c = counts[b];
      const bool check = step == o.warmup + o.steps - 1 && b == 0;
      if (check) {
        for (size_t i = 0; i < c; ++i) send[i] = grad(rank, step, static_cast<int>(b), i);
      } else {
        std::fill(send.begin(), send.begin() + static_cast<std::ptrdiff_t>(c), 1.0f);
      }
      skipring_sim::sim_sleep(per_bucket_compute +
                              (measured && b == 0 ? lateness(o, step, rank) : 0.0));
      const int rc = o.mode == "mpi"
                         ? MPI_Allreduce(send.data(), recv.data(), static_cast<int>(c), MPI_FLOAT,
                                         MPI_SUM, MPI_COMM_WORLD)
                         : skipring_allreduce(send.data(), recv.data(), static_cast<int>(c),
                                              MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) {
        fmt::print(stderr, "skipring_sim_train: rank {}: all-reduce failed: {}\n", rank,
                   o.mode == "mpi" ? std::string("MPI error") : skipring_error_string(rc));
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      if (!check) {
        // Every element must be n (sums of 1.0f are exact).
        for (size_t i = 0; i < c; i += 4099) exact = exact && recv[i] == static_cast<float>(n);
        continue;
      }
      // The last step's first bucket: the same bits on every rank, near a double reference.
      const uint64_t h = skipring::fnv1a64(recv.data(), c * sizeof(float));
      uint64_t hmin = h, hmax = h;
      MPI_Allreduce(MPI_IN_PLACE, &hmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &hmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
      exact = exact && hmin == hmax;
      for (size_t i = 0; i < c; i += 7919) {
        double ref = 0;
        for (int r = 0; r < n; ++r) ref += grad(r, step, static_cast<int>(b), i);
        exact = exact && std::fabs(recv[i] - ref) <= 1e-4 * n;
      }
    }
  }
  const double t_local = MPI_Wtime();
  double t_end = 0;
  MPI_Allreduce(&t_local, &t_end, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int bad = exact ? 0 : 1, any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    const double step_us = (t_end - t_start) * 1e6 / o.steps;
    const double late_us = late_sum * 1e6 / o.steps;
    if (o.header) {
      fmt::print(
          "n,model_bytes,buckets,scenario,mode,steps,step_us,compute_us,late_us,comm_us,exact\n");
    }
    fmt::print("{},{},{},{},{},{},{:.1f},{:.1f},{:.1f},{:.1f},{}\n", n, model_bytes, counts.size(),
               o.scenario, o.mode, o.steps, step_us, o.compute_us, late_us,
               step_us - o.compute_us - late_us, any_bad == 0 ? 1 : 0);
  }
  skipring_finalize();
  MPI_Finalize();
  return any_bad == 0 ? 0 : 2;
}
