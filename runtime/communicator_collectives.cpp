// Communicator methods for the collectives other than all-reduce: reduce-scatter (block),
// allgather, broadcast and reduce, each one a core from collectives/ring_collectives.h run on
// the communicator's progress engine. The MPI buffer conventions are mapped onto the cores'
// (full-size buffers, blocks indexed by rank) here.
#include <cstring>
#include <memory>
#include <vector>

#include "collectives/ring_collectives.h"
#include "runtime/communicator.h"
#include "runtime/log.h"

namespace skipring {

Status Communicator::run_collective(CollectiveCore* core, const char* name) {
  // No straggler injection or skip-ahead here: the plan's steps are the ring all-reduce's.
  engine_->set_step_delay(nullptr);
  return finish_collective(core, engine_->run(core), name, -1);
}

Status Communicator::finish_collective(CollectiveCore* core, Status st, const char* name,
                                       int algo) {
  ++seq_;
  if (!ok(st)) {
    broken_ = true;
    if (st == Status::kErrTimeout) {
      // The watchdog logged what the collective waited for; messages may still be in flight.
      broken_why_ = fmt::format("{} seq {} timed out (SKIPRING_TIMEOUT={} s)", name, seq_ - 1,
                                cfg_.timeout_s);
      SKIPRING_LOG_ERROR("{} seq {} failed: {}; this communicator is unusable from now on", name,
                         seq_ - 1, engine_->timeout_message());
      return st;
    }
    SKIPRING_LOG_ERROR("{} seq {} failed: {} {}", name, seq_ - 1, status_string(st), core->error());
    return st;
  }
  last_stats_ = core->stats();
  last_stats_.algo = algo;
  if (cfg_.log_level <= LogLevel::kDebug) {
    SKIPRING_LOG_DEBUG("{} {}", name, last_stats_.to_string());
  }
  if (cfg_.check) {
    // Every message of this collective has been received once all ranks are past the first
    // barrier; nobody starts the next collective before the second one.
    bool waiting = false;
    MPI_Barrier(internal_);
    SKIPRING_RETURN_IF_ERROR(transport_->unmatched_message_waiting(&waiting));
    MPI_Barrier(internal_);
    if (waiting) {
      broken_ = true;
      SKIPRING_LOG_ERROR("{} seq {}: a message is left unmatched", name, seq_ - 1);
      return Status::kErrProtocol;
    }
  }
  return Status::kOk;
}

Status Communicator::refuse_broken(const char* name) const {
  if (!broken_why_.empty()) {
    SKIPRING_LOG_ERROR("{} refused: this communicator is unusable since {}", name, broken_why_);
  }
  return Status::kErrInternal;
}

namespace {
RingParams params_for(const RingParams& base, uint64_t seq, size_t count, DType dtype, ROp op,
                      const void* sendbuf, void* recvbuf) {
  RingParams p = base;
  p.count = count;
  p.dtype = dtype;
  p.op = op;
  p.sendbuf = sendbuf;
  p.recvbuf = recvbuf;
  p.seq = static_cast<uint32_t>(seq);
  p.skip = false;
  return p;
}
}  // namespace

Status Communicator::reduce_scatter_block(const void* sendbuf, void* recvbuf, size_t recvcount,
                                          DType dtype, ROp op) {
  if (broken_) return refuse_broken("reduce_scatter_block");
  if (!op_valid(op, dtype)) return Status::kErrOp;
  const size_t count = recvcount * static_cast<size_t>(size_);
  std::vector<uint8_t> input;
  if (sendbuf == recvbuf && count > 0) {
    // In place: the result goes to the first block of recvbuf while other blocks are still
    // being read, so the input is copied aside first.
    input.assign(static_cast<const uint8_t*>(sendbuf),
                 static_cast<const uint8_t*>(sendbuf) + count * dtype_size(dtype));
    sendbuf = input.data();
  }
  CollParams c;
  c.result = recvbuf;
  // recvbuf is not used by the core when `result` is set; keep it non-null and distinct.
  RingParams p = params_for(params_, seq_, count, dtype, op, sendbuf, nullptr);
  p.recvbuf = const_cast<void*>(sendbuf);
  if (p.recvbuf == nullptr) p.recvbuf = recvbuf;
  if (count == 0) {
    ++seq_;
    return Status::kOk;
  }
  RingReduceScatter core(p, c, &scratch_);
  return run_collective(&core, "reduce_scatter_block");
}

Status Communicator::allgather(const void* sendbuf, void* recvbuf, size_t count, DType dtype) {
  if (broken_) return refuse_broken("allgather");
  const size_t elem = dtype_size(dtype);
  // The core takes the own block at its place in the full buffer: put it there, run in place.
  if (sendbuf != recvbuf && count > 0) {
    std::memmove(static_cast<uint8_t*>(recvbuf) + static_cast<size_t>(rank_) * count * elem,
                 sendbuf, count * elem);
  }
  RingParams p = params_for(params_, seq_, count * static_cast<size_t>(size_), dtype, ROp::kMax,
                            recvbuf, recvbuf);
  CollParams c;
  RingAllgather core(p, c, &scratch_);
  return run_collective(&core, "allgather");
}

Status Communicator::bcast(void* buf, size_t count, DType dtype, int root) {
  if (broken_) return refuse_broken("bcast");
  RingParams p = params_for(params_, seq_, count, dtype, ROp::kMax, buf, buf);
  CollParams c;
  c.root = root;
  ChainBroadcast core(p, c, &scratch_);
  return run_collective(&core, "bcast");
}

Status Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op,
                            int root) {
  if (broken_) return refuse_broken("reduce");
  if (!op_valid(op, dtype)) return Status::kErrOp;
  // recvbuf is only written at the root; elsewhere it may be null.
  void* out = rank_ == root ? recvbuf : const_cast<void*>(sendbuf);
  RingParams p = params_for(params_, seq_, count, dtype, op, sendbuf, out);
  CollParams c;
  c.root = root;
  ChainReduce core(p, c, &scratch_);
  return run_collective(&core, "reduce");
}

}  // namespace skipring
