// Algorithm selection from an alpha-beta-gamma cost model (see select.h).
#include "collectives/select.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "collectives/hier_allreduce.h"

namespace skipring {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int floor_pow2(int n) {
  int p = 1;
  while (2 * p <= n) p *= 2;
  return p;
}

int log2_int(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

// Flat algorithms on a communicator spanning hosts are paced by the inter-host links.
double flat_alpha(const TopologySummary& t, const CostParams& p) {
  return t.hosts > 1 ? std::max(p.alpha_s, p.inter_alpha_s) : p.alpha_s;
}
double flat_beta(const TopologySummary& t, const CostParams& p) {
  return t.hosts > 1 ? std::max(p.beta_s, p.inter_beta_s) : p.beta_s;
}

double rd_cost(double S, int n, double a, double b, double g) {
  const int p = floor_pow2(n);
  const double fold = n > p ? 2 * (a + S * b) + S * g : 0.0;
  return fold + log2_int(p) * (a + S * b + S * g);
}

double rabenseifner_cost(double S, int n, double a, double b, double g) {
  const int p = floor_pow2(n);
  const double fold = n > p ? 2 * (a + S * b) + S * g : 0.0;
  const double frac = static_cast<double>(p - 1) / p;
  return fold + 2 * log2_int(p) * a + 2 * frac * S * b + frac * S * g;
}

// Ring of n ranks: 2(n-1) steps of S/n bytes, each chunk in `segs` pipelined segments whose
// latency overlaps (up to the pipeline depth) but whose engine cost sigma does not. The
// pipeline also overlaps the reduction of one segment with the transfer of the next, so only
// the slower of the two streams counts, plus the last segment's reduction.
// With more busy ranks than cores (overlap false) the transfer and the reduction share the
// CPU and add up.
double ring_cost(double S, int n, double alpha, double sigma, double b, double g, size_t seg,
                 bool overlap) {
  if (n == 1) return 0;
  const double chunk = S / n;
  const double segs = std::max(1.0, std::ceil(chunk / std::max<size_t>(seg, 1)));
  const double steps = 2.0 * (n - 1);
  const double move = steps * chunk * b, add = (n - 1) * chunk * g;
  return steps * (alpha + segs * sigma) + (overlap ? std::max(move, add) : move + add) +
         chunk / segs * g;
}

// Unsegmented algorithms (recursive doubling, Rabenseifner) move and reduce whole messages: once
// the largest one leaves the cache, copies and reductions run at memory speed.
double memory_factor(double largest_message, const CostParams& p) {
  return largest_message > p.cache_bytes ? p.mem_slowdown : 1.0;
}

// Pipelined reduce-to-root then broadcast over `trees` trees of height h sharing the
// aggregate rate R (bytes/s), the data split evenly: per phase (h + k - 1) segment steps with k
// segments per tree; a reduce step also adds about two children's segments.
double tree_cost(double S, int height, double rate, int trees, double a, double g, size_t seg) {
  if (rate <= 0 || height <= 0 || trees <= 0) return kInf;
  const double St = S / trees;
  const double k = std::max(1.0, std::ceil(St / static_cast<double>(std::max<size_t>(seg, 1))));
  const double sz = St / k;
  const double Rt = rate / trees;
  const double steps = height + k - 1;
  return steps * (a + sz / Rt + 2 * sz * g) + steps * (a + sz / Rt);
}

}  // namespace

std::string CostParams::to_string() const {
  std::string out = fmt::format(
      "alpha {:.2f} us, beta {:.3f} GB/s, gamma {:.3f} GB/s, inter-host alpha {:.2f} us, "
      "beta {:.3f} GB/s, engine sigma {:.2f} us, cache {} KiB, out of cache x{:.2f}",
      alpha_s * 1e6, 1e-9 / beta_s, 1e-9 / gamma_s, inter_alpha_s * 1e6, 1e-9 / inter_beta_s,
      sigma_s * 1e6, static_cast<size_t>(cache_bytes) / 1024, mem_slowdown);
  if (std::isfinite(mpi_offset_s[0])) {
    out += ", MPI all-reduce vs direct rd (us):";
    for (int i = 0; i < kMpiProbes; ++i) {
      out += fmt::format(" {} B {:+.2f}", kMpiProbeBytes[i], mpi_offset_s[i] * 1e6);
    }
  }
  return out;
}

const std::vector<Algo>& modelled_algos() {
  static const std::vector<Algo> kAlgos = [] {
    std::vector<const AlgoRow*> rows;
    for (const AlgoRow& r : algo_table()) {
      if (r.select_order > 0) rows.push_back(&r);
    }
    std::stable_sort(rows.begin(), rows.end(), [](const AlgoRow* a, const AlgoRow* b) {
      return a->select_order < b->select_order;
    });
    std::vector<Algo> ids;
    for (const AlgoRow* r : rows) ids.push_back(r->id);
    return ids;
  }();
  return kAlgos;
}

double cost_rd(size_t bytes, const TopologySummary& t, const CostParams& p, size_t) {
  // The direct path: no engine, so no sigma.
  const double S = static_cast<double>(bytes);
  const double m = memory_factor(S, p);
  return rd_cost(S, std::max(1, t.n), flat_alpha(t, p), flat_beta(t, p) * m, p.gamma_s * m);
}

double cost_rabenseifner(size_t bytes, const TopologySummary& t, const CostParams& p, size_t) {
  const double S = static_cast<double>(bytes);
  const double m = memory_factor(S / 2, p);
  return rabenseifner_cost(S, std::max(1, t.n), flat_alpha(t, p) + p.sigma_s, flat_beta(t, p) * m,
                           p.gamma_s * m);
}

double cost_ring(size_t bytes, const TopologySummary& t, const CostParams& p,
                 size_t segment_bytes) {
  return ring_cost(static_cast<double>(bytes), std::max(1, t.n), flat_alpha(t, p), p.sigma_s,
                   flat_beta(t, p), p.gamma_s, segment_bytes, t.overlap);
}

double cost_tree(size_t bytes, const TopologySummary& t, const CostParams& p,
                 size_t segment_bytes) {
  return tree_cost(static_cast<double>(bytes), t.tree1_height, t.tree1_rate_Bps, 1,
                   flat_alpha(t, p) + p.sigma_s, p.gamma_s, segment_bytes);
}

double cost_multitree(size_t bytes, const TopologySummary& t, const CostParams& p,
                      size_t segment_bytes) {
  if (t.trees < 2) return kInf;
  return tree_cost(static_cast<double>(bytes), t.tree_height, t.tree_rate_Bps, t.trees,
                   flat_alpha(t, p) + p.sigma_s, p.gamma_s, segment_bytes);
}

double cost_hier(size_t bytes, const TopologySummary& t, const CostParams& p, size_t) {
  const int n = std::max(1, t.n);
  if (t.hosts < 2 || t.max_local < 2 || t.hosts == n) return kInf;
  HierCostParams h;
  h.alpha_intra = p.alpha_s + p.sigma_s;
  h.beta_intra = p.beta_s;
  h.alpha_inter = p.inter_alpha_s + p.sigma_s;
  h.beta_inter = p.inter_beta_s;
  h.gamma = p.gamma_s;
  std::vector<int> sizes = t.ranks_per_host;
  if (sizes.empty()) sizes.assign(t.hosts, t.max_local);
  return hier_cost(static_cast<double>(bytes), sizes, h);
}

double mpi_offset_at(size_t bytes, const CostParams& p) {
  constexpr int k = CostParams::kMpiProbes;
  if (bytes <= kMpiProbeBytes[0]) return p.mpi_offset_s[0];
  for (int i = 1; i < k; ++i) {
    if (bytes <= kMpiProbeBytes[i]) {
      const double lo = static_cast<double>(kMpiProbeBytes[i - 1]);
      const double hi = static_cast<double>(kMpiProbeBytes[i]);
      const double f = (static_cast<double>(bytes) - lo) / (hi - lo);
      return p.mpi_offset_s[i - 1] + f * (p.mpi_offset_s[i] - p.mpi_offset_s[i - 1]);
    }
  }
  return kInf;
}

double cost_mpi(size_t bytes, const TopologySummary& t, const CostParams& p, size_t seg) {
  const double offset = mpi_offset_at(bytes, p);
  if (!std::isfinite(offset)) return kInf;
  // rd's time plus the measured offset, less kMpiTieShare of rd's: ties go to the MPI library.
  // Never below zero (a measured offset larger than the model's rd time).
  const double rd = cost_rd(bytes, t, p, seg);
  return std::max(0.0, rd * (1 - kMpiTieShare) + offset);
}

double algo_cost(Algo a, size_t bytes, const TopologySummary& t, const CostParams& p,
                 size_t segment_bytes) {
  if (std::max(1, t.n) == 1) return 0;
  const AlgoCostFn cost = algo_row(a).cost;
  return cost != nullptr ? cost(bytes, t, p, segment_bytes) : kInf;
}

Algo select_algo(size_t bytes, const TopologySummary& t, const CostParams& p, size_t segment_bytes,
                 bool skip, double* cost) {
  Algo best = Algo::kRing;
  double best_cost = kInf;
  for (Algo a : modelled_algos()) {
    const double c = algo_cost(a, bytes, t, p, segment_bytes);
    // Strictly cheaper wins: ties keep the earlier (simpler) algorithm.
    if (c < best_cost) {
      best = a;
      best_cost = c;
    }
  }
  if (skip) best = algo_row(best).with_skip;
  if (cost) *cost = best_cost;
  return best;
}

Algo select_algo_stragglers(size_t bytes, const TopologySummary& t, const CostParams& p,
                            size_t segment_bytes, bool skip, bool stragglers_seen, double max_ratio,
                            double* cost, double min_cost_s) {
  double best_cost = kInf;
  const Algo best = select_algo(bytes, t, p, segment_bytes, skip, &best_cost);
  if (cost) *cost = best_cost;
  if (!skip || !stragglers_seen || !(max_ratio >= 1) || algo_row(best).skip_ahead ||
      best_cost < min_cost_s || t.n < 3) {
    return best;
  }
  Algo pick = best;
  double pick_cost = kInf;
  for (Algo a : modelled_algos()) {
    const Algo s = algo_row(a).with_skip;
    if (!algo_row(s).skip_ahead) continue;
    const double c = algo_cost(a, bytes, t, p, segment_bytes);
    if (c < pick_cost) {
      pick = s;
      pick_cost = c;
    }
  }
  if (std::isinf(pick_cost) || pick_cost > max_ratio * best_cost) return best;
  if (cost) *cost = pick_cost;
  return pick;
}

std::string decision_table(const TopologySummary& t, const CostParams& p, size_t segment_bytes,
                           bool skip, size_t max_bytes) {
  std::string out = fmt::format("{:>10}", "bytes");
  for (Algo a : modelled_algos()) out += fmt::format(" {:>13}", algo_name(a));
  out += fmt::format("  {}\n", "auto");
  for (size_t b = 8; b <= max_bytes; b *= 4) {
    out += fmt::format("{:>10}", b);
    for (Algo a : modelled_algos()) {
      const double c = algo_cost(a, b, t, p, segment_bytes);
      out += std::isinf(c) ? fmt::format(" {:>13}", "-") : fmt::format(" {:>13.2f}", c * 1e6);
    }
    out += fmt::format("  {}\n", algo_name(select_algo(b, t, p, segment_bytes, skip)));
  }
  out += "(modelled microseconds; '-': not applicable here)\n";
  return out;
}

}  // namespace skipring
