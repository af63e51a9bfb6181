// Per-neighbour estimate of T, the time a ring step normally takes without a straggler, and of the
// transfer time of a piece; together they give the skip-ahead threshold alpha*T + T_trans.
#pragma once

#include <cstddef>
#include <vector>

namespace skipring {

// What the skip-ahead threshold is made of besides the observations (StepTimer::threshold).
struct ThresholdParams {
  double alpha = 0;          // SKIPRING_ALPHA (the driver passes Config::alpha)
  double min_wait_s = 0;     // floor of the threshold
  double fixed_T_s = 0;      // > 0: T given (SKIPRING_SKIP_T_US) instead of learnt
  double fixed_trans_s = 0;  // > 0: T_trans given (SKIPRING_SKIP_TTRANS_US) instead of fitted
  double link_s = 0;         // floor of a learnt T (what the measured link takes for a piece)
  // Learnt T before 3 observations (at least link_s): this with none, the smaller of this and
  // the longest of them with 1 or 2 (StepTimer::typical).
  double fallback_T_s = 1e-3;
  double fallback_bytes_per_s = 1e9;  // T_trans with fewer than 3 observations: bytes / rate
  // T instead of fallback_T_s for a neighbour seen behind (observe_behind) and never observed
  // (at least link_s): its normal time cannot be learnt while it straggles, and the prior
  // may be far above it.
  double behind_T_s = 1e-3;
};

// Not thread-safe: one instance belongs to one progress engine. Storage is allocated when a
// neighbour is first seen (a ring of `window` doubles) and reused after that, including across
// reset(); the const queries use a scratch buffer sized at construction and do not allocate.
class StepTimer {
 public:
  // `window` observations are kept per neighbour (at least 3). The transfer fit keeps the last
  // 4 * window observations of all neighbours together.
  explicit StepTimer(int window = 32);

  // One observation for `neighbour` (a rank): the time from when we were ready for its piece until
  // it arrived (seconds; negative values count as 0, NaN/inf are ignored) and the piece size.
  void observe(int neighbour, double wait_s, size_t bytes);
  // `neighbour` was behind in a collective (late or slow: nothing of it was observed).
  void observe_behind(int neighbour);

  // Median of the last `window` observations of `neighbour` (one straggler step does not inflate
  // it) once there are 3; with 1 or 2 the longest of them, at most `fallback` (the prior: a
  // first collective slowed by connection setup does not raise it); `fallback` with none.
  double typical(int neighbour, double fallback) const;

  // Transfer-time estimate for `bytes`: latency + bytes / bandwidth, fitted by least squares over
  // the observations of all neighbours, with outliers (straggler waits) trimmed and the fit redone;
  // floor 0. When every observation has the same size the latency and bandwidth cannot be told
  // apart and the median time is scaled by bytes / size. `fallback` with fewer than 3 points.
  double transfer(size_t bytes, double fallback) const;

  // The skip-ahead threshold for a piece of `bytes` from `neighbour` (the one implementation;
  // Communicator::skip_threshold supplies p): max(p.min_wait_s, p.alpha * T + T_trans) with
  // T = p.fixed_T_s if > 0, else max(p.link_s, typical(neighbour, max(p.link_s, prior))),
  // prior = p.behind_T_s for a neighbour seen behind and never observed, else p.fallback_T_s;
  // T_trans = p.fixed_trans_s if > 0, else transfer(bytes, bytes / p.fallback_bytes_per_s).
  double threshold(int neighbour, size_t bytes, const ThresholdParams& p) const;

  // Forgets every observation (keeps the storage).
  void reset();

  int window() const { return window_; }
  // Number of observations currently held for `neighbour` (at most window()).
  int count(int neighbour) const;
  // Whether observe_behind was called for `neighbour` since construction or reset().
  bool seen_behind(int neighbour) const;

 private:
  struct Neighbour {
    int rank = -1;
    int head = 0;   // next slot to write
    int count = 0;  // valid slots
    bool behind = false;
    std::vector<double> waits;
  };
  struct Sample {
    double bytes = 0;
    double seconds = 0;
  };

  const Neighbour* find(int rank) const;
  Neighbour* entry(int rank);  // find or add

  int window_;
  std::vector<Neighbour> neighbours_;  // few entries (a ring has one or two neighbours)
  std::vector<Sample> samples_;        // ring of all observations for the transfer fit
  int samples_head_ = 0;
  int samples_count_ = 0;
  // Scratch for the const queries (median, trimming); sized once in the constructor.
  mutable std::vector<double> scratch_;
  mutable std::vector<unsigned char> keep_;
};

}  // namespace skipring
