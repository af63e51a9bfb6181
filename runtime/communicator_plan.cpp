// Algorithm planning on a communicator: auto's choice per call (the cost model's, with the
// straggler preference of SKIPRING_AUTO_STRAGGLER) and the late path's plan for a skip-ahead
// ring (collectives/late_plan.h), both from values every rank agrees on.
#include <cmath>

#include "collectives/late_plan.h"
#include "collectives/select.h"
#include "runtime/communicator.h"

namespace skipring {

Algo Communicator::choose_algo(size_t bytes) {
  if (cfg_.algo != Algo::kAuto) return cfg_.algo;
  // Applications repeat sizes: the last decision is kept (the model costs ~100 ns per call,
  // as much as a third of an 8-byte all-reduce on shared memory).
  const auto decide = [&]() {
    if (choice_.holds(bytes, cfg_.skip)) return true;
    if (!ok(ensure_cost_params())) return false;  // broken: the caller checks
    choice_.algo = select_algo_stragglers(bytes, model_.topo, model_.cost, cfg_.segment_bytes,
                                          cfg_.skip, straggler_.seen, cfg_.auto_straggler, nullptr,
                                          cfg_.skip_min_wait_us * 1e-6);
    choice_.bytes = bytes;
    choice_.skip = cfg_.skip;
    bump_front();
    return true;
  };
  if (!decide()) return Algo::kRing;
  // The straggler agreement is collective: every rank made the same choice for this call, so
  // every rank counts the same engine all-reduces. Recursive doubling (the small sizes' direct
  // path) is neither watched nor counted: an agreement every few calls there would add a small
  // all-reduce's latency to them. An agreement that turns the preference on drops the cached
  // choice (agree_stragglers), so decide() runs again. Broken on failure.
  if (choice_.algo != Algo::kRd && choice_.algo != Algo::kMpi && straggler_watch()) {
    if (!ok(agree_stragglers()) || !decide()) return Algo::kRing;
  }
  return choice_.algo;
}

// The late chain's reference time for a size: the fastest call of this size seen here with
// nobody taken out, the cost model's time before any (0 where it has none).
double Communicator::late_usual_time_s(size_t bytes) const {
  const auto it = straggler_.fastest_s.find(bytes);
  const double t = it != straggler_.fastest_s.end() ? it->second
                                                    : algo_cost(Algo::kSkipRing, bytes, model_.topo,
                                                                model_.cost, cfg_.segment_bytes);
  return std::isfinite(t) ? t : 0;
}

// The late path's plan for this call (collectives/late_plan.h) from the agreed configuration,
// size, topology and cost model and this communicator's memory.
LatePlan Communicator::plan_late(Algo algo, size_t bytes) const {
  LatePlanInput li;
  li.skip = true;
  li.skipring = true;
  li.bytes = bytes;
  li.n = size_;
  li.hosts = model_.topo.hosts;
  li.late_chain = cfg_.late_chain;
  li.late_wait_us = cfg_.late_wait_us;
  li.late_wait_suspect_us = cfg_.late_wait_suspect_us;
  li.late_segment_bytes = cfg_.late_segment_bytes;
  li.late_inflight = cfg_.late_inflight;
  li.segment_bytes = cfg_.segment_bytes;
  li.census_s = 2 * model_.cost.inter_alpha_s + 2.0 * size_ * model_.cost.sigma_s;
  li.skip_floor_s = straggler_.skip_floor_s;
  li.suspect_floor_s = cfg_.skip_min_wait_us * 1e-6;
  li.census_rest = straggler_.census.rests();
  if (cfg_.late_chain != 0) {  // the models only where they are read
    li.ring_model_s = algo_cost(algo, bytes, model_.topo, model_.cost, cfg_.segment_bytes);
    li.usual_s = late_usual_time_s(bytes);
  }
  return plan_late_path(li);
}

}  // namespace skipring
