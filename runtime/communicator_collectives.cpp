// Communicator methods for the collectives other than all-reduce: reduce-scatter (block),
// allgather, broadcast and reduce, each one a core from collectives/ring_collectives.h run on
// the communicator's progress engine. The MPI buffer conventions are mapped onto the cores'
// (full-size buffers, blocks indexed by rank) here.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/ring_collectives.h"
#include "common/hash.h"
#include "runtime/communicator.h"
#include "runtime/log.h"

namespace skipring {

Status Communicator::agree_call(const char* name, size_t count, DType dtype, int op, int root) {
  // One all-reduce of [collective, count, type, op, root] as (v, -v) under MAX: every rank
  // learns the minimum and maximum of each, so every rank sees a mismatch and takes part in the
  // all-gather that names who called what. Nothing of the collective has been sent yet, and
  // every rank returns the same error: the communicator stays usable.
  const int64_t kind = static_cast<int64_t>(fnv1a64(name) >> 2);
  const int64_t v[5] = {kind, static_cast<int64_t>(std::min<size_t>(count, INT64_MAX >> 1)),
                        static_cast<int64_t>(dtype), op, root};
  // Vectors: a timeout leaves the collectives pending, and their buffers are then leaked.
  std::vector<int64_t> mine(10), all(10);
  for (int i = 0; i < 5; ++i) {
    mine[2 * i] = v[i];
    mine[2 * i + 1] = -v[i];
  }
  WaitWhat w;
  w.what = "SKIPRING_CHECK's argument agreement before the collective";
  w.seq = static_cast<int64_t>(front_.seq);
  MPI_Request req;
  Status st = wait_collectives(
      PMPI_Iallreduce(mine.data(), all.data(), 10, MPI_INT64_T, MPI_MAX, internal_.comm, &req),
      &req, 1, wait_, w, nullptr, &mine, &all);
  if (!ok(st)) {
    note_error(st, front_.seq, "SKIPRING_CHECK's argument agreement failed");
    return st;
  }
  bool same = true;
  for (int i = 0; i < 5; ++i) same = same && all[2 * i] == -all[2 * i + 1];
  if (same) return Status::kOk;
  // What each rank called, gathered (every rank is here).
  std::vector<int64_t> every(static_cast<size_t>(size_) * 5);
  std::vector<std::string> names(static_cast<size_t>(size_));
  constexpr int kName = 32;
  std::vector<char> mine_name(kName, '\0');
  std::snprintf(mine_name.data(), kName, "%s", name);
  std::vector<char> every_name(static_cast<size_t>(size_) * kName);
  std::vector<int64_t> mine_v(v, v + 5);
  MPI_Request reqs[2];
  int started = PMPI_Iallgather(mine_v.data(), 5, MPI_INT64_T, every.data(), 5, MPI_INT64_T,
                                internal_.comm, &reqs[0]);
  if (started == MPI_SUCCESS) {
    started = PMPI_Iallgather(mine_name.data(), kName, MPI_CHAR, every_name.data(), kName, MPI_CHAR,
                              internal_.comm, &reqs[1]);
  }
  st = wait_collectives(started, reqs, 2, wait_, w, nullptr, &mine_v, &every, &mine_name,
                        &every_name);
  if (!ok(st)) {
    note_error(st, front_.seq, "SKIPRING_CHECK's argument agreement failed");
    return st;
  }
  std::string calls;
  for (int r = 0; r < size_; ++r) {
    const int64_t* e = &every[static_cast<size_t>(r) * 5];
    const char* nm = &every_name[static_cast<size_t>(r) * kName];
    calls +=
        fmt::format("{}rank {}: {}(count {}, {}, op {}", r ? "; " : "", r,
                    std::string(nm, strnlen(nm, kName)), e[1], dtype_name(static_cast<DType>(e[2])),
                    e[3] < 0 ? std::string("-") : rop_name(static_cast<ROp>(e[3])));
    calls += e[4] >= 0 ? fmt::format(", root {})", e[4]) : std::string(")");
  }
  const char* what = all[0] != -all[1]   ? "the collective"
                     : all[2] != -all[3] ? "the count"
                     : all[4] != -all[5] ? "the datatype"
                     : all[6] != -all[7] ? "the op"
                                         : "the root";
  SKIPRING_LOG_ERROR("{} #{} (SKIPRING_CHECK): {} differs across ranks: {}", name, front_.seq, what,
                     calls);
  if (all[2] != -all[3]) return Status::kErrCount;
  if (all[4] != -all[5]) return Status::kErrType;
  if (all[6] != -all[7]) return Status::kErrOp;
  return Status::kErrArg;
}

Status Communicator::run_collective(CollectiveCore* core, const char* name) {
  // No straggler injection or skip-ahead here: the plan's steps are the ring all-reduce's.
  engine_->set_step_delay(nullptr);
  return finish_collective(core, engine_->run(core), name, -1);
}

Status Communicator::finish_collective(CollectiveCore* core, Status st, const char* name,
                                       int algo) {
  transport_->set_call(0);
  ++front_.seq;
  if (!ok(st)) {
    // keeps_usable's rule: a local argument error leaves the communicator usable, any other
    // status (protocol, transport, timeout, ...) breaks it, and every later call says so.
    // The watchdog logged what a timed-out collective waited for; messages may still be in
    // flight.
    return collective_failed(name, front_.seq - 1, st, engine_->timeout_message(),
                             core->error().empty() ? std::string() : ": " + core->error());
  }
  set_stats(core->stats());
  last_stats_.algo = algo;
  if (cfg_.log_level <= LogLevel::kDebug) {
    SKIPRING_LOG_DEBUG("{} {}", name, last_stats_.to_string());
  }
  if (cfg_.check) return check_leftovers(name, front_.seq - 1);
  return Status::kOk;
}

Status Communicator::check_leftovers(const char* name, uint64_t seq) {
  // Every message of this collective has been received once all ranks are past the first
  // barrier; nobody starts the next collective before the second one.
  bool waiting = false;
  WaitWhat w;
  w.what = "SKIPRING_CHECK's leftover check after the collective";
  w.seq = static_cast<int64_t>(seq);
  MPI_Request req;
  Status probe = wait_collectives(MPI_Ibarrier(internal_.comm, &req), &req, 1, wait_, w, nullptr);
  if (ok(probe)) probe = transport_->unmatched_message_waiting(&waiting);
  if (ok(probe)) {
    probe = wait_collectives(MPI_Ibarrier(internal_.comm, &req), &req, 1, wait_, w, nullptr);
  }
  if (!ok(probe)) {
    note_error(probe, seq, fmt::format("{} seq {}: probing for leftovers failed", name, seq));
    return probe;
  }
  if (waiting) {
    const std::string why = fmt::format("{} seq {}: a message is left unmatched", name, seq);
    SKIPRING_LOG_ERROR("{}", why);
    note_error(Status::kErrProtocol, seq, why);
    return Status::kErrProtocol;
  }
  return Status::kOk;
}

CollectiveStats& Communicator::begin_stats(size_t bytes, Algo algo) {
  set_stats(CollectiveStats{});
  last_stats_.seq = front_.seq;
  last_stats_.bytes = bytes;
  last_stats_.algo = static_cast<int>(algo);
  return last_stats_;
}

Status Communicator::collective_failed(const char* name, uint64_t seq, Status st,
                                       const std::string& timeout_text, const std::string& detail) {
  std::string why;
  if (st == Status::kErrTimeout) {
    why = fmt::format("{} seq {} timed out (SKIPRING_TIMEOUT={} s)", name, seq, cfg_.timeout_s);
    SKIPRING_LOG_ERROR("{} seq {} failed: {}; this communicator is unusable from now on", name, seq,
                       timeout_text);
  } else {
    why = fmt::format("{} seq {} failed: {}{}", name, seq, status_string(st), detail);
    SKIPRING_LOG_ERROR("{}{}", why,
                       keeps_usable(st) ? "" : "; this communicator is unusable from now on");
  }
  note_error(st, seq, why);
  return st;
}

Status Communicator::refuse_broken(const char* name) const {
  SKIPRING_LOG_ERROR("{} refused: this communicator is unusable since {}", name, broken_.reason);
  return Status::kErrInternal;
}

namespace {
// `segment_bytes`: SKIPRING_SEGMENT_BYTES (the all-reduce sets base.segment_bytes per call).
RingParams params_for(const RingParams& base, size_t segment_bytes, uint64_t seq, size_t count,
                      DType dtype, ROp op, const void* sendbuf, void* recvbuf) {
  RingParams p = base;
  p.segment_bytes = segment_bytes;
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
  if (broken_.on) return refuse_broken("reduce_scatter_block");
  if (!op_valid(op, dtype)) return Status::kErrOp;
  if (cfg_.check) {
    SKIPRING_RETURN_IF_ERROR(
        agree_call("reduce_scatter_block", recvcount, dtype, static_cast<int>(op), -1));
  }
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
  RingParams p =
      params_for(params_, cfg_.segment_bytes, front_.seq, count, dtype, op, sendbuf, nullptr);
  p.recvbuf = const_cast<void*>(sendbuf);
  if (p.recvbuf == nullptr) p.recvbuf = recvbuf;
  if (count == 0) {
    ++front_.seq;
    return Status::kOk;
  }
  RingReduceScatter core(p, c, &scratch_);
  return run_collective(&core, "reduce_scatter_block");
}

Status Communicator::allgather(const void* sendbuf, void* recvbuf, size_t count, DType dtype) {
  if (broken_.on) return refuse_broken("allgather");
  if (cfg_.check) SKIPRING_RETURN_IF_ERROR(agree_call("allgather", count, dtype, -1, -1));
  const size_t elem = dtype_size(dtype);
  // The core takes the own block at its place in the full buffer: put it there, run in place.
  if (sendbuf != recvbuf && count > 0) {
    std::memmove(static_cast<uint8_t*>(recvbuf) + static_cast<size_t>(rank_) * count * elem,
                 sendbuf, count * elem);
  }
  RingParams p = params_for(params_, cfg_.segment_bytes, front_.seq,
                            count * static_cast<size_t>(size_), dtype, ROp::kMax, recvbuf, recvbuf);
  CollParams c;
  RingAllgather core(p, c, &scratch_);
  return run_collective(&core, "allgather");
}

Status Communicator::bcast(void* buf, size_t count, DType dtype, int root) {
  if (broken_.on) return refuse_broken("bcast");
  if (cfg_.check) SKIPRING_RETURN_IF_ERROR(agree_call("bcast", count, dtype, -1, root));
  RingParams p =
      params_for(params_, cfg_.segment_bytes, front_.seq, count, dtype, ROp::kMax, buf, buf);
  CollParams c;
  c.root = root;
  ChainBroadcast core(p, c, &scratch_);
  return run_collective(&core, "bcast");
}

Status Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op,
                            int root) {
  if (broken_.on) return refuse_broken("reduce");
  if (!op_valid(op, dtype)) return Status::kErrOp;
  if (cfg_.check) {
    SKIPRING_RETURN_IF_ERROR(agree_call("reduce", count, dtype, static_cast<int>(op), root));
  }
  // recvbuf is only written at the root; elsewhere it may be null.
  void* out = rank_ == root ? recvbuf : const_cast<void*>(sendbuf);
  RingParams p =
      params_for(params_, cfg_.segment_bytes, front_.seq, count, dtype, op, sendbuf, out);
  CollParams c;
  c.root = root;
  ChainReduce core(p, c, &scratch_);
  return run_collective(&core, "reduce");
}

}  // namespace skipring
