// The late path (DESIGN.md 2.2 and 2.2b; docs/skip_ahead.md "The late path"): the ring all-reduce
// behind a census that takes the ranks which have not arrived out of it; the healthy ranks do
// the work that does not depend on them, and a late rank joins what is under way the moment it
// comes. An I/O-free state machine like the ring (collective_core.h). One protocol for every
// lateness: nothing waits for a phase the late input could overlap.
//
//  1. Census. Every rank tells the coordinator (RingParams::late_coord, by default ring position
//     0) that it has arrived (a header only). The coordinator waits until every rank has, or
//     until RingParams::late_wait_s has passed since it arrived itself (moved on while ranks keep
//     arriving: kCensusSpreadShare), and sends every rank the
//     set E of ranks it had not heard from (usually empty). A rank that came later than
//     late_wait_s last time (RingParams::late_seen_s, the driver's memory: a persistent
//     straggler: the driver passes it only for ranks the last two decisions took out,
//     suspects_seen in late_plan.h) gets only late_wait_suspect_s once every other rank is in.
//     Every rank waits for the decision before it moves data, so all agree on E; a rank in E
//     reads it whenever it arrives. The census cannot take out its own coordinator. Every
//     rank's arrival header says how long it waited for the last decision of this coordinator
//     (RingParams::late_my_wait_s);
//     when every other rank waited more than twice late_wait_s, the coordinator came late (by
//     more than the wait: the decision comes at most late_wait_s after it arrives), and the
//     decision names the next call's coordinator in its route word: after it in ring order, the
//     healthy rank that earlier decisions took out least often (RingParams::
//     late_excluded_counts); every rank passes that on (next_coordinator()), so a persistent
//     straggler at the coordinator's place costs two calls, not every call.
//  2. E empty: the skip-ahead ring of every rank (RingAllreduce, embedded unmodified through a
//     NestedCore, the lower half of the tags). The only cost of the census is one gather and one
//     scatter of headers at the coordinator.
//  3. E not empty (h = |H| healthy ranks, m = |E|). The vector is cut into h blocks, block i
//     owned by H[i] (ring order).
//     - The healthy ranks run the ring reduce-scatter among themselves (RingReduceScatter,
//       embedded the same way): H[i] ends with P_i, block i summed over H. That is all the work
//       that does not depend on the late inputs.
//     - Every owner posts, at the decision, its receives for the late ranks' pieces of its
//       block. A late rank, the moment it has read the decision, sends its input block by block
//       to the owners, round-robin over the owners segment by segment (RingParams::
//       late_segment_bytes each, at most late_inflight in flight), so every owner's pieces come
//       at the same pace whether the reduce-scatter is still running or long done.
//     - An owner folds a segment as soon as P_i and every late piece of it are there, in E's
//       order: F = ((P_i op L_0) op L_1) ...; and sends F at once to every other rank (healthy
//       and late), each receiving it straight into its result. P_i of a segment is there once
//       the reduce-scatter's last step has reduced it (RingReduceScatter::final_prefix_elems),
//       not only once the whole reduce-scatter is over: a late rank that comes while it runs
//       gets its first finals while the owners still receive the rest of their blocks (4
//       emulated hosts, 4 MiB, a rank 2 / 10 ms after the decision: 71 / 60 -> 64 / 55 ms after
//       its arrival; the plain ring 56).
//     Links: a late rank's uplink carries S (its input) and its downlink S (the finals); every
//     owner's uplink about S for the finals. After a long lateness that is S/B, the floor; when
//     the late rank comes early, its input moves while the reduce-scatter runs and the finals
//     follow it segment by segment (docs/skip_ahead.md, "What any schedule reaches").
//
// Every rank ends with the same bits: only the owner of a block reduces it (the reduce-scatter's
// fixed order, then the late inputs in E's order) and every other rank copies it. Every input is
// summed once: the headers carry contribution sets (a late piece {L}, P_i = H, a final all
// ranks), checked on receipt.
//
// Tags: the embedded ring keeps 0 .. tag_span/2 - 1; census, decision, late pieces and finals use
// tag_span/2 + 2 * kind + (seq & 1). Messages of one kind between two ranks are received in the
// order they are sent (MPI's non-overtaking rule): a late rank sends each owner its segments in
// order, an owner sends each rank its finals in order; each header names its block and segment,
// checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/contribution_set.h"
#include "collectives/nested_core.h"
#include "collectives/ring_allreduce.h"
#include "common/status.h"

