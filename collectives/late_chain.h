// Late chain all-reduce (issue 11, "late arrival in about L across hosts"): the ring all-reduce
// behind a census that takes the ranks which have not arrived out of it, and a chain that adds
// their inputs once they come. An I/O-free state machine like the ring (collective_core.h).
//
//  1. Census. Every rank tells the coordinator (ring position 0) that it has arrived (a header
//     only). The coordinator waits until every rank has, or until RingParams::late_wait_s has
//     passed since it arrived itself, and sends every rank the set E of ranks it had not heard
//     from (usually empty). The coordinator remembers how late each rank came last time
//     (RingParams::late_seen_s, the driver's memory): a rank that came after late_wait_s and
//     late enough for the chain to pay (late_pays_after_s) gets only late_wait_suspect_s once
//     every other rank is in (a persistent straggler is taken out at once); one that came after
//     late_wait_s but too early for the chain to pay is not waited for and stays in (the ring
//     with skip-ahead is the better bet for it); any other rank gets the full late_wait_s. Every
//     rank waits for the decision before it moves data, so all agree on E; a rank in E reads it
//     whenever it arrives.
//  2. The healthy ranks H (all but E, in ring order) run the skip-ahead ring (RingAllreduce,
//     embedded unmodified through a NestedCore, virtual ranks = positions in H, the lower half
//     of the tags) on their own inputs. With E empty this is the ring of every rank: the only
//     cost of the census is one gather and one scatter of headers at the coordinator.
//  3. Chain (E not empty). The chain's head, the first healthy rank after E's first member in
//     ring order, tells each late rank "go" once its ring is done (a late rank that streamed
//     its input earlier would fill the head's unexpected queue and slow the ring on the head's
//     downlink). Each late rank then sends its input, segment by segment with at most
//     RingParams::late_inflight sends in flight (RingParams::late_segment_bytes each, the first
//     late_inflight - 1 of a stream smaller: late_segment_plan), to it. The
//     chain visits H in ring order from there. The head folds the late inputs of a segment in E's
//     order into D; every healthy rank passes D on to the next one (the same window) and computes P
//     op D, where P is its result of phase 2; the tail (the last healthy rank) sends each final
//     segment to every late rank. Every link carries S once; the late rank's uplink and downlink S
//     each.
//  3'. Two trees (RingParams::late_trees, large n: the chain's h - 1 hops cost their fill).
//     Segment s goes down tree s & 1: the binary heap over the chain's order (root: the head) or
//     over its reverse (root: the tail), so the inner nodes of one are leaves of the other. The
//     late ranks send each tree's segments to its root after a go from both roots; every healthy
//     rank passes D to its children and computes P op D; the leaves of a segment's tree send its
//     finals (spread over them). Each tree is its own stream: its own message kind, receive
//     slots and windows. Every uplink carries about S.
//
// Every rank ends with the same bits: P is the ring's result (identical on H), P op D is the
// same expression with the same operands on every healthy rank, and the late ranks receive it.
// Every input is summed once: the headers carry contribution sets (a late input {L}, D = E,
// a final segment all ranks), checked on receipt. When a rank of E arrives in the middle of
// phase 2 it waits for it; the chain pays off when the late rank comes after the healthy ranks
// are done, and costs up to about S/B when it comes just after the decision
// (docs/skip_ahead.md, "Tenth round").
//
// Tags: the ring keeps 0 .. tag_span/2 - 1; census, decision, late input (per tree), final and
// go use tag_span/2 + 2 * kind + (seq & 1). Messages of one kind between two ranks are received
// in the order they are sent (MPI's non-overtaking rule); each header names its segment, checked.
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

