// The ring all-reduce's private state types (RingAllreduce's members; collectives/ring/*.cpp):
// its receives, sends and skip-ahead messages, each segment's state, the owner's view of its
// chunk and this rank's mode. See docs/skip_ahead.md for the protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/contribution_set.h"
#include "common/step_stats.h"

namespace skipring {
namespace ring {

enum class OpState : uint8_t { kWaiting, kPosted, kArrived, kReducing, kFinished };

// One expected data message: a reduce-scatter ring piece or an allgather segment.
struct RecvOp {
  Phase phase;
  int step;
  int chunk;
  int seg;
  int seg_id;  // layout-wide segment index
  OpState state = OpState::kWaiting;
  int slot = -1;              // RS: receive slot holding header + payload
  int out_slot = -1;          // RS: send slot the reduction writes into
  uint8_t* header = nullptr;  // AG: header buffer (payload lands in recvbuf)
  double t_posted = 0;
  double t_ready = 0;  // when its timer started: max(posted, previous piece from pred)
  double t_arrived = 0;
  double t_reduce = 0;
  bool skipped = false;  // RS: we forwarded our own contribution without this piece
  bool timed = false;    // RS: arrived on the ring receive (t_ready..t_arrived is a wait)
  int ack_aux = -1;      // RS skipped: the receive of the predecessor's redirect ack
};

// One data message we send on the ring or in the allgather.
struct SendOp {
  Phase phase;
  int step;  // index of the step record this send's transfer time is added to
  int seg_id;
  int slot = -1;  // RS send slot to release on completion
  bool done = false;
  double t_posted = 0;
  bool reads_input = false;  // payload is our input: input may change once it completes
  int ag_peer = -1;          // an allgather send from a per-peer queue (ag_queue_): its peer
};

// An allgather send waiting for its turn on the link to `peer` (ag_queue_).
struct QueuedSend {
  int record;
  int chunk;
  int seg;
  uint8_t* hdr;
  const void* payload;
};

// Messages of the skip-ahead protocol (control, redirect acks, pieces to the owner).
enum class AuxKind : uint8_t {
  kCtrlRecv,
  kCtrlSend,
  kAckRecv,
  kAckSend,
  kToOwnerSend,
  kToOwnerRecv
};

// Control channels: from the successor (notices), from the predecessor (bypass), from the
// rank two ahead (bypass requests). Each ends with a "done" message on the same tag.
enum Channel : int { kBack = 0, kFwd = 1, kFar = 2, kChannels = 3 };

struct AuxOp {
  AuxKind kind;
  int channel = kBack;
  int seg_id = -1;
  int chunk = -1;
  int seg = -1;
  int recv_slot = -1;        // kToOwnerSend from a receive slot (late piece): release on completion
  int send_slot = -1;        // kToOwnerSend from a send slot (redirected piece)
  bool reads_input = false;  // kToOwnerSend of our own input: the input is free once it completes
  int owner_slot = -1;       // kToOwnerRecv: owner-side slot
  bool done = false;
  bool cancelled = false;
  bool paced = false;  // kToOwnerSend: one of the late rank's paced pieces
  double t = 0;
  std::vector<uint8_t> hdr;  // header-only messages own their header here
};

// What became of this rank's reduce-scatter piece for one segment (our partial, or our input
// alone when we skipped or were bypassed). One transition per event:
//   kUnsent --notice--> kRedirected            (SegmentState::on_notice)
//   kUnsent --emit--> kSentRing | kSentBypass  (SegmentState::on_emit)
//   kRedirected --emit--> kSentToOwner         (SegmentState::on_emit)
// A notice for a piece already sent changes nothing: the successor gets it on its ring
// receive and forwards it itself (a late piece).
enum class PieceState : uint8_t {
  kUnsent,       // not sent yet
  kRedirected,   // not sent yet; the successor skipped us for it: it goes to the owner
  kSentRing,     // sent to the successor on the ring
  kSentBypass,   // sent to the owner around our late successor (+ a "bypassed" message)
  kSentToOwner,  // sent to the owner after the successor's notice (+ a redirect ack)
};

// One segment (layout-wide id) as this rank sees it in the reduce-scatter.
struct SegmentState {
  PieceState piece = PieceState::kUnsent;
  // The predecessor sent its piece for this segment straight to the owner (it bypassed us):
  // only our own input goes on.
  bool pred_bypassed = false;
  // Our reduce-scatter part no longer reads the input (in place: allgather may overwrite it).
  bool input_released = false;

