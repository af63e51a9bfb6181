// skipring_sim: the experiment driver for SimGrid SMPI (built only with SKIPRING_SIMGRID=ON,
// run with scripts/sim_run.sh). Every time here is simulated time (MPI_Wtime under SMPI).
//
// Per measured iteration and mode (skip = flat skip-ahead ring, ring = flat plain ring, both
// forced with skipring_set_algo("skipring"); hier = the hierarchical all-reduce, skip-ahead on
// (set SKIPRING_HOST_MAP, e.g. block:M: every SimGrid host is a host of its own);
// auto = skipring's own choice; mpi = SimGrid's MPI_Allreduce), on every rank: barrier; the late
// rank (--late-rank) sleeps --late-us of simulated time; t_in = MPI_Wtime(); the all-reduce; t_out
// = MPI_Wtime(). Rank 0 prints one CSV line:
//   t_total_us               max t_out - min t_in
//   t_after_last_arrival_us  max t_out - max t_in (what remains once the last rank is there)
//   t_rs_us                  end of the reduce-scatter phase (max over ranks of t_in plus
//                            skipring_stats_t.rs_time_s) - min t_in; empty for mpi
//   skips, late_pieces       summed over ranks (skipring_last_stats)
//   exact                    1 when every rank's result is right: int64 sums equal the closed
//                            form on every element of every rank; float/double results are
//                            bitwise identical on all ranks (and close to a double reference
//                            at sampled elements)
// Modes skip, ring, hier and auto also print "skipring_sim: mode M ran algo A" (stats) to
// stderr per measured line (rank 0).
// Exit status: 0; 1 bad arguments or init error; 2 a result was wrong; 3 --expect-skips failed.
//
// Mode tree (issue 5, seed 002): the multi-spanning-tree all-reduce (collectives/
// tree_allreduce.h) on trees planned from the link graph --graph (topology/multitree.h, at
// most --trees trees), driven directly by a progress engine over its own duplicate of
// MPI_COMM_WORLD (segment --tree-seg, pipeline depth --tree-depth). Rank 0 prints the plan to
// stderr.
#include <fmt/core.h>
#include <mpi.h>
#include <time.h>

// smpicxx force-includes smpi_helpers.h, whose exit(x) macro would rewrite CLI::App::exit.
#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/app_version.h"
#include "apps/bench_util.h"
#include "apps/sim_util.h"
#include "collectives/tree_allreduce.h"
#include "common/hash.h"
#include "runtime/clock.h"
#include "runtime/mpi_transport.h"
#include "runtime/progress_engine.h"
#include "skipring/skipring.h"
#include "topology/multitree.h"

#ifndef SKIPRING_SIMGRID
#error "skipring_sim is the SimGrid SMPI driver: build it with scripts/sim_build.sh"
#endif

namespace {

enum class Mode { kSkip, kRing, kMpi, kTree, kHier, kAuto };
enum class ElemType { kInt64, kFloat, kDouble };

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kSkip:
      return "skip";
    case Mode::kRing:
      return "ring";
    case Mode::kMpi:
      return "mpi";
    case Mode::kTree:
      return "tree";
    case Mode::kHier:
      return "hier";
    case Mode::kAuto:
      return "auto";
  }
  return "?";
}

struct Options {
  std::string bytes_text = "1M";
  uint64_t bytes = 0;
  std::string type_text = "int64";
  ElemType type = ElemType::kInt64;
  int iters = 3;
  int warmup = 4;
  std::vector<Mode> modes;
  int late_rank = -1;
  double late_us = 0;
  int slow_rank = -1;
  double delta_us = 0;
  std::string at = "rs";
  std::string inject;  // raw spec
  bool header = true;
  bool expect_skips = false;
  std::string graph;  // mode tree: link-graph file
  int trees = 4;
  double tree_loss = 0.05;
  std::string tree_seg_text = "256K";
  int tree_depth = 8;
};