// Where the driver runs it by default (SKIPRING_LATE_CHAIN=auto): skip-ahead across hosts from
// this size on.
constexpr size_t kLateChainMinBytes = 1 << 20;
// ... and where the census costs at most this share of the ring's modelled time.
constexpr double kLateChainMaxCensusShare = 0.01;
// The chain's message size by default (SKIPRING_LATE_SEGMENT_BYTES=0): under Open MPI's TCP
// BTL eager limit (64 KiB), so that one message in flight streams without a rendezvous round
// trip per message (4 emulated hosts, 16 MiB, 400 ms late: 149 ms after the arrival against
// 158-173 with 256 KiB). The SimGrid build keeps SKIPRING_SEGMENT_BYTES: its links idle
// between messages, and 256 KiB beat 128 KiB at n = 64 (docs/skip_ahead.md).
#ifdef SKIPRING_SIMGRID
constexpr size_t kLateChainSegmentBytes = size_t{1} << 30;
#else
constexpr size_t kLateChainSegmentBytes = 60 * 1024;
#endif
// The trees' fill: the last segment reaches a leaf one segment time per level after the late
// rank sent it, so by default (SKIPRING_LATE_SEGMENT_BYTES=0) a tree's segment is at most
// 1/kLateChainFillShare of its stream (half the vector) divided by its hops, and never below
// kLateChainMinSegmentBytes (late_segment_bytes). SimGrid, n = 256, 8 MiB, two trees of depth 7,
// one rank 20 ms late: 2011.7 us after the arrival with 256 KiB segments, 1430.4 with 64 KiB,
// 1395.9 with this rule's 56 KiB, 1369.0 with 32 KiB. Not the chain: there each message's own
// cost outweighed the fill (n = 64: 10064.1 us with 128 KiB against 8866.5 with 256 KiB;
// docs/skip_ahead.md, "Tenth round" and "Twelfth round").
constexpr size_t kLateChainFillShare = 8;
constexpr size_t kLateChainMinSegmentBytes = 16 * 1024;
// The late path's segment for `bytes` on `n` ranks (one of them late), at most `cap`
// (SKIPRING_SEGMENT_BYTES, kLateChainSegmentBytes): `cap` down the chain; down the trees
// floor(log2(n - 1)) + 2 hops each carrying half the stream, a multiple of 4 KiB below the cap
// (whole elements of any type).
size_t late_segment_bytes(size_t cap, size_t bytes, int n, bool trees);

// The late path's segments of `count` elements: offsets 0 = off[0] < off[1] < .. < off[nseg] =
// count, segment s = [off[s], off[s + 1]). Whole segments of `seg_elems`, except that each stream
// (the chain, or each tree: segment s goes down tree s & 1) starts with `window` - 1 lead-in
// segments of 1/W, 2/W, .. (W - 1)/W of one (at least an element). A sender starts W messages at
// once; on a link that shares its bandwidth between the messages in flight (SimGrid's max-min
// model; Open MPI's TCP BTL interleaves the fragments of messages in flight too) equal ones all
// finish together and leave the link idle for a latency before the next W, at every hop and for
// the whole stream. Staggered, one finishes after another and the next starts while the others
// still fill the link. SimGrid, 64 MiB, rank 1 20 ms late, chain, W = 2 (with 2 W receive slots):
// n = 8 6412.1 -> 5669.1 us after the arrival, n = 16 6917.3 -> 6002.8 (docs/skip_ahead.md,
// "Fourteenth round"). W = 1 (real MPI's default): whole segments, as before.
std::vector<size_t> late_segment_plan(size_t count, size_t seg_elems, int window, bool trees);

