// In-process harness: n virtual ranks, a virtual clock and a fake network that delivers
// messages with seeded random delays (so in arbitrary order, except MPI's non-overtaking rule
// for the same source, destination and tag), with eager (copied at send) or rendezvous (read
// from the sender's buffer when the transfer completes) semantics. Each rank runs the real
// ProgressEngine over a FakeTransport. A test instrument, not a second runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/dtype.h"
#include "collectives/ring_allreduce.h"
#include "common/clock.h"
#include "common/status.h"

namespace skipring {
namespace harness {

// A clock the test sets by hand (the harness's virtual time; test_watchdog.cpp).
class ManualClock final : public Clock {
 public:
  double now() const override { return t_; }
  void set(double t) { t_ = t; }

 private:
  double t_ = 0;
};

// The ring parameters every rank gets are a RingParams (count, dtype, op, segment_bytes, depth,
// skip, skip_threshold_s, direct_allgather, quiet_polls, tag_span, ...: a new ring parameter
// reaches the cores without being copied here); run() fills the per-rank ones (rank, ring,
// sendbuf, recvbuf, seq). The harness's own defaults differ from RingParams' (small
// segments, many tags in use).
struct Options : RingParams {
  Options() {
    count = 16;
    dtype = DType::kInt32;
    op = ROp::kSum;
    segment_bytes = 64;
    depth = 4;
    skip_threshold_s = 20e-6;
  }

  int n = 4;
  bool in_place = false;
  uint64_t seed = 1;
  int collectives = 1;        // back-to-back collectives per rank (seq 0, 1, ...)
  double latency_min = 1e-6;  // per message, virtual seconds
  double latency_max = 5e-6;
  double bytes_per_s = 1e9;  // transfer time = bytes / rate after matching
  // Links: each rank has one outgoing and one incoming link (full duplex NIC); a matched
  // message's transfer waits until both are free and occupies both. Off: transfers overlap
  // freely (only the protocol's ordering is under test).
  bool links = false;
  double eager_probability = 0.5;
  // SimGrid's SMPI with smpi/async-small-thresh: a message whose payload is at most this many
  // bytes goes through another mailbox than a larger one, so it may arrive (and match) before
  // a larger message sent earlier on the same source and tag: MPI's non-overtaking rule then
  // holds only among the small ones and among the large ones. 0: never (real MPI).
  size_t small_overtakes_bytes = 0;
  // Header-only messages (control, acks) are always eager, as MPI sends small messages, and
  // with `links` their bytes cross the links when sent (buffered at the receiver until it
  // matches them) rather than after matching.
  bool control_eager = false;
  std::vector<double> start_time;  // per rank; empty = all at 0
  double gap_max = 2e-6;           // random pause between a rank's consecutive collectives
  // RingParams::ring: the ring order; empty = identity.
  // Straggler injection: extra delay before the first send of (rank, collective, phase, step).
  std::function<double(int rank, int collective, Phase phase, int step)> step_delay;
  // Message faults (issue 13): called once per message sent with its envelope and copies of
  // its header and payload, which it may change (forge), shorten (truncate) or lengthen;
  // returns how many copies to deliver (1 as sent, 2 duplicated). Tampered messages travel
  // eager (the changed bytes are what arrives). A message whose sizes differ from what the
  // receive expects completes as Status::kErrProtocol on the receiver, as MpiTransport does
  // (header exactly header_bytes, payload at most the receive's capacity).
  std::function<int(int src, int dst, int tag, std::vector<uint8_t>* header,
                    std::vector<uint8_t>* payload)>
      tamper;
  // At the end of the run, a message left unmatched is a protocol error (what SKIPRING_CHECK's
  // stale-message check reports), instead of only Result::leftover_messages.
  bool unmatched_is_error = false;
  // Builds the algorithm under test from the per-rank parameters; empty = RingAllreduce.
  std::function<std::unique_ptr<CollectiveCore>(const RingParams&, std::vector<uint8_t>* scratch)>
      make_core;
  // Called with each rank's core when its collective completes (before it is destroyed).
  std::function<void(int rank, int collective, const CollectiveCore& core)> on_done;
};

struct Result {
  Status status = Status::kOk;
  std::string error;
  // outputs[c][r]: rank r's receive buffer after collective c.
  std::vector<std::vector<std::vector<uint8_t>>> outputs;
  std::vector<std::vector<CollectiveStats>> stats;  // [c][r]
  bool leftover_messages = false;                   // anything unmatched / in flight at the end
  double end_time = 0;
};

// inputs[c][r]: rank r's send buffer for collective c (count * dtype_size bytes).
Result run(const Options& opt, const std::vector<std::vector<std::vector<uint8_t>>>& inputs);

}  // namespace harness
}  // namespace skipring