// Mode tree: the plan, and a progress engine on a duplicate of MPI_COMM_WORLD.
class TreeRunner {
 public:
  int init(const Options& o, int rank, int n) {
    skipring::LinkGraph g;
    std::string why;
    if (!skipring::ok(skipring::LinkGraph::load(o.graph, &g, &why))) {
      if (rank == 0) fmt::print(stderr, "skipring_sim: {}\n", why);
      return 1;
    }
    if (g.nodes() != n) {
      if (rank == 0)
        fmt::print(stderr, "skipring_sim: graph has {} nodes, {} ranks\n", g.nodes(), n);
      return 1;
    }
    skipring::PlannerParams pp;
    pp.max_trees = o.trees;
    pp.loss = o.tree_loss;
    if (!skipring::ok(skipring::plan_multitree(g, pp, &plan_, &why))) {
      if (rank == 0) fmt::print(stderr, "skipring_sim: planner: {}\n", why);
      return 1;
    }
    if (rank == 0) fmt::print(stderr, "{}", skipring::plan_to_string(plan_));
    const auto seg = skipring_bench::parse_bytes(o.tree_seg_text);
    if (!seg || *seg == 0) {
      if (rank == 0) fmt::print(stderr, "skipring_sim: bad --tree-seg\n");
      return 1;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    transport_ = std::make_unique<skipring::MpiTransport>(comm_);
    clock_ = skipring::make_clock(skipring::ClockKind::kMpiWtime);
    engine_ = std::make_unique<skipring::ProgressEngine>(
        transport_.get(), clock_.get(), skipring::engine_options(skipring::global_config()));
    params_.rank = rank;
    params_.ring.resize(n);
    for (int i = 0; i < n; ++i) params_.ring[i] = i;
    params_.segment_bytes = static_cast<size_t>(*seg);
    params_.depth = o.tree_depth;
    // MpiTransport computes (MPI_TAG_UB + 1) / 2, which overflows when MPI_TAG_UB is INT_MAX
    // (SMPI): then fall back to 2^28 tags (MPI tags up to 2^29 + 1, far below INT_MAX).
    const int span = transport_->tag_span();
    params_.tag_span = span >= 1024 ? span : (1 << 28);
    return 0;
  }
  int allreduce(const void* send, void* recv, size_t count, skipring::DType dt) {
    params_.count = count;
    params_.dtype = dt;
    params_.op = skipring::ROp::kSum;
    params_.sendbuf = send;
    params_.recvbuf = recv;
    params_.seq = seq_++;
    std::string why;
    if (!skipring::ok(skipring::TreeAllreduce::validate(params_, plan_, &why))) {
      fmt::print(stderr, "skipring_sim: tree: {}\n", why);
      return MPI_ERR_ARG;
    }
    skipring::TreeAllreduce core(params_, plan_, &scratch_);
    const skipring::Status st = engine_->run(&core);
    if (!skipring::ok(st)) {
      fmt::print(stderr, "skipring_sim: tree all-reduce: {} {}\n", skipring::status_string(st),
                 core.error());
      return MPI_ERR_OTHER;
    }
    return MPI_SUCCESS;
  }
  void finalize() {
    engine_.reset();
    transport_.reset();
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

 private:
  skipring::MultiTreePlan plan_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<skipring::MpiTransport> transport_;
  std::unique_ptr<skipring::Clock> clock_;
  std::unique_ptr<skipring::ProgressEngine> engine_;
  skipring::RingParams params_;
  std::vector<uint8_t> scratch_;
  uint32_t seq_ = 0;
};
TreeRunner g_tree;

uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Input of `rank` at element i in iteration `it`: int64 values with a closed-form sum,
// floating values pseudo-random in [-1, 1).
int64_t int_input(int rank, size_t i, int it) {
  return static_cast<int64_t>(rank + 1) * static_cast<int64_t>(i % 1021 + 1) + it;
}
int64_t int_expected(int n, size_t i, int it) {
  const int64_t tri = static_cast<int64_t>(n) * (n + 1) / 2;
  return tri * static_cast<int64_t>(i % 1021 + 1) + static_cast<int64_t>(n) * it;
}
double real_input(int rank, size_t i, int it) {
  const uint64_t h =
      mix64((static_cast<uint64_t>(rank) << 40) ^ (static_cast<uint64_t>(it) << 32) ^ i);
  return static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0;
}

struct Buffers {
  std::vector<int64_t> i_send, i_recv;
  std::vector<float> f_send, f_recv;
  std::vector<double> d_send, d_recv;
};

class Driver {
 public:
  Driver(const Options& o, int rank, int n) : o_(o), rank_(rank), n_(n) {
    count_ = static_cast<size_t>(o_.bytes / elem_size());
    switch (o_.type) {
      case ElemType::kInt64:
        b_.i_send.resize(count_);
        b_.i_recv.resize(count_);
        break;
      case ElemType::kFloat:
        b_.f_send.resize(count_);
        b_.f_recv.resize(count_);
        break;
      case ElemType::kDouble:
        b_.d_send.resize(count_);
        b_.d_recv.resize(count_);
        break;
    }
  }

  size_t elem_size() const {
    return o_.type == ElemType::kInt64 ? 8 : o_.type == ElemType::kFloat ? 4 : 8;
  }

  // Runs one all-reduce in `mode`; with `measured`, prints its line (rank 0). Returns false
  // when the result is wrong.
  bool run_one(Mode mode, int it, bool measured, bool late, uint64_t* skips_out) {
    fill(it);
    // skip/ring: the flat ring whatever auto would pick; hier: the hierarchical all-reduce
    // (skip-ahead on in its inter-host ring); auto: skipring's own choice (skip-ahead on).
    const bool lib = mode != Mode::kMpi && mode != Mode::kTree;
    if (lib) {
      skipring_set_algo(mode == Mode::kHier ? "hier" : mode == Mode::kAuto ? "auto" : "skipring");
      skipring_set_skip(mode == Mode::kRing ? 0 : 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (late && rank_ == o_.late_rank) skipring_sim::sim_sleep(o_.late_us * 1e-6);
    const double t_in = MPI_Wtime();
    int rc = MPI_SUCCESS;
    void* send = send_ptr();
    void* recv = recv_ptr();
    const int count = static_cast<int>(count_);
    if (mode == Mode::kMpi) {
      rc = MPI_Allreduce(send, recv, count, mpi_type(), MPI_SUM, MPI_COMM_WORLD);
    } else if (mode == Mode::kTree) {
      rc = g_tree.allreduce(send, recv, count_, dtype());
    } else {
      rc = skipring_allreduce(send, recv, count, mpi_type(), MPI_SUM, MPI_COMM_WORLD);
    }
    const double t_out = MPI_Wtime();
    if (rc != MPI_SUCCESS) {
      fmt::print(stderr, "skipring_sim: rank {}: {} all-reduce failed: {}\n", rank_,
                 mode_name(mode), mode == Mode::kTree ? "see above" : skipring_error_string(rc));
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    skipring_stats_t st{};
    if (lib) skipring_last_stats(MPI_COMM_WORLD, &st);
    const bool ok_here = verify(it);

    // One reduction for the maxima (t_in as -min), one for the sums.
    double mx[4] = {-t_in, t_in, t_out, lib ? t_in + st.rs_time_s : 0};
    double gmx[4];
    MPI_Allreduce(mx, gmx, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    uint64_t sums[3] = {st.skips, st.late_pieces, ok_here ? 0u : 1u};
    uint64_t gsums[3];
    MPI_Allreduce(sums, gsums, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    double thr[1] = {st.skip_threshold_s}, gthr[1];
    MPI_Allreduce(thr, gthr, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const bool exact = gsums[2] == 0;
    *skips_out = gsums[0];
    if (measured && rank_ == 0) {
      const double first_in = -gmx[0], last_in = gmx[1], last_out = gmx[2];
      const std::string rs =
          gmx[3] <= first_in ? std::string() : fmt::format("{:.3f}", (gmx[3] - first_in) * 1e6);
      fmt::print("{},{},{},{},{},{},{:.3f},{},{:.3f},{},{},{},{},{:.3f}\n", n_, o_.bytes,
                 mode_name(mode), alpha_text(), delta_text(),
                 fmt::format("{:g}", late ? o_.late_us : 0.0), (last_out - first_in) * 1e6, rs,
                 (last_out - last_in) * 1e6, gsums[0], gsums[1], exact ? 1 : 0, it, gthr[0] * 1e6);
      std::fflush(stdout);
      // The algorithm that ran (stats), on stderr: the CSV stays as it was.
      if (lib) fmt::print(stderr, "skipring_sim: mode {} ran algo {}\n", mode_name(mode), st.algo);
    }
    return exact;
  }

  std::string delta_text() const {
    if (o_.slow_rank >= 0) return fmt::format("{:g}", o_.delta_us);
    // A raw spec (--inject or SKIPRING_INJECT): see the command line.
    const char* env = std::getenv("SKIPRING_INJECT");
    if (!o_.inject.empty() || (env != nullptr && *env != '\0')) return "nan";
    return "0";
  }

  static std::string alpha_text() {
    const char* a = std::getenv("SKIPRING_ALPHA");
    return a != nullptr ? std::string(a) : std::string("2");
  }

 private:
  skipring::DType dtype() const {
    return o_.type == ElemType::kInt64   ? skipring::DType::kInt64
           : o_.type == ElemType::kFloat ? skipring::DType::kFloat
                                         : skipring::DType::kDouble;
  }
  MPI_Datatype mpi_type() const {
    return o_.type == ElemType::kInt64   ? MPI_INT64_T
           : o_.type == ElemType::kFloat ? MPI_FLOAT
                                         : MPI_DOUBLE;
  }
  void* send_ptr() {
    return o_.type == ElemType::kInt64   ? static_cast<void*>(b_.i_send.data())
           : o_.type == ElemType::kFloat ? static_cast<void*>(b_.f_send.data())
                                         : static_cast<void*>(b_.d_send.data());
  }
  void* recv_ptr() {
    return o_.type == ElemType::kInt64   ? static_cast<void*>(b_.i_recv.data())
           : o_.type == ElemType::kFloat ? static_cast<void*>(b_.f_recv.data())
                                         : static_cast<void*>(b_.d_recv.data());
  }

  void fill(int it) {
    for (size_t i = 0; i < count_; ++i) {
      switch (o_.type) {
        case ElemType::kInt64:
          b_.i_send[i] = int_input(rank_, i, it);
          b_.i_recv[i] = -1;
          break;
        case ElemType::kFloat:
          b_.f_send[i] = static_cast<float>(real_input(rank_, i, it));
          b_.f_recv[i] = std::numeric_limits<float>::quiet_NaN();
          break;
        case ElemType::kDouble:
          b_.d_send[i] = real_input(rank_, i, it);
          b_.d_recv[i] = std::numeric_limits<double>::quiet_NaN();
          break;
      }
    }
  }

  // This rank's check; the float check is collective (every rank calls it).
  bool verify(int it) {
    if (o_.type == ElemType::kInt64) {
      size_t bad = 0;
      for (size_t i = 0; i < count_; ++i) bad += b_.i_recv[i] != int_expected(n_, i, it);
      if (bad != 0) {
        fmt::print(stderr, "skipring_sim: rank {}: {} of {} int64 elements wrong\n", rank_, bad,
                   count_);
      }
      return bad == 0;
    }
    // Floating point: all ranks must hold the same bits (rank 0's hash), and sampled elements
    // must be within rounding of a double-precision reference.
    const uint64_t mine = skipring::fnv1a64(recv_ptr(), count_ * elem_size());
    uint64_t root = mine;
    MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    bool ok = mine == root;
    if (!ok) fmt::print(stderr, "skipring_sim: rank {}: result differs from rank 0's\n", rank_);
    const size_t samples = std::min<size_t>(count_, 16);
    for (size_t k = 0; k < samples; ++k) {
      const size_t i = count_ <= 16 ? k : (k * 7919 + static_cast<size_t>(rank_)) % count_;
      double ref = 0, mag = 0;
      for (int r = 0; r < n_; ++r) {
        const double x = o_.type == ElemType::kFloat
                             ? static_cast<double>(static_cast<float>(real_input(r, i, it)))
                             : real_input(r, i, it);
        ref += x;
        mag += std::fabs(x);
      }
      const double got = o_.type == ElemType::kFloat ? b_.f_recv[i] : b_.d_recv[i];
      const double eps = o_.type == ElemType::kFloat ? 0x1.0p-23 : 0x1.0p-52;
      if (!(std::fabs(got - ref) <= 2.0 * n_ * eps * mag + 1e-300)) {
        fmt::print(stderr, "skipring_sim: rank {}: element {} is {} (expected about {})\n", rank_,
                   i, got, ref);
        ok = false;
      }
    }
    return ok;
  }

  const Options& o_;
  int rank_, n_;
  size_t count_ = 0;
  Buffers b_;
};

int parse(int argc, char** argv, Options* o, int rank) {
  CLI::App app{
      "skipring_sim: skipring vs plain ring vs MPI_Allreduce on a SimGrid platform "
      "(simulated time; run with scripts/sim_run.sh)"};
  app.set_version_flag("--version", skipring_apps::version_text("skipring_sim"),
                       "print the version (and git describe of the source) and exit");
  std::string modes = "skip";
  app.add_option("--bytes", o->bytes_text, "message size (K/M/G suffixes), default 1M");
  app.add_option("--type", o->type_text, "int64 (exact sums checked) | float | double")
      ->check(CLI::IsMember({"int64", "float", "double"}))
      ->capture_default_str();
  app.add_option("--iters", o->iters, "measured iterations per mode")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--warmup", o->warmup, "unmeasured iterations per mode first (no straggler)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--mode", modes,
                 "comma list of skip, ring, mpi, tree, hier, auto (interleaved per iteration)")
      ->capture_default_str();
  app.add_option("--graph", o->graph, "mode tree: link-graph file (docs/multitree.md)");
  app.add_option("--trees", o->trees, "mode tree: at most this many spanning trees")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--tree-loss", o->tree_loss, "mode tree: planner throughput loss bound")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--tree-seg", o->tree_seg_text, "mode tree: segment size")->capture_default_str();
  app.add_option("--tree-depth", o->tree_depth, "mode tree: pipeline depth per tree and phase")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--late-rank", o->late_rank, "rank that enters each measured call late");
  app.add_option("--late-us", o->late_us, "how late, simulated microseconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--slow-rank", o->slow_rank, "rank with slow steps (injected, skipring modes)");
  app.add_option("--delta-us", o->delta_us, "extra delay per slow step (Delta T), microseconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--at", o->at, "slow steps: rs | ag | step")
      ->check(CLI::IsMember({"rs", "ag", "step"}))
      ->capture_default_str();
  app.add_option("--inject", o->inject, "raw SKIPRING_INJECT spec for the measured iterations");
  app.add_flag("!--no-header", o->header, "omit the CSV header");
  app.add_flag("--expect-skips", o->expect_skips,
               "fail (exit 3) unless every measured skip line has skips > 0 and every ring "
               "line has none");
  if (const int rc = skipring_sim::parse_cli(app, argc, argv, rank); rc != 0) return rc;
  const auto b = skipring_bench::parse_bytes(o->bytes_text);
  if (!b) {
    if (rank == 0) fmt::print(stderr, "skipring_sim: bad --bytes '{}'\n", o->bytes_text);
    return 1;
  }
  o->bytes = *b;
  o->type = o->type_text == "float"    ? ElemType::kFloat
            : o->type_text == "double" ? ElemType::kDouble
                                       : ElemType::kInt64;
  const uint64_t es = o->type == ElemType::kFloat ? 4 : 8;
  if (o->bytes % es != 0 ||
      o->bytes / es > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    if (rank == 0) {
      fmt::print(stderr,
                 "skipring_sim: --bytes {} is not a whole number of {}-byte elements "
                 "(or too many)\n",
                 o->bytes, es);
    }
    return 1;
  }
  std::stringstream ss(modes);
  std::string m;
  while (std::getline(ss, m, ',')) {
    if (m == "skip")
      o->modes.push_back(Mode::kSkip);
    else if (m == "ring")
      o->modes.push_back(Mode::kRing);
    else if (m == "mpi")
      o->modes.push_back(Mode::kMpi);
    else if (m == "tree")
      o->modes.push_back(Mode::kTree);
    else if (m == "hier")
      o->modes.push_back(Mode::kHier);
    else if (m == "auto")
      o->modes.push_back(Mode::kAuto);
    else {
      if (rank == 0)
        fmt::print(stderr, "skipring_sim: unknown mode '{}' (skip, ring, mpi, tree, hier, auto)\n",
                   m);
      return 1;
    }
  }
  if (o->modes.empty()) {
    if (rank == 0) fmt::print(stderr, "skipring_sim: --mode is empty\n");
    return 1;
  }
  if (o->slow_rank >= 0 && !o->inject.empty()) {
    if (rank == 0)
      fmt::print(stderr, "skipring_sim: --slow-rank and --inject exclude each other\n");
    return 1;
  }
  if (o->slow_rank >= 0) {
    o->inject = fmt::format("rank={},delay={}us,at={}", o->slow_rank, o->delta_us, o->at);
    if (o->delta_us == 0) o->inject.clear();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, n = 1;
  Options o;
  if (const auto done = skipring_sim::start(&argc, &argv, &o, &rank, &n, parse)) return *done;
  if (o.late_rank >= n || o.slow_rank >= n) {
    if (rank == 0) fmt::print(stderr, "skipring_sim: rank out of range (n = {})\n", n);
    MPI_Finalize();
    return 1;
  }
  if (int rc = skipring_init(); rc != MPI_SUCCESS) {
    if (rank == 0) fmt::print(stderr, "skipring_sim: skipring_init failed (see above)\n");
    MPI_Finalize();
    return 1;
  }
  const bool tree_mode = std::find(o.modes.begin(), o.modes.end(), Mode::kTree) != o.modes.end();
  if (tree_mode && (o.graph.empty() || g_tree.init(o, rank, n) != 0)) {
    if (rank == 0 && o.graph.empty()) fmt::print(stderr, "skipring_sim: mode tree needs --graph\n");
    skipring_finalize();
    MPI_Finalize();
    return 1;
  }
  if (rank == 0 && o.header) {
    fmt::print(
        "n,bytes,mode,alpha,delta_t_us,late_us,t_total_us,t_rs_us,"
        "t_after_last_arrival_us,skips,late_pieces,exact,iter,threshold_us\n");
  }
  Driver d(o, rank, n);
  bool all_exact = true, skips_ok = true;
  uint64_t skips = 0;
  // Warm-up: no straggler, so the step timer learns the normal step time T.
  for (int it = 0; it < o.warmup; ++it) {
    for (Mode m : o.modes) all_exact = d.run_one(m, it, false, false, &skips) && all_exact;
  }
  if (!o.inject.empty() && skipring_set_inject(o.inject.c_str()) != MPI_SUCCESS) {
    if (rank == 0) fmt::print(stderr, "skipring_sim: bad injection spec '{}'\n", o.inject);
    MPI_Finalize();
    return 1;
  }
  const bool late = o.late_rank >= 0 && o.late_us > 0;
  for (int it = 0; it < o.iters; ++it) {
    for (Mode m : o.modes) {
      all_exact = d.run_one(m, o.warmup + it, true, late, &skips) && all_exact;
      if (m == Mode::kSkip && skips == 0) skips_ok = false;
      if (m == Mode::kRing && skips != 0) skips_ok = false;
    }
  }
  // Before MPI_Finalize: SMPI runs MPI_COMM_SELF's attribute deleters (where skipring would
  // free its state) after it already counts MPI as finalized, and then fails their MPI calls.
  g_tree.finalize();
  skipring_finalize();
  MPI_Finalize();
  if (!all_exact) return 2;
  if (o.expect_skips && !skips_ok) {
    if (rank == 0)
      fmt::print(stderr, "skipring_sim: --expect-skips: skip counts not as expected\n");
    return 3;
  }
  return 0;
}