// Messages in flight per rank down the chain and down the trees (SKIPRING_LATE_INFLIGHT=0). Over
// TCP 1 (0.70 of the plain ring after a late arrival at 4 hosts against 0.82 with 2: Open MPI's
// TCP BTL interleaves the fragments of messages in flight; with the lead-in segments 2 and 4
// gave 0.67-0.70, as 1); under SimGrid, which leaves a link idle between back-to-back messages,
// 2 down the chain (n = 8 / 16, 64 MiB, with the lead-in, us after the arrival: 5637.7 / 5929.4
// with 2, 8173.1 / 8380.9 with 1, 5679.3 / 6013.0 with 3, 5751.9 / 6169.6 with 4) and 4 down
// the trees (n = 32 / 48 / 64 before the lead-in: 7226 / 7306 / 7259 us against 8293 / 7604 /
// 8033 with 2). docs/skip_ahead.md, "Tenth round", "Eleventh round" and "Fourteenth round".
#ifdef SKIPRING_SIMGRID
constexpr int kLateChainInflight = 2;
constexpr int kLateTreesInflight = 4;
#else
constexpr int kLateChainInflight = 1;
constexpr int kLateTreesInflight = 1;
#endif
// SKIPRING_LATE_TREES=auto: two trees from this many healthy ranks (n - 1), the chain below.
// SimGrid, 64 MiB, one rank 20 ms late, us after the arrival, chain / trees, with the lead-in
// segments (docs/skip_ahead.md, "Fourteenth round"): n = 8 5638 / 6369, 16 5929 / 6149,
// 20 6075 / 6161, 24 6221 / 6119, 32 6513 / 6067 (before them the chain led up to n = 32 and
// the trees from 48).
constexpr int kLateTreesMinHealthy = 22;
// The share of the usual time the chain saves over the skip-ahead ring once the late rank is in
// (Communicator::late_pays_after_s): the smaller of the two emulated-TCP measurements, 0.38 at
// 4 hosts (236 ms against 149 after the arrival, usual time 227 ms) and about 0.18 at 8 (the
// chain lost 43 ms to the skip-ahead ring with the rank 200 ms late, usual time 295 ms, healthy
// ring modelled at 289 ms: 295 - 200 + 6 - 43 = 0.18 x 295).
constexpr double kLateChainGain = 0.2;

class LateChainAllreduce final : public CoreBase {
 public:
  // Checks the common parameters, late_inflight >= 1, late_wait_s >= 0 and that tag_span
  // leaves the embedded ring its tags.
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

 private:
  enum class Op : uint8_t {
    kArriveSend,
    kArriveRecv,
    kDecisionSend,
    kDecisionRecv,
    kInputSend,  // late rank: its input segment to the head
    kFinalRecv,  // late rank: a final segment from the tail
    kChainRecv,  // healthy: a late input (head) or D (others)
    kChainSend,  // healthy: D to the next healthy rank
    kFinalSend,  // tail: a final segment to a late rank
    kFold,       // head: D op= the next late input
    kFinish,     // healthy: P op D
    kGoSend,     // head: "go" to a late rank
    kGoRecv,     // late rank: "go" from the head
  };
  // The coordinator's view of a rank from the last census (RingParams::late_seen_s).
  enum class Seen : uint8_t { kUsual, kSuspect, kTooEarly };
  struct OpRec {
    Op op;
    int seg = -1;
    int who = -1;  // the peer's index: a rank (census), a late rank's index in late_ (chain)
    bool done = false;
  };

