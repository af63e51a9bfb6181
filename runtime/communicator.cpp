// The all-reduce entry point: picks the algorithm (communicator_plan.cpp), then runs it: the
// MPI library's all-reduce (communicator_mpi.cpp), recursive doubling straight on MPI
// (runtime/rd_direct.h), or a core of the algorithm table on the progress engine, with
// skip-ahead, the late path and straggler injection (communicator_straggler.cpp keeps what the
// calls teach).
#include "runtime/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/late_chain.h"
#include "collectives/late_plan.h"
#include "collectives/ring_allreduce.h"
#include "collectives/select.h"
#include "runtime/log.h"
#include "runtime/rd_direct.h"

namespace skipring {

Status Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype,
                               ROp op) {
  if (broken_.on) return refuse_broken("allreduce");
  // The ring order and sizes were checked at creation; the C API checked op, type and buffers.
  if (!op_valid(op, dtype)) return Status::kErrOp;
  if (cfg_.check) {
    SKIPRING_RETURN_IF_ERROR(agree_call("allreduce", count, dtype, static_cast<int>(op), -1));
  }
  RingParams& p = params_;
  p.count = count;
  p.dtype = dtype;
  p.op = op;
  p.sendbuf = sendbuf;
  p.recvbuf = recvbuf;
  p.seq = static_cast<uint32_t>(front_.seq);
  const size_t bytes = count * dtype_size(dtype);
  // The `mpi` row runs the direct recursive doubling for what MPI cannot reduce right
  // (mpi_runs): every rank decides alike (agreed type and op).
  const Algo chosen = choose_algo(bytes);
  const Algo algo = chosen == Algo::kMpi && !mpi_runs(dtype, op) ? Algo::kRd : chosen;
  const size_t seg_bytes = plan_segments(algo, bytes, dtype);
  if (broken_.on) return refuse_broken("allreduce");  // the cost model's measurement failed
  if (algo == Algo::kRd && bytes > static_cast<size_t>(INT32_MAX)) {
    // Recursive doubling sends the whole vector in one MPI message, whose count is an int.
    // Local: every rank with this count stops here before sending anything.
    SKIPRING_LOG_ERROR(
        "allreduce #{}: {} elements of {} bytes ({} bytes) exceed what recursive doubling can "
        "send in one MPI message ({} bytes); use another SKIPRING_ALGO for this size",
        front_.seq, count, dtype_size(dtype), bytes, INT32_MAX);
    return Status::kErrCount;
  }
  // The MPI library's own all-reduce (runtime/communicator_mpi.cpp): auto picks it at small
  // sizes where the measured cost model finds it faster.
  if (algo == Algo::kMpi) return mpi_allreduce(sendbuf, recvbuf, count, dtype, op);
  // Recursive doubling with nothing asking for per-step records on any rank (agreed at setup):
  // straight on MPI (runtime/rd_direct.h), without the core's per-message headers and action
  // lists.
  if (algo == Algo::kRd && !any_records_ && inject_.empty() && !cfg_.check) {
    return rd_direct(sendbuf, recvbuf, count, dtype, op, bytes);
  }
  return engine_allreduce(algo, bytes, seg_bytes);
}

size_t Communicator::plan_segments(Algo algo, size_t bytes, DType dtype) {
  RingParams& p = params_;
  const size_t chunk_bytes = bytes / std::max(1, size_) + dtype_size(dtype);
  // The ring's segments (skip-ahead or not) across hosts: at least 8 per chunk where that keeps
  // them at 128 KiB or more, 60 KiB over sockets (cross_host_segment_bytes), and the lead-in
  // (RingLayout). Every rank derives them from the agreed count and topology.
  const bool ring = algo == Algo::kRing || algo == Algo::kSkipRing;
  p.socket_links = model_.topo.socket_links;
  p.segment_bytes =
      ring ? cross_host_segment_bytes(cfg_.segment_bytes, chunk_bytes,
                                      static_cast<size_t>(model_.topo.hosts), p.socket_links)
           : cfg_.segment_bytes;
  p.lead_in = ring && model_.topo.hosts > 1;
  return std::min(chunk_bytes, p.segment_bytes);
}

Status Communicator::rd_direct(const void* sendbuf, void* recvbuf, size_t count, DType dtype,
                               ROp op, size_t bytes) {
  // Timed like the engine's collectives (two clock reads, tens of ns), so that time_s in
  // skipring_last_stats, the totals and the PMPI report line cover this path too.
  CollectiveStats& s = begin_stats(bytes, Algo::kRd);
  std::string timeout;
  s.start = clock_->now();
  const Status st = rd_direct_allreduce(internal_.comm, ring_, pos_, sendbuf, recvbuf, count, dtype,
                                        op, &scratch_, wait_, s.seq, &timeout, &s.messages_sent,
                                        &s.messages_received);
  s.end = clock_->now();
  ++front_.seq;
  if (!ok(st)) return collective_failed("allreduce", s.seq, st, timeout, " (recursive doubling)");
  return st;
}

