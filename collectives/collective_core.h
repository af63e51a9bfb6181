// The interface between a collective's I/O-free state machine and whatever drives it (the MPI
// progress engine, the in-process harness, SimGrid): events in, actions out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "common/peer.h"
#include "common/status.h"
#include "common/step_stats.h"
#include "common/token.h"

namespace skipring {

struct Action {
  enum class Kind : uint8_t { kSend, kRecv, kReduce, kCopy, kCancel, kDone };
  Kind kind = Kind::kDone;
  Token token = 0;
  // kSend / kRecv
  int peer = -1;
  int tag = 0;
  void* header = nullptr;
  size_t header_bytes = 0;
  void* payload = nullptr;
  size_t payload_bytes = 0;
  // kReduce: dst = a op b over `count` elements; report with on_reduce(token).
  // kCopy: copy payload_bytes from a to dst, synchronously (no completion event).
  // kCancel: cancel the outstanding receive `token` (one that can no longer be matched);
  // no completion event follows.
  // kSend / kRecv of a ring step carry the step (phase, index) so a driver can inject delays.
  int8_t phase = -1;  // Phase of the step, -1 when not a step's data message
  int16_t step = -1;
  void* dst = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  size_t count = 0;
  DType dtype = DType::kByte;
  ROp op = ROp::kSum;
};
using ActionList = std::vector<Action>;

// A kSend or kRecv action (payload: read by a send, written by a receive).
inline Action message_action(Action::Kind kind, Token token, int peer, int tag, void* header,
                             size_t header_bytes, const void* payload, size_t payload_bytes) {
  Action a;
  a.kind = kind;
  a.token = token;
  a.peer = peer;
  a.tag = tag;
  a.header = header;
  a.header_bytes = header_bytes;
  a.payload = const_cast<void*>(payload);
  a.payload_bytes = payload_bytes;
  return a;
}

// A kCopy action: `bytes` from src to dst.
inline Action copy_action(void* dst, const void* src, size_t bytes) {
  Action a;
  a.kind = Action::Kind::kCopy;
  a.dst = dst;
  a.a = src;
  a.payload_bytes = bytes;
  return a;
}

// A kReduce action: dst = a op b over `count` elements of `dtype`; completes with
// on_reduce(token).
inline Action reduce_action(Token token, void* dst, const void* a, const void* b, size_t count,
                            DType dtype, ROp op) {
  Action r;
  r.kind = Action::Kind::kReduce;
  r.token = token;
  r.dst = dst;
  r.a = a;
  r.b = b;
  r.count = count;
  r.dtype = dtype;
  r.op = op;
  return r;
}

// A kCancel action: cancel the outstanding receive `token`.
inline Action cancel_action(Token token) {
  Action c;
  c.kind = Action::Kind::kCancel;
  c.token = token;
  return c;
}

// A next_deadline() that is due at the driver's next poll, whatever the clock says.
constexpr double kAtNextPoll = -std::numeric_limits<double>::infinity();

class CollectiveCore {
 public:
  virtual ~CollectiveCore() = default;
  // All methods append the actions to take, in order, to *out. A driver executes kSend,
  // kRecv and kCopy in order, and for kReduce runs the kernel and later calls on_reduce.
  virtual Status start(double now, ActionList* out) = 0;
  virtual Status on_recv(Token t, size_t payload_bytes, double now, ActionList* out) = 0;
  virtual Status on_send(Token t, double now, ActionList* out) = 0;
  virtual Status on_reduce(Token t, double now, ActionList* out) = 0;
  virtual Status on_time(double now, ActionList* out) = 0;
  // Next clock time at which on_time must be called; +inf when none, kAtNextPoll when at the
  // next poll.
  virtual double next_deadline() const = 0;
  virtual bool done() const = 0;
  // Text of the last protocol error.
  virtual const std::string& error() const = 0;
  virtual const CollectiveStats& stats() const = 0;
  // One line on what the core still waits for (deadlock reports in tests).
  virtual std::string describe() const { return ""; }
  // For the progress engine's watchdog (runtime/progress_engine.h), when the collective has
  // made no progress for a while: which collective (kind and sequence number), which step, and
  // which ranks and pieces this rank still waits for, in words; `now` is the engine's clock.
  // Read-only. The default is describe().
  virtual std::string describe_wait(double now) const {
    (void)now;
    return describe();
  }
};

// What the event-driven cores (schedule cores, recursive doubling, tree, hierarchical) share:
// the done / failed flags, the error text and the stats, the protocol error record (fail),
// the completion (complete), no deadlines and an on_time that only reports a failure.
class CoreBase : public CollectiveCore {
 public:
  Status on_time(double now, ActionList* out) override {
    (void)now;
    (void)out;
    return failed_ ? Status::kErrProtocol : Status::kOk;
  }
  double next_deadline() const override { return std::numeric_limits<double>::infinity(); }
  bool done() const override { return done_; }
  const std::string& error() const override { return error_; }
  const CollectiveStats& stats() const override { return stats_; }

 protected:
  // rank and seq prefix every error text.
  CoreBase(int rank, uint32_t seq) : rank_(rank), seq_(seq) {}

  // Records a protocol error: "rank R seq S: why".
  Status fail(const std::string& why) {
    failed_ = true;
    error_ = "rank " + std::to_string(rank_) + " seq " + std::to_string(seq_) + ": " + why;
    return Status::kErrProtocol;
  }
  // Marks the collective done at `now`, summarises the stats and appends the kDone action.
  void complete(double now, ActionList* out) {
    done_ = true;
    stats_.end = now;
    stats_.summarise();
    Action a;
    a.kind = Action::Kind::kDone;
    out->push_back(a);
  }

  bool done_ = false;
  bool failed_ = false;
  std::string error_;
  CollectiveStats stats_;

 private:
  int rank_;
  uint32_t seq_;
};

}  // namespace skipring
