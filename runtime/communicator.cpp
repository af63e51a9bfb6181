// Communicator implementation: runs one collective through the progress engine.
#include "runtime/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "collectives/recursive_doubling.h"
#include "collectives/ring_allreduce.h"
#include "runtime/log.h"
#include "runtime/progress_engine.h"
#include "topology/ring_order.h"

namespace skipring {
namespace {
// A CFS time slice is a few ms: with more busy ranks than cores a healthy rank is regularly
// off its core that long (measured on 4 ranks / 2 cores: the learnt threshold of 1.6-2 ms
// skipped healthy ranks tens of times per 8 MiB all-reduce, costing 8-19 %).
constexpr double kOversubscribedFloorS = 5e-3;
}  // namespace

Status Communicator::create(MPI_Comm user, const Config& cfg, const InjectPlan& inject,
                            std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> c(new Communicator());
  if (MPI_Comm_dup(user, &c->internal_) != MPI_SUCCESS) return Status::kErrComm;
  MPI_Comm_rank(c->internal_, &c->rank_);
  MPI_Comm_size(c->internal_, &c->size_);
  c->cfg_ = cfg;
  c->skip_floor_s_ = cfg.skip_min_wait_us * 1e-6;
#ifndef SKIPRING_SIMGRID
  if (std::getenv("SKIPRING_SKIP_MIN_WAIT_US") == nullptr) {
    MPI_Comm local = MPI_COMM_NULL;
    int local_size = 1;
    if (MPI_Comm_split_type(c->internal_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
      MPI_Comm_size(local, &local_size);
      MPI_Comm_free(&local);
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && local_size > cores) {
      c->skip_floor_s_ = std::max(c->skip_floor_s_, kOversubscribedFloorS);
      if (c->rank_ == 0) {
        SKIPRING_LOG_INFO("{} ranks on a host with {} cores: skip threshold floor {} ms "
                          "(set SKIPRING_SKIP_MIN_WAIT_US to override)",
                          local_size, cores, kOversubscribedFloorS * 1e3);
      }
    }
  }
#endif
  // Node-aware ring order from the gathered topology (one MPI_Allgather; every rank gets the
  // same result, so a bad SKIPRING_HOST_MAP fails on all ranks alike).
  std::string why;
  if (Status st = gather_topology(c->internal_, cfg.host_map, &c->topology_, &why); !ok(st)) {
    SKIPRING_LOG_ERROR("communicator setup: {}", why);
    return st;
  }
  c->ring_ = c->topology_.ring;
  if (!ring_is_valid(c->ring_, c->size_, &why)) {
    SKIPRING_LOG_ERROR("ring order: {}", why);
    return Status::kErrInternal;
  }
  c->transport_ = std::make_unique<MpiTransport>(c->internal_);
  c->clock_ = make_clock(cfg.clock);
  c->engine_ = std::make_unique<ProgressEngine>(
      c->transport_.get(), c->clock_.get(), EngineOptions{cfg.poll_spins, cfg.idle_sleep_us});
  c->params_.rank = c->rank_;
  c->params_.ring = c->ring_;
  c->params_.segment_bytes = cfg.segment_bytes;
  c->params_.depth = cfg.pipeline_depth;
  c->params_.tag_span = c->transport_->tag_span();
  c->inject_ = inject;
  *out = std::move(c);
  return Status::kOk;
}

Communicator::~Communicator() {
  transport_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && internal_ != MPI_COMM_NULL) MPI_Comm_free(&internal_);
}

double Communicator::skip_threshold(size_t segment_bytes) const {
  // alpha * T + T_trans with T the normal time a ring piece takes to arrive (median over recent
  // collectives of their 90th percentile). Before any history: T = 1 ms, T_trans = the
  // segment at 1 GB/s, so early collectives skip only for clear stragglers.
  const int pred = ring_[(pos_in_ring() - 1 + size_) % size_];
  const double T = cfg_.skip_t_us > 0 ? cfg_.skip_t_us * 1e-6 : timer_.typical(pred, 1e-3);
  const double trans = cfg_.skip_ttrans_us > 0
                           ? cfg_.skip_ttrans_us * 1e-6
                           : timer_.transfer(segment_bytes, static_cast<double>(segment_bytes) / 1e9);
  return std::max(skip_floor_s_, cfg_.alpha * T + trans);
}

Status Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype,
                               ROp op) {
  if (broken_) return Status::kErrInternal;
  // The ring order and sizes were checked at creation; the C API checked op, type and buffers.
  RingParams& p = params_;
  p.count = count;
  p.dtype = dtype;
  p.op = op;
  p.sendbuf = sendbuf;
  p.recvbuf = recvbuf;
  p.seq = static_cast<uint32_t>(seq_);
  if (!op_valid(op, dtype)) return Status::kErrOp;
  // Latency-bound sizes: recursive doubling (log2 n steps); otherwise the pipelined ring.
  const size_t bytes = count * dtype_size(dtype);
  const bool small = bytes <= cfg_.small_bytes;
  const size_t seg_bytes = std::min(bytes / std::max(1, size_) + dtype_size(dtype),
                                    cfg_.segment_bytes);
  p.skip = cfg_.skip && !small;
  if (p.skip) p.skip_threshold_s = skip_threshold(seg_bytes);
  SKIPRING_LOG_TRACE("allreduce seq {} bytes {} skip {} threshold {:.6f}s", seq_, bytes, p.skip,
                     p.skip_threshold_s);
  // Straggler injection: late arrival here, slow steps through the engine.
  if (!inject_.empty()) {
    const double arrive = inject_.delay(rank_, seq_, InjectPoint::kArrive, 0);
    if (arrive > 0) std::this_thread::sleep_for(std::chrono::duration<double>(arrive));
    const uint64_t seq = seq_;
    engine_->set_step_delay([this, seq](Phase ph, int step) {
      return inject_.delay(rank_, seq,
                           ph == Phase::kReduceScatter ? InjectPoint::kReduceScatter
                                                       : InjectPoint::kAllgather,
                           step);
    });
  } else {
    engine_->set_step_delay(nullptr);
  }
  Status st;
  std::unique_ptr<CollectiveCore> core;
  if (small) {
    core = std::make_unique<RecursiveDoublingAllreduce>(p, &scratch_);
  } else {
    core = std::make_unique<RingAllreduce>(p, &scratch_);
  }
  st = engine_->run(core.get());
  ++seq_;
  if (!ok(st)) {
    broken_ = true;
    SKIPRING_LOG_ERROR("allreduce seq {} failed: {} {}", p.seq, status_string(st), core->error());
    return st;
  }
  last_stats_ = core->stats();
  if (p.skip && last_stats_.rs_piece_wait_max > 0) {
    timer_.observe(ring_[(pos_in_ring() - 1 + size_) % size_], last_stats_.rs_piece_wait_max,
                   seg_bytes);
  }
  if (cfg_.log_level <= LogLevel::kDebug) {
    SKIPRING_LOG_DEBUG("allreduce {}", last_stats_.to_string());
  }
  if (cfg_.check) {
    // Every message of this collective has been received once all ranks are past the first
    // barrier; nobody starts the next collective before the second one.
    bool waiting = false;
    MPI_Barrier(internal_);
    SKIPRING_CHECK(transport_->unmatched_message_waiting(&waiting));
    MPI_Barrier(internal_);
    if (waiting) {
      broken_ = true;
      SKIPRING_LOG_ERROR("allreduce seq {}: a message is left unmatched", p.seq);
      return Status::kErrProtocol;
    }
  }
  return Status::kOk;
}

}  // namespace skipring