namespace skipring {

class RingReduceScatter;  // collectives/ring_collectives.h

// Where the driver runs it by default (SKIPRING_LATE_CHAIN=auto): skip-ahead across hosts from
// this size on ...
constexpr size_t kLateChainMinBytes = 1 << 20;
// ... and where the census costs at most this share of the ring's modelled time.
constexpr double kLateChainMaxCensusShare = 0.01;
// The late pieces' and finals' message size by default (SKIPRING_LATE_SEGMENT_BYTES=0): under
// Open MPI's TCP BTL eager limit (64 KiB), so that one message in flight streams without a
// rendezvous round trip per message (kSocketSegmentBytes). The same in every build (SimGrid
// included), whatever the links.
constexpr size_t kLateChainSegmentBytes = kSocketSegmentBytes;
// A late rank's input sends in flight by default (SKIPRING_LATE_INFLIGHT=0): they go to h different
// owners round-robin, and SimGrid leaves a link idle for a latency between back-to-back
// messages (n = 8, 16 MiB, rank 1 late by T0, us after the arrival: 2333 with 2 in flight,
// 1480 with 8, 1478 with 16, 1548 with 32; S/B = 1342). With more owners than that, one piece
// per owner in flight (plan_late_path), at most kLateChainMaxInflight: n = 16, 8 ms late,
// 1903 us with 8, 1564 with 16, 1615 with 32; n = 64, 1921 with 8, 1930 with 16, 1700 with 64.
constexpr int kLateChainInflight = 8;

constexpr int kLateChainMaxInflight = 64;
// A rank that arrives while the census waits moves its deadline to at least
// kCensusSpreadShare waits after that arrival, at most kCensusSpreadCap waits after the
// coordinator's own: ranks that keep arriving are a spread, a straggler is one the others have
// stopped waiting with (a gap). Back to back calls start where the last one ended, and the plain
// ring (a rested call) leaves the ranks' completions spread: under SimGrid at n = 64 (25 MiB, 100
// Gbit/s) 18 of 64 ranks were in at the coordinator's start and the rest came every 5-20 us up to
// 380 us after it, past the census's 226 us wait, and a census counted from the coordinator alone
// took 17 ranks out of a call nobody was late for (5.44 ms against the ring's 4.71). A census
// call leaves them in step (every rank starts its ring at the decision). Only arrivals before
// the deadline move it: once it has passed (the census then waits for a majority,
// decision_time) nothing does.
constexpr double kCensusSpreadShare = 0.5;
constexpr double kCensusSpreadCap = 4.0;

// This call's census coordinator: RingParams::late_coord, or ring position 0 when none was handed
// on (0 for an empty ring, which validate() refuses).
inline int late_coordinator(const RingParams& p) {
  if (p.late_coord >= 0) return p.late_coord;
  return p.ring.empty() ? 0 : p.ring[0];
}

class LateChainAllreduce final : public CoreBase {
 public:
  // Checks the common parameters, late_inflight >= 1, the waits >= 0, late_seen_s's size and
  // that tag_span leaves the embedded ring its tags.
  static Status validate(const RingParams& p, std::string* why);

  // `scratch` is the embedded ring's (reused across collectives; must outlive this object).
  LateChainAllreduce(const RingParams& p, std::vector<uint8_t>* scratch);

  Status start(double now, ActionList* out) override;
  Status on_recv(Token t, size_t payload_bytes, double now, ActionList* out) override;
  Status on_send(Token t, double now, ActionList* out) override;
  Status on_reduce(Token t, double now, ActionList* out) override;
  Status on_time(double now, ActionList* out) override;
  double next_deadline() const override;
  std::string describe() const override;
  std::string describe_wait(double now) const override;

  // Communicator ranks the census took out (ring order); valid once decided.
  const std::vector<int>& excluded() const { return late_; }
  // The coordinator: how late each rank arrived, in seconds after the coordinator itself (the
  // next call's RingParams::late_seen_s); complete once the collective is. Empty elsewhere.
  const std::vector<double>& lateness() const { return seen_; }
  bool decided() const { return decided_; }
  // The coordinator the decision named for the next call (identical on every rank once decided;
  // this call's coordinator unless it came last).
  int next_coordinator() const { return next_coord_; }
  int coordinator() const { return coord_; }
  // How long this rank waited for the decision after it arrived (the next call's RingParams::
  // late_my_wait_s; < 0: the coordinator, or not decided).
  double decision_wait() const { return decision_wait_; }

 private:
  enum class Op : uint8_t {
    kArriveSend,
    kArriveRecv,
    kDecisionSend,
    kDecisionRecv,
    kPieceSend,  // late rank: a segment of its input to the block's owner
    kPieceRecv,  // owner: a late rank's segment of our block
    kFold,       // owner: F op= the next late piece
    kFinalSend,  // owner: a final segment of our block to another rank
    kFinalRecv,  // a final segment of another owner's block
  };
  struct OpRec {
    Op op;
    int seg = -1;  // global segment id (seg_base_[block] + segment in the block)
    int who = -1;  // the peer's index: a rank (census), a late rank's index in late_
    bool done = false;
  };

