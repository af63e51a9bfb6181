// late_bound: how fast can any exact all-reduce finish after one rank arrives late, on this
// machine and this MPI? A yardstick for skip-ahead's late-arrival figure (docs/benchmarks.md).
//
// It times the schedule an omniscient protocol would run once the late rank L is there, given
// that the other ranks have already summed everything without it (skip-ahead's best case):
//   - L sends each owner c != L its input for chunk c; the rank before L sends L the sum of
//     the others' inputs for L's chunk;
//   - each owner adds the piece segment by segment and sends every final segment straight to
//     every other rank (or, with --ring-allgather, to its successor, which passes it on).
// Every message is posted at once (no windows, no control messages, no headers), so nothing
// but the transfers and the additions costs. Against it, in the same run: skipring's plain
// ring (skipring_set_skip(0)) with every rank arriving together. The result is checked.
//
// With --schedule chain it times the other omniscient schedule of sim/late_schedules.cpp
// instead: L's whole input goes down the healthy ranks in ring order (L+1, ..., K = L-1),
// segment by segment, at most --inflight sends in flight per rank; every healthy rank adds it
// to the others' sum it holds, and K sends each final segment to L. Every link carries S once
// and L's two links S each: the floor S/B plus n-1 hops of one segment.
//
// --late-ms D (chain) has the late rank come D ms after the others, which wait with their
// receives posted, as in a real late arrival; --trace PREFIX writes when each rank received
// each segment (the host's monotonic clock, comparable between emulated hosts), to set beside
// skipring's SKIPRING_MSGLOG.
//
//   mpirun -np 4 late_bound -b 64M -n 12
//   mpirun -np 4 late_bound -b 64M -n 12 --schedule chain --inflight 4
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/app_version.h"
#include "apps/bench_util.h"
#include "common/clock.h"
#include "skipring/skipring.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Geometry {
  int n;
  size_t chunk;  // elements per chunk
  size_t seg;    // elements per segment
  int segs;      // segments per chunk
  size_t at(int c, int g) const { return c * chunk + g * seg; }
};

// One late-arrival round after the others are done; returns this rank's elapsed seconds.
double ideal_round(const Geometry& geo, int rank, int late, bool ring_ag, MPI_Comm comm,
                   const std::vector<float>& input, const std::vector<float>& others_sum,
                   std::vector<float>* piece, std::vector<float>* out) {
  const int n = geo.n, pred = (late - 1 + n) % n;
  const int kPiece = 0, kPartial = 1 << 20, kFinal = 2 << 20;
  std::vector<MPI_Request> sends, recvs;
  std::vector<int> what;  // per receive: 0 piece for our chunk, 1 final segment (c * segs + g)
  std::vector<int> which;
  sends.reserve(static_cast<size_t>(n) * n * geo.segs);
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  const int mine = rank;  // rank r owns chunk r
  for (int g = 0; g < geo.segs; ++g) {
    recvs.emplace_back();
    const int src = rank == late ? pred : late;
    const int tag = rank == late ? kPartial + g : kPiece + g;
    MPI_Irecv(piece->data() + geo.at(mine, g), static_cast<int>(geo.seg), MPI_FLOAT, src, tag, comm,
              &recvs.back());
    what.push_back(0);
    which.push_back(g);
  }
  for (int c = 0; c < n; ++c) {
    if (c == rank) continue;
    for (int g = 0; g < geo.segs; ++g) {
      recvs.emplace_back();
      const int src = ring_ag ? (rank - 1 + n) % n : c;
      MPI_Irecv(out->data() + geo.at(c, g), static_cast<int>(geo.seg), MPI_FLOAT, src,
                kFinal + c * geo.segs + g, comm, &recvs.back());
      what.push_back(1);
      which.push_back(c * geo.segs + g);
    }
  }
  auto send = [&](const float* p, int to, int tag) {
    sends.emplace_back();
    MPI_Isend(p, static_cast<int>(geo.seg), MPI_FLOAT, to, tag, comm, &sends.back());
  };
  if (rank == late) {
    for (int g = 0; g < geo.segs; ++g) {
      for (int c = 0; c < n; ++c) {
        if (c != late) send(input.data() + geo.at(c, g), c, kPiece + g);
      }
    }
  } else if (rank == pred) {
    for (int g = 0; g < geo.segs; ++g)
      send(others_sum.data() + geo.at(late, g), late, kPartial + g);
  }
  auto send_final = [&](int c, int g) {
    const float* p = out->data() + geo.at(c, g);
    if (!ring_ag) {
      if (c != rank) return;
      for (int k = 1; k < n; ++k) send(p, (rank + k) % n, kFinal + c * geo.segs + g);
    } else if ((rank + 1) % n != c) {
      send(p, (rank + 1) % n, kFinal + c * geo.segs + g);
    }
  };
  for (size_t left = recvs.size(); left > 0; --left) {
    int idx = 0;
    MPI_Waitany(static_cast<int>(recvs.size()), recvs.data(), &idx, MPI_STATUS_IGNORE);
    if (what[idx] == 0) {
      const int g = which[idx];
      const size_t o = geo.at(mine, g);
      // The late rank adds its input to the others' partial; an owner adds the late piece to
      // the others' sum it already holds.
      const float* base = rank == late ? input.data() : others_sum.data();
      for (size_t i = 0; i < geo.seg; ++i) (*out)[o + i] = base[o + i] + (*piece)[o + i];
      send_final(mine, g);
    } else if (ring_ag) {
      send_final(which[idx] / geo.segs, which[idx] % geo.segs);
    }
  }
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  return MPI_Wtime() - t0;
}

