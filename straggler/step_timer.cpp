// StepTimer: ring buffers of wait observations, their medians, and a trimmed least-squares fit of
// latency + bytes / bandwidth.
#include "straggler/step_timer.h"

#include <algorithm>
#include <cmath>

namespace skipring {
namespace {

constexpr int kMinObservations = 3;
constexpr int kSamplesPerWindow = 4;  // transfer-fit history = kSamplesPerWindow * window
constexpr int kMaxTrimRounds = 4;
constexpr double kMadToSigma = 1.4826;  // MAD of a normal distribution -> standard deviation
constexpr double kTrimSigmas = 3.0;

// Median of v[0..n) (n > 0); reorders v.
double median_of(double* v, int n) {
  double* mid = v + n / 2;
  std::nth_element(v, mid, v + n);
  double hi = *mid;
  if (n % 2 == 1) return hi;
  double lo = *std::max_element(v, mid);
  return 0.5 * (lo + hi);
}

}  // namespace

StepTimer::StepTimer(int window) : window_(std::max(window, kMinObservations)) {
  samples_.resize(static_cast<size_t>(kSamplesPerWindow) * window_);
  scratch_.resize(samples_.size());
  keep_.resize(samples_.size());
  neighbours_.reserve(2);
}

const StepTimer::Neighbour* StepTimer::find(int rank) const {
  for (const auto& nb : neighbours_) {
    if (nb.rank == rank) return &nb;
  }
  return nullptr;
}

StepTimer::Neighbour* StepTimer::entry(int rank) {
  for (auto& candidate : neighbours_) {
    if (candidate.rank == rank) return &candidate;
  }
  neighbours_.emplace_back();
  Neighbour* nb = &neighbours_.back();
  nb->rank = rank;
  nb->waits.resize(window_);
  return nb;
}

void StepTimer::observe_behind(int neighbour) { entry(neighbour)->behind = true; }

bool StepTimer::seen_behind(int neighbour) const {
  const Neighbour* nb = find(neighbour);
  return nb != nullptr && nb->behind;
}

void StepTimer::observe(int neighbour, double wait_s, size_t bytes) {
  if (!std::isfinite(wait_s)) return;
  if (wait_s < 0) wait_s = 0;
  Neighbour* nb = entry(neighbour);
  nb->waits[nb->head] = wait_s;
  nb->head = (nb->head + 1) % window_;
  if (nb->count < window_) ++nb->count;

  const int cap = static_cast<int>(samples_.size());
  samples_[samples_head_] = Sample{static_cast<double>(bytes), wait_s};
  samples_head_ = (samples_head_ + 1) % cap;
  if (samples_count_ < cap) ++samples_count_;
}

int StepTimer::count(int neighbour) const {
  const Neighbour* nb = find(neighbour);
  return nb == nullptr ? 0 : nb->count;
}

double StepTimer::typical(int neighbour, double fallback) const {
  const Neighbour* nb = find(neighbour);
  if (nb == nullptr || nb->count == 0) return fallback;
  // The ring holds exactly the last `count` observations in its first `count` slots until it
  // wraps, and all `window` slots after that: order does not matter for a maximum or a median.
  if (nb->count < kMinObservations) {
    return std::min(fallback, *std::max_element(nb->waits.begin(), nb->waits.begin() + nb->count));
  }
  std::copy(nb->waits.begin(), nb->waits.begin() + nb->count, scratch_.begin());
  return median_of(scratch_.data(), nb->count);
}

double StepTimer::transfer(size_t bytes, double fallback) const {
  const int n = samples_count_;
  if (n < kMinObservations) return fallback;
  const double x = static_cast<double>(bytes);
  std::fill(keep_.begin(), keep_.begin() + n, 1);

  double latency = 0;
  double per_byte = 0;
  for (int round = 0; round < kMaxTrimRounds; ++round) {
    int m = 0;
    double mx = 0, my = 0;
    for (int i = 0; i < n; ++i) {
      if (!keep_[i]) continue;
      mx += samples_[i].bytes;
      my += samples_[i].seconds;
      ++m;
    }
    mx /= m;
    my /= m;
    double sxx = 0, sxy = 0;
    for (int i = 0; i < n; ++i) {
      if (!keep_[i]) continue;
      const double dx = samples_[i].bytes - mx;
      sxx += dx * dx;
      sxy += dx * (samples_[i].seconds - my);
    }
    if (sxx <= 1e-12 * std::max(mx * mx, 1.0) * m) {
      // One piece size only: latency and bandwidth are not separable; scale the median time.
      int k = 0;
      for (int i = 0; i < n; ++i) {
        if (keep_[i]) scratch_[k++] = samples_[i].seconds;
      }
      const double t = median_of(scratch_.data(), k);
      return std::max(0.0, mx > 0 ? t * (x / mx) : t);
    }
    per_byte = sxy / sxx;
    latency = my - per_byte * mx;
    if (round + 1 == kMaxTrimRounds) break;

    // Trim points whose residual is far outside the bulk (straggler waits), then refit.
    int k = 0;
    for (int i = 0; i < n; ++i) {
      if (!keep_[i]) continue;
      scratch_[k++] = std::fabs(samples_[i].seconds - (latency + per_byte * samples_[i].bytes));
    }
    const double mad = median_of(scratch_.data(), k);
    const double cutoff = std::max({kTrimSigmas * kMadToSigma * mad, 1e-3 * std::fabs(my), 1e-9});
    int removed = 0;
    for (int i = 0; i < n; ++i) {
      if (keep_[i] &&
          std::fabs(samples_[i].seconds - (latency + per_byte * samples_[i].bytes)) > cutoff) {
        ++removed;
      }
    }
    if (removed == 0 || m - removed < kMinObservations) break;
    for (int i = 0; i < n; ++i) {
      if (keep_[i] &&
          std::fabs(samples_[i].seconds - (latency + per_byte * samples_[i].bytes)) > cutoff) {
        keep_[i] = 0;
      }
    }
  }

  if (per_byte < 0) {
    // Noise made larger pieces look faster: fall back to a constant, the median kept time.
    int k = 0;
    for (int i = 0; i < n; ++i) {
      if (keep_[i]) scratch_[k++] = samples_[i].seconds;
    }
    return std::max(0.0, median_of(scratch_.data(), k));
  }
  return std::max(0.0, latency + per_byte * x);
}

double StepTimer::threshold(int neighbour, size_t bytes, const ThresholdParams& p) const {
  double T = p.fixed_T_s;
  if (!(T > 0)) {
    const double prior =
        count(neighbour) == 0 && seen_behind(neighbour) ? p.behind_T_s : p.fallback_T_s;
    T = std::max(p.link_s, typical(neighbour, std::max(p.link_s, prior)));
  }
  const double trans = p.fixed_trans_s > 0
                           ? p.fixed_trans_s
                           : transfer(bytes, static_cast<double>(bytes) / p.fallback_bytes_per_s);
  return std::max(p.min_wait_s, p.alpha * T + trans);
}

void StepTimer::reset() {
  for (auto& nb : neighbours_) {
    nb.head = 0;
    nb.count = 0;
    nb.behind = false;
  }
  samples_head_ = 0;
  samples_count_ = 0;
}

}  // namespace skipring
