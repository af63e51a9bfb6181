// The per-communicator straggler memory: the skip threshold (StepTimer's per-predecessor step
// times with the link floor and the priors), the straggler agreement of SKIPRING_AUTO_STRAGGLER
// and this rank's lateness observations, and what the late chain remembers between calls.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "collectives/late_chain.h"
#include "collectives/select.h"
#include "runtime/communicator.h"
#include "runtime/log.h"
#include "runtime/mpi_wait.h"

namespace skipring {
namespace {
// Auto all-reduces between two straggler agreements (SKIPRING_AUTO_STRAGGLER): one 1-int
// all-reduce per this many calls while no late arrival has been agreed on.
constexpr uint64_t kStragglerAgreeEvery = 8;
}  // namespace

double Communicator::skip_threshold(size_t segment_bytes, size_t bytes) {
  // alpha * T + T_trans with T the normal time a ring piece takes to arrive, counted from when
  // the receiver's timer starts (RingAllreduce::skip_deadline): the longest wait of the pieces
  // not skipped, median over recent collectives (StepTimer). T is never below what the
  // measured link makes of the pieces in flight: the ring keeps depth/2 pieces in flight per
  // link, which share its bandwidth, so the first of a block arrives after
  // latency + depth/2 * segment * beta. Without that floor the first collectives (T = 1 ms
  // before any history) skipped every healthy predecessor across 1 Gbit/s hosts (a 256 KiB
  // piece alone takes 2.1 ms there, four in flight 8.4 ms), and T, learnt only from pieces
  // not skipped, stayed below the real piece time (measured: 24-32 skips per rank and
  // 16 MiB all-reduce, skip-ahead 1.5x the plain ring, on 4 emulated hosts).
  // Before 3 collectives of history T is the longest wait seen, at most the prior; with no
  // history it is the prior. From a predecessor on another host the prior is the modelled time
  // of one whole ring step of this collective on that link (latency + bytes/n * beta), or 1 ms
  // if more: with the link floor as the prior (until 3 observations) the first three
  // skip-ahead collectives across hosts skipped healthy predecessors (4 emulated hosts at
  // 1 Gbit/s, no straggler, 11 ms threshold against the 31-65 ms learnt later: 21-29, 0-3 and
  // 0-7 skips per rank at 16 MiB; 128/32/17 at 64 MiB, 1.60/1.26/1.19 s against 0.86 s);
  // with it, none. The cost: a straggler in the very first collective across hosts is skipped
  // only when later than about alpha whole steps. On one host, and for a predecessor seen
  // behind in a collective (RingAllreduce::record_piece_waits learns nothing then) and never
  // observed, the prior is the link floor or 1 ms (the oversubscription floor covers a
  // descheduled rank): a straggler's normal time cannot be learnt while it straggles, and the
  // step prior follows the cost probe's bandwidth, which on 4 ranks / 2 cores measured
  // 1.4-6.3 GB/s between runs (at 1.5 GB/s a 22 ms threshold: a 50 ms late rank's successor
  // skipped 8-12 pieces per call instead of 128, 1.05-1.19x the plain ring, in 3 of 10 runs
  // and 4 of 6 with the model's bandwidth set to 1.5 GB/s). The formula itself is
  // StepTimer::threshold's.
  // Hosts joined by sockets cut the ring's segments to kSocketSegmentBytes for the transport's
  // sake (no rendezvous per message: cross_host_segment_bytes); a healthy predecessor pauses as
  // long as before (a descheduled rank, a reduction on a shared core), so the threshold keeps
  // the piece the ring would have without the cut. With the 60 KiB piece in the link floor
  // (2 ms instead of 4.2-8.4 at 1 Gbit/s) and, in a first version, every cross-host segment cut,
  // skip-ahead across 4 emulated hosts on 2 cores, no straggler, skipped healthy ranks 526-726
  // times in a run of 1-64 MiB (8 calls per size) and took 1.16-1.21 s at 64 MiB against the
  // plain ring's 0.92; with the floor kept, 4 skips, 0.95 s.
  if (model_.topo.socket_links && model_.topo.hosts > 1) {
    const size_t chunk = bytes / static_cast<size_t>(std::max(1, size_)) + 1;
    segment_bytes = std::max(
        segment_bytes,
        std::min(chunk, cross_host_segment_bytes(cfg_.segment_bytes, chunk,
                                                 static_cast<size_t>(model_.topo.hosts), false)));
  }
  const int pred = ring_[(pos_in_ring() - 1 + size_) % size_];
  ThresholdParams tp;
  tp.alpha = cfg_.alpha;
  tp.min_wait_s = straggler_.skip_floor_s;
  tp.fixed_T_s = cfg_.skip_t_us > 0 ? cfg_.skip_t_us * 1e-6 : 0;
  tp.fixed_trans_s = cfg_.skip_ttrans_us > 0 ? cfg_.skip_ttrans_us * 1e-6 : 0;
  if (cfg_.skip_t_us <= 0) {
    // Collective: every rank gets here at the same call (SKIPRING_SKIP_T_US given or not is
    // agreed at setup). On failure the communicator is broken; the caller checks.
    if (!ok(ensure_cost_params())) return tp.min_wait_s;
    const auto& host = topology_.host_of_rank;
    const bool same_host = host.empty() || host[pred] == host[rank_];
    const double lat = same_host ? model_.cost.alpha_s : model_.cost.inter_alpha_s;
    const double beta = same_host ? model_.cost.beta_s : model_.cost.inter_beta_s;
    const double in_flight = std::max(1, cfg_.pipeline_depth / 2);
    tp.link_s = lat + in_flight * static_cast<double>(segment_bytes) * beta;
    if (!same_host) {
      const double chunk = std::ceil(static_cast<double>(bytes) / std::max(1, size_));
      tp.fallback_T_s = std::max(tp.behind_T_s, lat + chunk * beta);
    }
  }
  return straggler_.timer.threshold(pred, segment_bytes, tp);
}

Status Communicator::agree_stragglers() {
  if (++straggler_.auto_calls % kStragglerAgreeEvery != 0) return Status::kOk;
  // One int under MAX: did any rank see a late arrival since the last agreement? Every rank
  // gets here at the same auto all-reduce, and all get the same answer.
  std::vector<int> mine(1, straggler_.local_late ? 1 : 0), all(1, 0);
  WaitWhat w;
  w.what = "the straggler agreement of SKIPRING_AUTO_STRAGGLER before the all-reduce";
  w.seq = static_cast<int64_t>(front_.seq);
  MPI_Request req;
  const Status st = wait_collectives(
      PMPI_Iallreduce(mine.data(), all.data(), 1, MPI_INT, MPI_MAX, internal_.comm, &req), &req, 1,
      wait_, w, nullptr, &mine, &all);
  if (!ok(st)) {
    note_error(st, front_.seq, "the straggler agreement (SKIPRING_AUTO_STRAGGLER) failed");
    return st;
  }
  if (all[0] != 0) {
    straggler_.seen = true;
    choice_.forget();  // decide again with the skip-ahead preference
    bump_front();
    if (rank_ == 0) {
      SKIPRING_LOG_INFO(
          "auto: late arrivals seen on this communicator (before all-reduce #{}): skip-ahead "
          "preferred where it costs at most {}x the cheapest (SKIPRING_AUTO_STRAGGLER)",
          front_.seq, cfg_.auto_straggler);
    }
  }
  return Status::kOk;
}

void Communicator::observe_lateness(Algo algo, size_t bytes, bool skipped) {
  if (straggler_.local_late) return;
  if (skipped) {
    // Skip-ahead met a late predecessor (the threshold already separates it from noise).
    straggler_.local_late = last_stats_.skips > 0 || last_stats_.late_pieces > 0;
    return;
  }
  // Any other algorithm: this rank waited for someone when the collective took longer than
  // SKIPRING_ALPHA times its modelled time plus the skip threshold's floor (the same margin
  // skip-ahead uses before it calls a predecessor late).
  const double model = algo_cost(algo, bytes, model_.topo, model_.cost, cfg_.segment_bytes);
  if (std::isfinite(model) && last_stats_.time_s() > cfg_.alpha * model + straggler_.skip_floor_s) {
    straggler_.local_late = true;
  }
}

void Communicator::remember_allreduce(Algo algo, size_t bytes, size_t seg_bytes,
                                      const LateChainAllreduce* chain, const LatePlan& plan) {
  StragglerMemory& m = straggler_;
  if (plan.rested) {
    m.census.after_rest();
    start_rest_agreement(plan.wait_s);
  }
  if (chain != nullptr) {
    // The memory for the next census: the coordinator's measurements, or what the decision
    // says (who was taken out), and who coordinates next (the decision's, on every rank).
    m.late_seen_s = chain->lateness();
    if (m.late_seen_s.empty() && chain->decided()) {
      m.late_seen_s.assign(static_cast<size_t>(size_), 0.0);
      for (int r : chain->excluded()) m.late_seen_s[r] = std::numeric_limits<double>::infinity();
    }
    if (chain->decided()) {
      m.late_coord = chain->next_coordinator();
      m.late_my_wait_s = chain->decision_wait();
      m.late_wait_coord = chain->coordinator();
      m.late_excluded_counts.resize(static_cast<size_t>(size_), 0);
      for (int r : chain->excluded()) ++m.late_excluded_counts[r];
      m.late_streak = next_streak(m.late_streak, chain->excluded(), size_);
      m.census.after_census(!chain->excluded().empty());
      remember_period(chain->excluded());
    }
    if (last_stats_.late_excluded == 0) {
      // The coordinator (the only rank whose waits count) times from the last arrival: a rank
      // kept in and late must not make the usual time look longer (a first call slowed by
      // connection setup neither: the minimum forgets it).
      double t = last_stats_.time_s();
      if (!m.late_seen_s.empty()) {
        t -= std::max(0.0, *std::max_element(m.late_seen_s.begin(), m.late_seen_s.end()));
      }
      auto it = m.fastest_s.try_emplace(bytes, t).first;
      it->second = std::min(it->second, t);
    }
  }
  if (straggler_watch()) observe_lateness(algo, bytes, params_.skip);
  if (params_.skip) {
    const int pred = ring_[(pos_in_ring() - 1 + size_) % size_];
    if (last_stats_.rs_piece_wait_max > 0) {
      m.timer.observe(pred, last_stats_.rs_piece_wait_max, seg_bytes);
    } else if (last_stats_.pred_behind) {
      m.timer.observe_behind(pred);
    }
  }
}

void Communicator::start_rest_agreement(double wait_s) {
  StragglerMemory::RestAgreement a;
  // How late someone came: the longest any rank waited, from its own start, for its ring
  // predecessor's first piece (a late rank's successor waits about its lateness; the ring's
  // steps after that do not count, so a call slowed by the links or the machine is no late
  // arrival: timing the whole call against the usual time, as 51f2a20 did, took a 15 ms hiccup
  // of every rank's transfers for a straggler, and the take-out broke a learnt period). The
  // census compares a rank's lateness with its coordinator's wait, and so does this: only the
  // coordinator gives its wait (each rank has its own: it derives it from its own usual time),
  // and every rank reads the same pair. (Comparing an agreed time with each rank's own wait
  // made the ranks' backoffs disagree, and the next calls' plans with them: a hang.)
  // MAXLOC also names the late rank (the predecessor), so that the take-out counts in a period's
  // streak like a census's (period_first).
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  const int pred = ring_[(pos_in_ring() - 1 + size_) % size_];
  a.mine[0] = {last_stats_.pred_first_s >= 0 ? last_stats_.pred_first_s : kNone, pred};
  const int coord = straggler_.late_coord >= 0 ? straggler_.late_coord : ring_[0];
  a.mine[1] = {rank_ == coord ? wait_s : kNone, rank_};
  a.call = straggler_.census.calls;
  a.seq = last_stats_.seq;
  const int rc = PMPI_Iallreduce(a.mine.data(), a.all.data(), 2, MPI_DOUBLE_INT, MPI_MAXLOC,
                                 internal_.comm, &a.req);
  if (rc != MPI_SUCCESS) {
    note_error(Status::kErrTransport, front_.seq,
               "the census's agreement after a rested call failed");
    return;
  }
  straggler_.rest_agreements.push_back(std::move(a));
}

Status Communicator::read_rest_agreements(bool all) {
  auto& q = straggler_.rest_agreements;
  CensusBackoff& b = straggler_.census;
  while (!q.empty() && (all || b.calls + 1 >= q.front().call + kRestAgreementLag)) {
    StragglerMemory::RestAgreement& a = q.front();
    WaitWhat w;
    w.what = "the census's agreement on a rested call's lateness";
    w.seq = static_cast<int64_t>(a.seq);
    const Status st = wait_collectives(MPI_SUCCESS, &a.req, 1, wait_, w, nullptr, &a.mine, &a.all);
    if (!ok(st)) {
      note_error(st, front_.seq, "the census's agreement after a rested call failed");
      q.pop_front();
      return st;
    }
    // The rested call was number a.call - 1 of the backoff's count, the next call is b.calls.
    const auto ago = static_cast<uint32_t>(std::min<uint64_t>(b.calls + 1 - a.call, UINT32_MAX));
    const double late = a.all[0].value, wait = a.all[1].value;
    if (!all && std::isfinite(late) && std::isfinite(wait) && late > wait) {
      b.saw_late_rest(ago);
      const int who = a.all[0].rank;
      straggler_.period_first.clear();
      if (who >= 0 && who < size_) straggler_.period_first.push_back(who);
      SKIPRING_LOG_DEBUG(
          "allreduce seq {}: in the rested call seq {} rank {} came {:.1f} ms after its ring "
          "successor, past the census's wait of {:.1f} ms: counted as a take-out",
          front_.seq, a.seq, who, late * 1e3, wait * 1e3);
    }
    q.pop_front();
  }
  return Status::kOk;
}

void Communicator::remember_period(const std::vector<int>& excluded) {
  StragglerMemory& m = straggler_;
  if (m.census.period == 0) {
    m.period_seen_s.clear();
    m.period_streak.clear();
    if (!excluded.empty()) m.period_first = excluded;
    return;
  }
  if (excluded.empty()) return;  // a quiet census between the period's take-outs
  // The period was learnt at this take-out, from the gap to the last one: that one counts too.
  if (m.period_streak.empty() && !m.period_first.empty()) {
    m.period_streak = next_streak({}, m.period_first, size_);
  }
  m.period_first.clear();
  // A take-out on the period: its streak goes on across the quiet calls in between.
  m.period_streak = next_streak(m.period_streak, excluded, size_);
  m.period_seen_s = m.late_seen_s;
}

}  // namespace skipring
