// Cost-model parameter measurement (see cost_probe.h).
#include "runtime/cost_probe.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "collectives/reduce_kernels.h"
#include "runtime/mpi_wait.h"

namespace skipring {
namespace {

constexpr int kLatencyIters = 30;
constexpr int kBandwidthIters = 5;
constexpr size_t kBandwidthBytes = 256 * 1024;

double min_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The probe's waits are watched (runtime/mpi_wait.h) and yield the core from the first failed
// test (policy.spins = 0): a blocking MPI call spins, and where ranks share cores (emulated
// hosts, oversubscribed nodes) the spinning rank holds the core its partner needs for a whole
// time slice, which the round trip then measures (2-4 ms latencies between emulated hosts on
// 2 cores for 4 ranks, with MPI_Send / MPI_Recv). A partner that never answers: kErrTimeout.
WaitWhat probe_step(const char* what, int peer = -1) {
  WaitWhat w;
  w.what = what;
  w.peer = peer;
  return w;
}

constexpr const char* kRoundTrip = "communicator setup: the cost model's round trips";

// Half round trips of `bytes` with `peer`, the fastest of `iters` (after two warm-up rounds):
// noise only ever adds to a round trip. The median was not robust enough across emulated hosts
// (network namespaces, tbf-shaped veths, 2 cores for 4 ranks): over four runs it gave latencies
// of 9 us to 6 ms and bandwidths of 0.022 to 0.2 GB/s on the same 1 Gbit/s links, and the skip
// threshold, whose floor is that link time, ranged from 22 to 96 ms (RingAllreduce: a piece
// takes 2.1 ms there).
Status ping_pong(MPI_Comm comm, int peer, bool first, std::vector<uint8_t>* buf, size_t bytes,
                 int iters, const Clock& clock, const WaitPolicy& w, double* half_rtt) {
  std::vector<double> t;
  for (int i = 0; i < iters + 2; ++i) {
    const double t0 = clock.now();
    const WaitWhat what = probe_step(kRoundTrip, peer);
    if (first) {
      SKIPRING_RETURN_IF_ERROR(send_watched(buf->data(), bytes, peer, kProbeTag, comm, w, what));
      SKIPRING_RETURN_IF_ERROR(recv_watched(buf->data(), bytes, peer, kProbeTag, comm, w, what));
    } else {
      SKIPRING_RETURN_IF_ERROR(recv_watched(buf->data(), bytes, peer, kProbeTag, comm, w, what));
      SKIPRING_RETURN_IF_ERROR(send_watched(buf->data(), bytes, peer, kProbeTag, comm, w, what));
    }
    if (i >= 2) t.push_back((clock.now() - t0) / 2);  // two warm-up rounds
  }
  *half_rtt = min_of(t);
  return Status::kOk;
}

// This rank's part of the probe, indices of the closing all-reduce's vector: [0] same-host
// alpha, [1] same-host seconds per byte, [2] inter alpha, [3] inter s/byte, [4] reduction
// seconds per byte; 0 = not measured by this rank. [5] cache bytes (min over ranks, negated for
// the MAX reduction), [6] out-of-cache slowdown, [7] 1 when this rank's measurement failed.
constexpr int kProbeValues = 8;

// Pairs of ring neighbours (0,1), (2,3), ...; with n odd the last position sits out. Then
// (1,2), (3,4), ... so that a ring crossing hosts at an odd position is measured too.
// A failure stops this rank's measuring (its partner may be left waiting in a round trip:
// only a transport error does that, and the watchdog reports it) but not its part in the
// closing all-reduce, which tells every rank that one failed.
Status measure_links(MPI_Comm comm, const std::vector<int>& ring,
                     const std::vector<int>& host_of_rank, int rank, const Clock& clock,
                     const WaitPolicy& w, double* mine) {
  const int n = static_cast<int>(ring.size());
  const int pos = static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
  auto host = [&](int r) { return host_of_rank.empty() ? 0 : host_of_rank[r]; };
  std::vector<uint8_t> buf(kBandwidthBytes, 1);
  for (int shift = 0; shift < 2 && n > 1; ++shift) {
    const int rel = pos - shift;
    if (rel < 0) continue;
    const int partner_pos = rel % 2 == 0 ? pos + 1 : pos - 1;
    if (partner_pos < shift || partner_pos >= n) continue;
    const int peer = ring[partner_pos];
    const bool first = rel % 2 == 0;
    double lat = 0, big = 0;
    SKIPRING_RETURN_IF_ERROR(ping_pong(comm, peer, first, &buf, 8, kLatencyIters, clock, w, &lat));
    SKIPRING_RETURN_IF_ERROR(
        ping_pong(comm, peer, first, &buf, kBandwidthBytes, kBandwidthIters, clock, w, &big));
    const double per_byte = std::max(big - lat, 1e-12) / kBandwidthBytes;
    const int slot = host(peer) == host(rank) ? 0 : 2;
    mine[slot] = std::max(mine[slot], lat);
    mine[slot + 1] = std::max(mine[slot + 1], per_byte);
  }
  return Status::kOk;
}

// The reduction kernel's rate in cache (mine[4]) and its slowdown out of cache (mine[5], [6]).
Status measure_reduction(const Clock& clock, double* mine) {
  Status failed = Status::kOk;
  {
    const size_t count = kBandwidthBytes / sizeof(float);
    std::vector<float> a(count, 1.0f), b(count, 2.0f), d(count);
    std::vector<double> t;
    for (int i = 0; i < 5 && ok(failed); ++i) {
      const double t0 = clock.now();
      failed = reduce(ROp::kSum, DType::kFloat, d.data(), a.data(), b.data(), count);
      t.push_back(clock.now() - t0);
    }
    mine[4] = median(t) / kBandwidthBytes;
  }
  if (!ok(failed)) return failed;
  // A core's L2 (the segmented ring stays inside it); the reduction's slowdown on arrays four
  // times that size against the in-cache rate above.
  long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  const size_t cache = l2 > 0 ? static_cast<size_t>(l2) : size_t{1} << 20;
  const size_t count = 4 * cache / sizeof(float);
  std::vector<float> a(count, 1.0f), b(count, 2.0f), d(count, 0.0f);
  std::vector<double> t;
  for (int i = 0; i < 3 && ok(failed); ++i) {
    const double t0 = clock.now();
    failed = reduce(ROp::kSum, DType::kFloat, d.data(), a.data(), b.data(), count);
    t.push_back(clock.now() - t0);
  }
  mine[5] = -static_cast<double>(cache);
  mine[6] = mine[4] > 0 ? std::max(1.0, median(t) / (count * sizeof(float)) / mine[4]) : 1.0;
  return failed;
}

// The parameters from the closing all-reduce's maxima, SKIPRING_MODEL_* replacing measured ones.
CostParams params_from(const std::vector<double>& all, const Config& cfg) {
  CostParams p;  // defaults where nothing was measured (n == 1)
  if (all[0] > 0) p.alpha_s = all[0];
  if (all[1] > 0) p.beta_s = all[1];
  p.inter_alpha_s = all[2] > 0 ? all[2] : p.alpha_s;
  p.inter_beta_s = all[3] > 0 ? all[3] : p.beta_s;
  if (all[4] > 0) p.gamma_s = all[4];
#ifdef SKIPRING_SIMGRID
  // Under SMPI the kernel takes no simulated time; the engine charges reductions at
  // SKIPRING_SIM_REDUCE_GBPS, which is then the rate to model.
  p.gamma_s = 1.0 / (cfg.sim_reduce_gbps * 1e9);
  p.mem_slowdown = 1.0;
#endif
  if (all[5] < 0) p.cache_bytes = -all[5];
  p.mem_slowdown = std::max(1.0, all[6]);
  if (cfg.model_lat_us > 0) p.alpha_s = p.inter_alpha_s = cfg.model_lat_us * 1e-6;
  if (cfg.model_gbps > 0) p.beta_s = p.inter_beta_s = 1.0 / (cfg.model_gbps * 1e9);
  if (cfg.model_reduce_gbps > 0) p.gamma_s = 1.0 / (cfg.model_reduce_gbps * 1e9);
  return p;
}

}  // namespace

Status measure_cost_params(MPI_Comm comm, const std::vector<int>& ring,
                           const std::vector<int>& host_of_rank, const Config& cfg,
                           const Clock& clock, CostParams* out) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  double mine[kProbeValues] = {0, 0, 0, 0, 0, 0, 0, 0};
  WaitPolicy w = wait_policy(cfg, &clock);
  w.spins = 0;
  {
    // Everyone here before any pair starts, waiting without spinning: a rank that arrived
    // early (a late rank's neighbours) would otherwise spin in its first round trip or in the
    // final all-reduce on a core the probing pairs need.
    MPI_Request req;
    SKIPRING_RETURN_IF_ERROR(wait_collectives(
        MPI_Ibarrier(comm, &req), &req, 1, w,
        probe_step("communicator setup: the cost model's opening barrier"), nullptr));
  }
  Status failed = measure_links(comm, ring, host_of_rank, rank, clock, w, mine);
  if (ok(failed)) failed = measure_reduction(clock, mine);
  mine[7] = ok(failed) ? 0 : 1;
  // Vectors: a timeout leaves the all-reduce pending, and its buffers are then leaked.
  std::vector<double> send(mine, mine + kProbeValues), all(kProbeValues, 0.0);
  {
    MPI_Request req;
    SKIPRING_RETURN_IF_ERROR(wait_collectives(
        PMPI_Iallreduce(send.data(), all.data(), kProbeValues, MPI_DOUBLE, MPI_MAX, comm, &req),
        &req, 1, w, probe_step("communicator setup: the cost model's closing all-reduce"), nullptr,
        &send, &all));
  }
  if (all[7] != 0) return ok(failed) ? Status::kErrTransport : failed;
  *out = params_from(all, cfg);
  return Status::kOk;
}

}  // namespace skipring