Status Communicator::prepare_engine_call(Algo algo, size_t bytes, size_t seg_bytes,
                                         LatePlan* plan) {
  RingParams& p = params_;
  // Skip-ahead runs in the rows that have it (the ring, also inside hier); "ring" is the ring
  // with skipping off.
  p.skip = cfg_.skip && algo_row(algo).skip_ahead;
  if (p.skip) {
    p.skip_threshold_s = skip_threshold(seg_bytes, bytes);
    if (broken_.on) return refuse_broken("allreduce");
  }
  const bool one_host = model_.topo.hosts == 1;
  p.direct_allgather = cfg_.direct_allgather < 0 ? one_host : cfg_.direct_allgather == 1;
  p.quiet_polls = one_host ? 4 : 1;
  // The late path (collectives/late_chain.h), planned by a pure function of agreed values
  // (collectives/late_plan.h) and the coordinator's memory: every rank decides alike.
  // Only skip-ahead's ring can take the late path: other calls fill no plan input.
  if (p.skip && algo == Algo::kSkipRing && !straggler_.rest_agreements.empty()) {
    SKIPRING_RETURN_IF_ERROR(read_rest_agreements(false));
  }
  *plan = p.skip && algo == Algo::kSkipRing ? plan_late(algo, bytes) : LatePlan{};
  // A call the census rests runs the plain ring (late_plan.h: CensusBackoff says why).
  if (plan->rested) p.skip = false;
  if (plan->late_path) {
    p.late_segment_bytes = plan->segment_bytes;
    p.late_inflight = plan->inflight;
    p.late_wait_s = plan->wait_s;
    const bool periodic = straggler_.census.expected() && !straggler_.period_seen_s.empty();
    p.late_seen_s = periodic ? suspects_seen(straggler_.period_seen_s, straggler_.period_streak)
                             : suspects_seen(straggler_.late_seen_s, straggler_.late_streak);
    p.late_coord = straggler_.late_coord;
    p.late_excluded_counts = straggler_.late_excluded_counts;
    const int coord = late_coordinator(p);
    p.late_my_wait_s = straggler_.late_wait_coord == coord ? straggler_.late_my_wait_s : -1;
    p.late_wait_suspect_s = plan->wait_suspect_s;
  }
  if ((plan->late_path || plan->rested) && logger().should_log(spdlog::level::debug)) {
    std::string extra;
    if (plan->late_path && straggler_.census.expected()) {
      extra =
          fmt::format(" (a periodic straggler expected, every {} calls)", straggler_.census.period);
    }
    std::vector<int> suspects;
    for (size_t r = 0; r < p.late_seen_s.size(); ++r) {
      if (p.late_seen_s[r] > 0) suspects.push_back(static_cast<int>(r));
    }
    if (plan->late_path && !suspects.empty()) {
      extra += fmt::format(", suspects {}", fmt::join(suspects, ","));
    }
    SKIPRING_LOG_DEBUG("allreduce seq {}: {}{}", front_.seq, plan->to_string(), extra);
  }
  SKIPRING_LOG_TRACE("allreduce seq {} bytes {} skip {} threshold {:.6f}s", front_.seq, bytes,
                     p.skip, p.skip_threshold_s);
  // Straggler injection: late arrival here, slow steps through the engine.
  if (!inject_.empty()) {
    const double arrive = inject_.delay(rank_, front_.seq, InjectPoint::kArrive, 0);
    if (arrive > 0) std::this_thread::sleep_for(std::chrono::duration<double>(arrive));
    const uint64_t seq = front_.seq;
    engine_->set_step_delay([this, seq](Phase ph, int step) {
      return inject_.delay(
          rank_, seq,
          ph == Phase::kReduceScatter ? InjectPoint::kReduceScatter : InjectPoint::kAllgather,
          step);
    });
  } else {
    engine_->set_step_delay(nullptr);
  }
  return Status::kOk;
}

Status Communicator::engine_allreduce(Algo algo, size_t bytes, size_t seg_bytes) {
  LatePlan plan;
  SKIPRING_RETURN_IF_ERROR(prepare_engine_call(algo, bytes, seg_bytes, &plan));
  // The algorithm table's factory (collectives/algorithms.h); choose_algo never returns auto.
  const AlgoFactory make = algo_row(algo).make;
  std::unique_ptr<CollectiveCore> core;
  Status st = Status::kOk;
  const LateChainAllreduce* chain_core = nullptr;
  if (plan.late_path) {
    auto c = std::make_unique<LateChainAllreduce>(params_, &scratch_);
    chain_core = c.get();
    core = std::move(c);
  } else {
    st = make != nullptr ? make(algo_ctx_, &core) : Status::kErrInternal;
  }
  if (!ok(st)) {
    const std::string why = fmt::format("allreduce #{}: building {} failed: {}", front_.seq,
                                        algo_name(algo), status_string(st));
    SKIPRING_LOG_ERROR("{}", why);
    note_error(st, front_.seq, why);
    ++front_.seq;
    return st;
  }
  // Every rank of a correct program passes the same count, type and op: the transport checks
  // the senders' before it trusts their sizes (MpiTransport::set_call; reset in
  // finish_collective).
  transport_->set_call(
      call_word(params_.count, static_cast<int>(params_.dtype), static_cast<int>(params_.op)));
  st = finish_collective(core.get(), engine_->run(core.get()), "allreduce", static_cast<int>(algo));
  if (!ok(st)) return st;
  remember_allreduce(algo, bytes, seg_bytes, chain_core, plan);
  return Status::kOk;
}

}  // namespace skipring