  Token add_op(Op op, int seg, int who);
  Status on_op(size_t idx, double now, ActionList* out);
  Status decide(double now, ActionList* out);
  // Coordinator: when the census decides if nobody else arrives (seen_as_, deadlines).
  double decision_time() const;
  Status begin(double now, ActionList* out);
  Status start_ring(double now, ActionList* out);
  // Forwards the ring's actions (peers mapped to ranks); starts the chain once the ring is done.
  Status forward_ring(Status st, ActionList* ring_out, double now, ActionList* out);
  Status start_chain(double now, ActionList* out);
  // The paths the late inputs take: the chain (each node's child is the next healthy rank in
  // chain_) or two binary trees (RingParams::late_trees: segment s goes down tree s & 1; tree 0
  // is the heap over chain_, tree 1 the heap over chain_ reversed, so the inner nodes of one are
  // leaves of the other and every uplink carries about S). Indices k are positions in a tree.
  int tree_of(int s) const { return trees_ ? (s & 1) : 0; }
  int tree_segs(int t) const;                                        // segments down tree t
  int seg_at(int t, int j) const { return trees_ ? t + 2 * j : j; }  // its j-th
  int input_kind(int t) const;                                       // the message kind down tree t
  int rank_at(int t, int k) const;
  int node_of(int t) const;  // our index in tree t (healthy ranks)
  int parent_of(int k) const { return k == 0 ? -1 : trees_ ? (k - 1) / 2 : k - 1; }
  int kids_of(int k, int kid[2]) const;
  // The healthy rank that sends segment s's final to the late ranks: the chain's tail, or a leaf
  // of the segment's tree (spread over the leaves).
  int final_sender(int s) const;
  int go_count() const { return trees_ && chain_.size() > 1 ? 2 : 1; }
  void pump(double now, ActionList* out);
  void maybe_done(double now, ActionList* out);
  int tag(int kind) const;
  // Segment s: elements seg_off_[s] .. seg_off_[s + 1] (late_segment_plan).
  size_t seg_count(int s) const { return seg_off_[s + 1] - seg_off_[s]; }
  size_t seg_offset(int s) const { return seg_off_[s]; }
  uint8_t* out_ptr(int s) const;
  const uint8_t* in_ptr(int s) const;
  uint8_t* slot_ptr(int s, int j);
  uint8_t* hdr_ptr(std::vector<uint8_t>* v, size_t i) { return v->data() + i * hdr_bytes_; }
  bool seg_finished(int s) const;
  void send(Token t, int peer, int kind, uint8_t* hdr, const void* payload, size_t bytes,
            ActionList* out);
  void recv(Token t, int peer, int kind, uint8_t* hdr, void* payload, size_t bytes,
            ActionList* out);

  RingParams p_;
  std::vector<uint8_t>* ring_scratch_;
  int n_, elem_;
  size_t hdr_bytes_;
  int coord_;  // the coordinator's rank (ring position 0)
  double t0_ = 0, deadline_ = 0, suspect_deadline_ = 0;
  std::vector<Seen> seen_as_;  // coordinator: by rank
  std::vector<double> seen_;   // coordinator: how late each rank arrived (-1: not yet)
  bool started_ = false, decided_ = false, ring_done_ = false, go_ = false, trees_ = false;
  int go_in_ = 0;              // late rank: go messages read
  std::vector<char> arrived_;  // coordinator: by rank
  std::vector<OpRec> ops_;
  size_t pending_ = 0;               // our operations posted and not completed
  std::vector<uint8_t> census_hdr_;  // one header per rank (arrival / decision)
  ContributionSet late_set_;
  std::vector<int> late_;     // E in ring order
  std::vector<int> healthy_;  // H in ring order
  int hpos_ = -1;             // our index in healthy_ (-1: late)
  NestedCore ring_;
  // The chain.
  std::vector<int> chain_;       // H rotated to start at the head
  int cpos_ = -1;                // our index in chain_
  int late_idx_ = -1;            // our index in late_ (late ranks)
  size_t seg_elems_ = 0;         // a whole segment (the largest)
  std::vector<size_t> seg_off_;  // nseg_ + 1 element offsets
  int nseg_ = 0, slots_ = 0, window_ = 1;
  std::vector<int> finish_;   // segments whose P op D waits for their forward to be posted
  std::vector<uint8_t> buf_;  // trees x slots_ x m segments (healthy)
  std::vector<uint8_t> seg_hdr_, in_hdr_;   // per segment (x m at the head): send / receive
  std::vector<uint8_t> go_hdr_;             // a root: one per late rank; a late rank: one per root
  std::vector<int> recvs_left_, fwd_left_;  // per segment
  std::vector<char> d_ready_, fwd_done_, fin_done_, input_sent_;
  // Per tree (index 0 only for the chain), counted in the tree's own segments.
  int next_recv_[2] = {0, 0}, next_fwd_[2] = {0, 0}, next_input_[2] = {0, 0};
  int fwd_flight_[2] = {0, 0}, input_flight_[2] = {0, 0};
  // next_final_: a healthy rank's next segment to check for a final it sends, or the late
  // rank's next final receive (a rank is one or the other).
  int next_final_ = 0, finals_in_ = 0, final_flight_ = 0;
};

}  // namespace skipring