  Token add_op(Op op, int seg, int who);
  Status on_op(size_t idx, double now, ActionList* out);
  Status decide(double now, ActionList* out);
  // Coordinator: when the census decides if nobody else arrives.
  double decision_time() const;
  int next_coordinator_after() const;
  Status begin(double now, ActionList* out);
  Status start_ring(double now, ActionList* out);
  // Forwards the ring's actions (peers mapped to ranks); goes on once the ring is done.
  Status forward_ring(Status st, ActionList* ring_out, double now, ActionList* out);
  // Our reduce-scatter (or ring) is over: post the final receives, fold what is there.
  void on_ring_done(double now, ActionList* out);
  void post_finals(ActionList* out);
  void try_folds(ActionList* out);
  void send_finals(int g, ActionList* out);
  void pump_pieces(ActionList* out);
  void maybe_done(double now, ActionList* out);
  // Census and decision: one tag per kind; pieces and finals: per segment in the block (`seg`).
  int tag(int kind, int seg) const;
  // Blocks (h of them, block i owned by healthy_[i]) and their segments.
  size_t block_len(int i) const { return boff_[i + 1] - boff_[i]; }
  int block_segs(int i) const { return seg_base_[i + 1] - seg_base_[i]; }
  int block_of(int gid) const;
  size_t seg_len(int gid) const;
  uint8_t* out_ptr(int gid) const;
  const uint8_t* in_ptr(int gid) const;
  // Owner: late rank j's piece of our segment g.
  uint8_t* piece_ptr(int j, int g);
  uint8_t* hdr_ptr(std::vector<uint8_t>* v, size_t i) { return v->data() + i * hdr_bytes_; }
  void send(Token t, int peer, int kind, uint8_t* hdr, const void* payload, size_t bytes,
            ActionList* out, int seg = 0);
  void recv(Token t, int peer, int kind, uint8_t* hdr, void* payload, size_t bytes, ActionList* out,
            int seg = 0);

  RingParams p_;
  std::vector<uint8_t>* ring_scratch_;
  int n_, elem_;
  size_t hdr_bytes_;
  int coord_;       // the coordinator's rank (RingParams::late_coord, or ring position 0)
  int next_coord_;  // the next call's (the decision's route word - 1)
  double decision_wait_ = -1;
  std::vector<double> waited_;  // coordinator: each rank's report of its last wait (< 0: none)
  double t0_ = 0, deadline_ = 0, suspect_deadline_ = 0;
  std::vector<char> suspect_;  // coordinator: by rank, late beyond the wait last time
  std::vector<double> seen_;   // coordinator: how late each rank arrived (-1: not yet)
  bool started_ = false, decided_ = false, ring_done_ = false;
  std::vector<char> arrived_;  // coordinator: by rank
  int arrived_count_ = 0;      // coordinator: ranks in arrived_
  std::vector<OpRec> ops_;
  size_t pending_ = 0;               // our operations posted and not completed
  std::vector<uint8_t> census_hdr_;  // one header per rank (arrival / decision)
  ContributionSet late_set_;
  std::vector<int> late_;     // E in ring order
  std::vector<int> healthy_;  // H in ring order
  int hpos_ = -1;             // our index in healthy_ (-1: late)
  int late_idx_ = -1;         // our index in late_ (late ranks)
  NestedCore ring_;
  RingReduceScatter* rs_ = nullptr;  // ring_'s core when it is the healthy ranks' reduce-scatter
  size_t final_seen_ = 0;            // its final prefix when try_folds last looked
  // Phase 3 (E not empty).
  size_t seg_elems_ = 0;
  int seg_tags_ = 64;          // pieces' and finals' tags per kind and parity (late_chain.cpp)
  std::vector<size_t> boff_;   // h + 1 element offsets of the blocks
  std::vector<int> seg_base_;  // h + 1: block i's segments are seg_base_[i] .. seg_base_[i + 1]
  int nseg_ = 0;               // segments of all blocks
  std::vector<uint8_t> buf_;   // owner: m x our block (the late pieces)
  std::vector<uint8_t> piece_hdr_;  // owner: m x our segments; late rank: one per segment sent
  std::vector<uint8_t> final_hdr_;  // by global segment: received finals, or ours sent
  std::vector<int> pieces_left_;    // owner, per segment of our block: late pieces still to come
  std::vector<char> folded_;        // owner, per segment of our block
  int folds_done_ = 0, next_final_send_ = 0;
  int fold_scan_ = 0;  // segments of our block before it have their folds under way
  bool finals_posted_ = false;
  int finals_in_ = 0, finals_expected_ = 0;
  // Late rank: its input's segments in sending order (global ids), and the window.
  std::vector<int> piece_order_;
  std::vector<char> piece_sent_;  // by global segment
  std::vector<int> next_final_;   // by block: the next final receive to post (in segment order)
  size_t next_piece_ = 0;
  int piece_flight_ = 0;
};

}  // namespace skipring