  bool sent() const { return piece >= PieceState::kSentRing; }
  // The successor's notice (it skipped us for this segment).
  void on_notice() {
    if (piece == PieceState::kUnsent) piece = PieceState::kRedirected;
  }
  // The predecessor's "bypassed" message; false if it came twice (a protocol error).
  bool on_pred_bypassed() {
    if (pred_bypassed) return false;
    pred_bypassed = true;
    return true;
  }
  // Our piece leaves; `bypass_successor`: we route around a late successor for its chunk.
  // Never bypass our successor for a piece we were bypassed for ourselves: at most one rank
  // is routed around per segment, which keeps the allgather routes consistent.
  PieceState on_emit(bool bypass_successor) {
    if (piece == PieceState::kRedirected) {
      piece = PieceState::kSentToOwner;
    } else if (bypass_successor && !pred_bypassed) {
      piece = PieceState::kSentBypass;
    } else {
      piece = PieceState::kSentRing;
    }
    return piece;
  }
  // The last reduce-scatter read of our input for this segment is done.
  void on_input_released() { input_released = true; }
};

// A piece waiting to go straight to its owner (we are the late rank; late.cpp).
struct PacedPiece {
  int order;  // chunks in the order we reach them (step), then segments
  int aux;
  int peer;
  const uint8_t* hdr;
  const void* payload;
};
// Heap order of the paced pieces: the piece reached first comes out first.
inline bool paced_later(const PacedPiece& a, const PacedPiece& b) { return a.order > b.order; }

// A piece for the owner to merge: a ring piece (index of its receive in recvs_) or one that
// came straight to it (index of its kToOwnerRecv in aux_).
struct OwnerItem {
  enum class Source : uint8_t { kRing, kToOwner };
  Source source = Source::kRing;
  int index = 0;
  static OwnerItem ring(int recv) { return OwnerItem{Source::kRing, recv}; }
  static OwnerItem to_owner(int aux) { return OwnerItem{Source::kToOwner, aux}; }
  bool is_ring() const { return source == Source::kRing; }
};

// The owner's view of one segment of its own chunk: pieces merge in arrival order.
struct OwnerPiece {
  ContributionSet acc;           // ranks summed into recvbuf (own input once started)
  bool started = false;          // recvbuf holds a partial (own input merged)
  bool merging = false;          // a reduction into recvbuf is in flight
  bool to_owner_posted = false;  // a to-owner receive is outstanding (or its slot in use)
  int to_owner_aux = -1;         // that receive
  bool full = false;
  std::vector<OwnerItem> queue;  // arrived pieces, in arrival order
  OwnerItem merging_item;        // the piece being merged (while `merging`)
  double merge_t = 0;            // when that merge started
};

// What this rank knows of its predecessor (the skip rule).
enum class PredState : uint8_t {
  kHeard,   // its last ring piece came, or we never skipped it
  kSilent,  // we skipped it and nothing came from it since
  // ... for kBypassFactor thresholds: it is absent (a late rank, not a descheduled one).
  // Every posted piece of it is then skipped at once instead of a threshold each, and the
  // receive window grows on demand.
  kAbsent,
};

// This rank's mode in the collective: what it knows of stragglers, and what follows from it.
struct Mode {
  // Forward and far control channels in use (skip, n >= 3).
  bool side_channels = false;
  // Direct allgather (RingParams::direct_allgather with skip-ahead, n >= 3).
  bool direct = false;
  // This collective met a straggler (we skipped, were skipped or bypassed, got a redirect ack
  // or a piece straight from another rank): our chunk's segments completed from now on go to
  // every rank directly (kRouteDirect) when `direct` ...
  bool disturbed = false;
  // ... unless we are the straggler (our successor skipped us or our predecessor bypassed us):
  // our own link is the busy one, so our segments still go around the ring (one send each).
  bool self_late = false;
  // Our successor is late: its pieces go straight to the owners.
  bool bypass_successor = false;
  // We asked our predecessor's predecessor to bypass.
  bool bypass_requested = false;
  // Our predecessor told us it sent a piece of ours straight to its owner: it is running, and
  // every ring piece it sent us before that is in the transport.
  bool pred_bypassing = false;
  // A ring piece from our predecessor has arrived in this collective.
  bool pred_heard_once = false;
  PredState pred = PredState::kHeard;

  // Our completed segments go to every rank directly, and (not being the late rank) we take
  // every allgather segment as soon as it comes rather than through a window of `depth`.
  bool goes_direct() const { return direct && disturbed && !self_late; }
  // Allgather sends go through per-peer queues (ag_queue_).
  bool ag_queued() const { return side_channels && disturbed && !direct; }
  // Allgather receives without a window (RingAllreduce::sync_ag_window): set, with skip-ahead
  // on, once this rank is disturbed, an allgather segment comes on a route other than the
  // ring, or its next allgather receive has waited a threshold for the window. Chunks complete
  // out of ring order once a straggler is around, every allgather receive is from any source
  // (the owner routes each segment), and the senders' per-peer queues (ag_queue_) hold
  // segments back in their own order, which is deadlock-free only if every receive gets
  // posted regardless of what arrived before it; a receiver may not know yet that a straggler
  // is around, hence the threshold. Without a straggler the window stays: posting every
  // allgather receive at once cost skip-ahead 2-6 % against the plain ring over TCP (4
  // emulated hosts, 16 MiB, no skips).
  bool ag_open = false;
  // An allgather segment came routed around a rank or directly from its owner.
  bool ag_rerouted = false;
  bool ag_unwindowed() const { return side_channels && ag_open; }
};

// The control channels (docs/skip_ahead.md, "Messages").
struct ControlState {
  bool open[kChannels] = {false, false, false};  // channel may still deliver
  bool rs_done_sent = false;   // rs-done (and far-done) sent: no more notices from us
  bool fwd_done_sent = false;  // fwd-done sent: no more "bypassed" messages from us
  uint64_t seen = 0;           // control messages read so far
  bool any_open() const { return open[kBack] || open[kFwd] || open[kFar]; }
};

// With skip-ahead on, step 0's sends wait until the notices already queued for us have been
// read (RingParams::quiet_polls polls in a row that bring no new control message): a rank that
// arrives late then sends the pieces its successor skipped straight to their owners instead of
// through the successor (late.cpp).
struct FirstSends {
  bool deferred = false;
  uint64_t seen_mark = 0;  // control messages read at the previous timer call
  int quiet_polls = 0;     // timer calls in a row without a new control message
};

}  // namespace ring
}  // namespace skipring