// The chain schedule (see the top of the file); returns this rank's elapsed seconds. *trace
// (when given): this rank's start, then per segment when its receive completed, on the steady
// clock (SteadyClock, as SKIPRING_MSGLOG): comparable between the ranks of one machine (the
// emulated hosts of scripts/vcluster.sh), which MPI_Wtime is not (Open MPI counts from each
// process's MPI_Init).
double chain_round(const Geometry& geo, int rank, int late, int inflight, MPI_Comm comm,
                   const std::vector<float>& input, const std::vector<float>& others_sum,
                   std::vector<float>* piece, std::vector<float>* out, double late_s,
                   std::vector<double>* trace) {
  const int n = geo.n, succ = (rank + 1) % n, pred = (rank - 1 + n) % n;
  const int last = (late - 1 + n) % n;  // K: sends the finals to L
  const int nseg = n * geo.segs;
  const int len = static_cast<int>(geo.seg);
  std::deque<MPI_Request> in_flight;
  auto send = [&](const float* p, int to, int tag) {
    if (static_cast<int>(in_flight.size()) >= inflight) {
      MPI_Wait(&in_flight.front(), MPI_STATUS_IGNORE);
      in_flight.pop_front();
    }
    in_flight.emplace_back();
    MPI_Isend(p, len, MPI_FLOAT, to, tag, comm, &in_flight.back());
  };
  // Every receive is posted at once: the senders' windows pace the links.
  std::vector<MPI_Request> recvs(static_cast<size_t>(nseg));
  MPI_Barrier(comm);
  // --late-ms: the late rank comes late_s after the others, which wait with their receives
  // posted (as in a real late arrival); every rank's time counts from the late rank's arrival.
  if (rank == late && late_s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(late_s));
  const double t0 = MPI_Wtime() + (rank == late ? 0 : late_s);
  for (int g = 0; g < nseg; ++g) {
    const size_t o = static_cast<size_t>(g) * geo.seg;
    if (rank == late) {
      MPI_Irecv(out->data() + o, len, MPI_FLOAT, last, g, comm, &recvs[g]);
    } else {
      MPI_Irecv(piece->data() + o, len, MPI_FLOAT, pred, g, comm, &recvs[g]);
    }
  }
  const skipring::SteadyClock clock;
  if (trace != nullptr) trace->assign(static_cast<size_t>(nseg) + 1, clock.now());
  auto wait_segment = [&](int g) {
    MPI_Wait(&recvs[g], MPI_STATUS_IGNORE);
    if (trace != nullptr) (*trace)[g + 1] = clock.now();
  };
  if (rank == late) {
    for (int g = 0; g < nseg; ++g) send(input.data() + static_cast<size_t>(g) * geo.seg, succ, g);
    for (int g = 0; g < nseg; ++g) wait_segment(g);
  } else {
    for (int g = 0; g < nseg; ++g) {
      wait_segment(g);
      const size_t o = static_cast<size_t>(g) * geo.seg;
      for (size_t i = 0; i < geo.seg; ++i) (*out)[o + i] = others_sum[o + i] + (*piece)[o + i];
      if (rank == last) {
        send(out->data() + o, late, g);
      } else {
        send(piece->data() + o, succ, g);
      }
    }
  }
  while (!in_flight.empty()) {
    MPI_Wait(&in_flight.front(), MPI_STATUS_IGNORE);
    in_flight.pop_front();
  }
  return MPI_Wtime() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  if (skipring_apps::print_version_if_asked(argc, argv, "late_bound")) return 0;
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  CLI::App app{"late_bound: the fastest exact completion after one late arrival (a yardstick)"};
  app.set_version_flag("--version", skipring_apps::version_text("late_bound"),
                       "print the version (and git describe of the source) and exit");
  std::string size_text = "64M";
  int iters = 12, warmup = 2, late = 1;
  size_t seg_bytes = 256 * 1024;
  bool ring_ag = false;
  std::string schedule = "owners";
  int inflight = 2;
  app.add_option("-b,--bytes", size_text, "message size (K/M/G suffixes)");
  app.add_option("-n,--iters", iters, "timed rounds")->check(CLI::Range(1, 100000));
  app.add_option("-w,--warmup", warmup, "untimed rounds")->check(CLI::Range(0, 100000));
  app.add_option("--late-rank", late, "the rank that arrives last")->check(CLI::NonNegativeNumber);
  app.add_option("--segment", seg_bytes, "segment bytes")->check(CLI::Range(4, 1 << 30));
  app.add_flag("--ring-allgather", ring_ag, "final segments around the ring, not direct");
  app.add_option("--schedule", schedule, "owners (the late rank's pieces to the owners) or chain")
      ->check(CLI::IsMember({"owners", "chain"}));
  app.add_option("--inflight", inflight, "chain: sends in flight per rank")
      ->check(CLI::Range(1, 1024));
  double late_ms = 0;
  app.add_option("--late-ms", late_ms,
                 "chain: the late rank sleeps this long after the barrier, while the others wait "
                 "with their receives posted; times count from its arrival")
      ->check(CLI::Range(0.0, 3.6e6));
  std::string trace_prefix;
  app.add_option(
      "--trace", trace_prefix,
      "chain: write PREFIX<rank>.tsv: in the last round, this rank's start and when each "
      "segment's receive completed (the host's monotonic clock, seconds)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
    MPI_Finalize();
    return rc;
  }
  const std::optional<uint64_t> parsed = skipring_bench::parse_bytes(size_text);
  const size_t bytes = parsed ? static_cast<size_t>(*parsed) : 0;
  if (!parsed || n < 2 || late >= n) {
    if (rank == 0) std::fprintf(stderr, "late_bound: bad size, rank count or --late-rank\n");
    MPI_Finalize();
    return 2;
  }
  if (skipring_init() != MPI_SUCCESS) {
    MPI_Finalize();
    return 1;
  }
  Geometry geo;
  geo.n = n;
  geo.seg = std::max<size_t>(1, seg_bytes / sizeof(float));
  geo.segs = static_cast<int>(std::max<size_t>(1, bytes / sizeof(float) / n / geo.seg));
  geo.chunk = geo.seg * geo.segs;
  const size_t count = geo.chunk * n;
  // Inputs: rank r holds r + 1 everywhere, so every sum is exact in float.
  std::vector<float> input(count, static_cast<float>(rank + 1)), others(count), piece(count),
      out(count), ring_out(count);
  const float total = static_cast<float>(n) * (n + 1) / 2;
  std::fill(others.begin(), others.end(), total - static_cast<float>(late + 1));
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::vector<double> ideal, ring, trace;
  long wrong = 0;
  for (int it = 0; it < warmup + iters; ++it) {
    std::fill(out.begin(), out.end(), 0.0f);
    double t = schedule == "chain"
                   ? chain_round(geo, rank, late, inflight, comm, input, others, &piece, &out,
                                 late_ms * 1e-3, &trace)
                   : ideal_round(geo, rank, late, ring_ag, comm, input, others, &piece, &out);
    double tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, comm);
    for (float v : out) wrong += v != total;
    skipring_set_skip(0);
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    skipring_allreduce(input.data(), ring_out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                       comm);
    t = MPI_Wtime() - t0;
    double rmax = 0;
    MPI_Allreduce(&t, &rmax, 1, MPI_DOUBLE, MPI_MAX, comm);
    for (float v : ring_out) wrong += v != total;
    if (it >= warmup) {
      ideal.push_back(tmax);
      ring.push_back(rmax);
    }
  }
  if (!trace_prefix.empty() && schedule == "chain") {
    const std::string path = trace_prefix + std::to_string(rank) + ".tsv";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "segment\tsteady_s\n");  // segment -1: the start
      for (size_t g = 0; g < trace.size(); ++g) {
        std::fprintf(f, "%lld\t%.6f\n", static_cast<long long>(g) - 1, trace[g]);
      }
      std::fclose(f);
    } else {
      std::fprintf(stderr, "late_bound: cannot write %s\n", path.c_str());
    }
  }
  long wrong_all = 0;
  MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, comm);
  if (rank == 0) {
    if (schedule == "chain") {
      std::printf(
          "# late_bound: %d ranks, %zu bytes, late rank %d, chain, %d in flight, %d rounds\n", n,
          count * sizeof(float), late, inflight, iters);
    } else {
      std::printf("# late_bound: %d ranks, %zu bytes, late rank %d, %s allgather, %d rounds\n", n,
                  count * sizeof(float), late, ring_ag ? "ring" : "direct", iters);
    }
    std::printf(
        "ideal after-arrival p50 %.1f ms, plain ring (all at once) p50 %.1f ms, "
        "ratio %.2f, wrong elements %ld\n",
        median(ideal) * 1e3, median(ring) * 1e3, median(ideal) / median(ring), wrong_all);
  }
  MPI_Comm_free(&comm);
  skipring_finalize();
  MPI_Finalize();
  return wrong_all == 0 ? 0 : 1;
}
