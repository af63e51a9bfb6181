// The ring all-reduce (reduce-scatter then allgather) as an I/O-free state machine.
//
// Events go in (start, a receive completed, a send completed, a reduction finished, the time
// now); actions come out (post a send, post a receive, reduce, copy, done). The same core is
// driven by the MPI progress engine (runtime/progress_engine.h), by the in-process harness of
// n virtual ranks with a virtual clock (tests/unit/harness.h) and under SimGrid SMPI
// (apps/skipring_sim, the same MPI engine).
//
// The implementation is in collectives/ring/ (one file per concern, private state types in
// collectives/ring/state.h); docs/skip_ahead.md describes the skip-ahead protocol, where the
// code for each part is, and which functions keep its invariants.
//
// Geometry: the buffer is split into n chunks (uneven when n does not divide count; empty
// chunks send nothing) and each chunk into segments of at most segment_bytes, which are
// pipelined. Chunk c is owned by ring position c. In reduce-scatter the partial for chunk c
// starts at position c+1 and travels the ring to its owner, each rank adding its input; in
// allgather the owner's final segment travels the ring once.
//
// Every message carries a WireHeader: collective sequence number, phase, chunk, segment and
// the contribution set (which ranks' inputs the payload sums). A rank merges a piece only when
// the sets are disjoint; the owner completes only on the full set; anything else is a
// protocol error, returned, never summed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/contribution_set.h"
#include "collectives/dtype.h"
#include "collectives/ring/state.h"
#include "collectives/wire_header.h"
#include "common/status.h"
#include "common/step_stats.h"
#include "common/token.h"

namespace skipring {

// Chunk and segment geometry, identical on every rank. With `lead_in`, a chunk of at least
// kLeadInMinSegments whole segments starts with a segment of half the size (the rest follow at
// full size): a segment's hops then end half a segment apart instead of together, so the links
// of consecutive hops do not idle for a latency in lockstep (RingParams::lead_in). Not below 16:
// at n = 64 (64 MiB, 8 segments of 128 KiB per chunk, SimGrid) the ninth segment it adds took
// the plain ring after a late arrival from 2.09 to 2.30 L.
constexpr int kLeadInMinSegments = 16;
class RingLayout {
 public:
  RingLayout(int n, size_t count, size_t elem_size, size_t segment_bytes, bool lead_in = false);
  int n() const { return n_; }
  size_t elem_size() const { return elem_; }
  size_t chunk_offset(int c) const;  // in elements
  size_t chunk_count(int c) const;
  int segments(int c) const;  // 0 for an empty chunk
  int first_segment(int c) const { return first_seg_[c]; }
  int total_segments() const { return first_seg_[n_]; }
  size_t segment_offset(int c, int g) const;
  size_t segment_count(int c, int g) const;
  size_t segment_elems() const { return seg_elems_; }  // the largest segment
  size_t lead_elems(int c) const;  // chunk c's first segment if it is a lead-in, else 0

 private:
  int n_;
  size_t count_, elem_, seg_elems_;
  bool lead_in_;
  std::vector<int> first_seg_;
};

struct RingParams {
  int rank = 0;           // this rank (communicator rank)
  std::vector<int> ring;  // ring order: ring[i] is the rank at position i; size n
  size_t count = 0;
  DType dtype = DType::kFloat;
  ROp op = ROp::kSum;
  const void* sendbuf = nullptr;  // == recvbuf for in place
  void* recvbuf = nullptr;
  size_t segment_bytes = 256 * 1024;
  int depth = 8;  // receive slots / send slots per direction
  uint32_t seq = 0;
  // Skip-ahead (reduce-scatter): forward without the predecessor's piece once it is later
  // than skip_threshold_s after this rank was ready for it. The driver derives the threshold
  // from alpha * T + T_trans (straggler/step_timer.h).
  bool skip = false;
  double skip_threshold_s = 1e-3;
  // Skip-ahead's allgather once a collective is disturbed (a rank skipped, was skipped, was
  // bypassed, received a late or redirected piece): false routes it around a late rank (the
  // owner sends the late rank each segment, its predecessor forwards past it); true makes
  // every owner that is not itself late send its final segments to every rank directly. Same
  // bytes per rank; direct takes one hop instead of n - 1 forwards, which pays on one host (no
  // owner link to saturate, and on oversubscribed cores every forward waits for its rank to be
  // scheduled), while routing keeps the owners' links free on a network. Ignored without skip.
  bool direct_allgather = false;
  // With skip: step-0 sends wait until this many polls in a row brought no control message, so
  // that a late rank reads the skip notices queued for it first and sends those pieces straight
  // to their owners. On one host Open MPI moves queued shared-memory fragments into its matching
  // engine a few dozen per poll: with 1, a rank arriving 50 ms late read none of the 128 notices
  // waiting for it (all its step-0 pieces then went through its successor); with 4, 127. On a
  // network each further read costs a round of polling in which the late rank sends nothing
  // (SimGrid, n = 16: 14.4 -> 24.4 ms after the late arrival with 4), so the driver asks for 4
  // only when every rank is on one host.
  int quiet_polls = 1;
  // The late path (collectives/late_chain.h; not read by the ring itself; plan_late_path in
  // collectives/late_plan.h sets them): how long the census's coordinator waits for every rank
  // to arrive before it takes the missing ones out, a late rank's piece sends in flight and the
  // late path's segment.
  double late_wait_s = 0;
  int late_inflight = 1;
  size_t late_segment_bytes = 0;  // 0: segment_bytes
  // The coordinator's memory of the last census (the driver keeps it; other ranks ignore it):
  // how late each rank arrived, in seconds after the coordinator itself (LateChainAllreduce::
  // lateness(); empty or < 0: not known). A rank that came later than late_wait_s last time (a
  // "suspect") is taken out after late_wait_suspect_s once every other rank is in; any other
  // rank gets late_wait_s.
  std::vector<double> late_seen_s;
  double late_wait_suspect_s = 0;
  // The census's coordinator (a rank; -1: the rank at ring position 0). Every rank must pass the
  // same: the driver takes it from the last decision (LateChainAllreduce::next_coordinator()),
  // which moves the role off a coordinator that came last, so that a straggler at ring
  // position 0 is taken out like any other from the next call on.
  int late_coord = -1;
  // How many earlier decisions took each rank out (the driver counts them from the decisions, so
  // every rank has the same; empty: none known). A coordinator handing its role on picks, after
  // it in ring order, the healthy rank taken out least often: not a straggler that happened to
  // be on time in this call.
  std::vector<uint32_t> late_excluded_counts;
  // How long this rank waited for the last decision after it arrived, if that decision came
  // from this call's coordinator (< 0: not known). Sent in the arrival header: a coordinator
  // every other rank waited for, more than twice late_wait_s, came late itself (the decision
  // comes at most late_wait_s after it arrives), and hands its role on.
  double late_my_wait_s = -1;
  // Across hosts (the driver sets it where the ring spans more than one host): each chunk of at
  // least kLeadInMinSegments segments starts with half a segment (RingLayout). Under SimGrid
  // (n = 16, 64 MiB: 16 segments per chunk, rank 1 20 ms late) the plain ring took 2.11 L after
  // the arrival instead of 2.24 L; without a straggler it is unchanged. Identical on every rank
  // (from the topology).
  bool lead_in = false;
  // The hosts are joined by TCP sockets (no RDMA NIC on some host, the MPI transport; never
  // under SimGrid): cross-host ring segments of kSocketSegmentBytes (cross_host_segment_bytes).
  // Identical on every rank (from the topology and the agreed transport).
  bool socket_links = false;
  // Tags the transport can carry: 0 .. tag_span - 1 (MPI_TAG_UB differs between PMLs: UCX's
  // is far below ob1's). tag_span - 1 is the control tag; segments grow if needed so that the
  // data tags fit below it.
  int tag_span = 1 << 28;
};

// The message tag of a ring all-reduce data message: kind 0 reduce-scatter piece, 1 allgather
// segment, 2 piece to the owner, 3 redirect ack (collectives/ring/internal.h). Consecutive
// collectives (sequence numbers) use disjoint tags. They were made disjoint for the late
// broadcast (removed), where a healthy rank could finish a collective and send messages of the
// next one while an owner still had a receive from any source posted in this one. Kept: under
// the late path (late_chain.h), which embeds this ring, ranks also leave a collective at
// different times, and nobody has shown that no any-source receive of one collective can then
// meet a message of the next; the parity costs one bit of tag space. Ranks are never two
// collectives apart (finishing one takes every rank's input to it).
int ring_data_tag(uint32_t seq, int seg_id, int kind);

// The ring's segment across hosts: at most `max_bytes` (SKIPRING_SEGMENT_BYTES), and small
// enough that a chunk of `chunk_bytes` has at least kCrossHostMinSegments segments, but not
// below kCrossHostSegmentFloor. The 2(n-1) hops of the ring fill its pipeline in about
// 2 * segment / chunk of L = (n-1)/n * S / B after a late arrival, whatever n: with 256 KiB
// segments a 1 MiB chunk (64 MiB at n = 64) has 4, so the plain ring took 2.60 L after a late
// arrival under SimGrid, 2.09 L with 128 KiB (skip-ahead 1.80 -> 1.72 L). Chunks of 2 MiB and
// more keep `max_bytes`: at n = 16, 64 MiB, halving the segment made skip-ahead slower (1.55 ->
// 1.59 L after the arrival) for a ring gain of 0.1 L. One host (`hosts` <= 1) keeps `max_bytes`
// throughout.
//
// Hosts joined by sockets (`socket_links`: TCP, no RDMA NIC; RingParams::socket_links) take
// kSocketSegmentBytes instead for chunks below kSocketCutMaxSettings x max_bytes (8 MiB by
// default): under Open MPI's TCP BTL eager limit (64 KiB with its headers), a segment
// streams without the rendezvous round trip a larger message needs (request to send, then its
// acknowledgement, which travels back behind the receiver's own outgoing data in the link's
// queue). 4 emulated hosts x 1 rank at 1 Gbit/s (scripts/vcluster.sh), 4 MiB, plain ring:
// 56-58 ms with 60 KiB segments against 63-73 ms with 128 KiB (the wire's floor 50 ms), as fast
// as raising Open MPI's eager limit to 1 MiB. At 16 MiB (4 MiB chunks; the late path's
// reduce-scatter among 3 healthy ranks, 5.3 MiB) 60 KiB against 256 KiB: the plain ring 217-219
// against 229-231 ms, the late path 80 / 200 ms late 178.5 / 160.4 against 198.8 / 179.5 ms
// after the arrival (docs/benchmarks.md, "Segments across hosts joined by TCP"). Chunks of
// 8 MiB and more keep 256 KiB: at 64 MiB (16 MiB chunks) 60 KiB took 1.14x gloo's time through
// the torch backend against 0.94x.
constexpr size_t kCrossHostMinSegments = 8;
constexpr size_t kCrossHostSegmentFloor = 128 * 1024;
constexpr size_t kSocketSegmentBytes = 60 * 1024;
constexpr size_t kSocketCutMaxSettings = 32;
size_t cross_host_segment_bytes(size_t max_bytes, size_t chunk_bytes, size_t hosts,
                                bool socket_links);

// Checks what every all-reduce core needs: the ring is a permutation holding `rank`, the op is
// defined on the type, buffers are present when count > 0.
Status validate_common(const RingParams& p, std::string* why);

class RingAllreduce final : public CoreBase {
 public:
  // Checks the parameters (ring is a permutation containing rank, op valid on dtype, ...).
  static Status validate(const RingParams& p, std::string* why);
  // segment_bytes, raised where needed so that every message tag of the collective is distinct
  // within tag_span.
  static size_t effective_segment_bytes(const RingParams& p);

  // `scratch` is reused across collectives to avoid allocation; it is resized as needed and
  // must outlive this object.
  RingAllreduce(const RingParams& p, std::vector<uint8_t>* scratch);

  Status start(double now, ActionList* out) override;
  Status on_recv(Token t, size_t payload_bytes, double now, ActionList* out) override;
  Status on_send(Token t, double now, ActionList* out) override;
  Status on_reduce(Token t, double now, ActionList* out) override;
  // Timers: the skip rule, the bypass request, step 0's deferred sends.
  Status on_time(double now, ActionList* out) override;
  double next_deadline() const override;

  std::string describe() const override;
  // The watchdog's text: the predecessor's missing ring pieces (and whether it has sent
  // anything in this collective), the inputs our chunk still lacks, the allgather segments
  // not arrived and their chunks' owners.
  std::string describe_wait(double now) const override;
  const RingLayout& layout() const { return layout_; }

 private:
  using RecvOp = ring::RecvOp;
  using SendOp = ring::SendOp;
  using AuxOp = ring::AuxOp;
  using AuxKind = ring::AuxKind;
  using OwnerItem = ring::OwnerItem;

  // --- ring_allreduce.cpp: start, buffers, headers, completion
  void init_step_records();
  // Builds recvs_, the expected receive sequence; returns the number of allgather receives.
  size_t build_receive_sequence();
  // Carves the scratch buffer into slots and header buffers; sets up the per-segment state.
  void carve_scratch(size_t ag_recvs);
  void open_control_channels(double now, ActionList* out);
  StepRecord& step_record(const RecvOp& r);
  void record_piece_waits();
  uint8_t* seg_ptr(void* base, int c, int g) const;
  const uint8_t* input_ptr(int c, int g) const;
  void write_header(uint8_t* hdr, Phase phase, int chunk, int seg, const ContributionSet& set,
                    uint8_t flags = 0, uint32_t route = 0);
  Status check_header(const uint8_t* hdr, Phase phase, int chunk, int seg, ContributionSet* set);
  void maybe_done(double now, ActionList* out);
  // Every event handler's epilogue: the allgather window's state (sync_ag_window), then the
  // completion check. Kept apart from maybe_done so that the completion check has no side
  // effect of its own.
  void finish_event(double now, ActionList* out);
  int pos_of(int rank) const;
  int tag_for(int kind, int seg_id) const;
  uint8_t* slot_hdr(uint8_t* base, int slot) const;
  uint8_t* slot_payload(uint8_t* base, int slot) const;
  uint8_t* recv_slot_base(int slot) const;
  uint8_t* send_slot_base(int slot) const;
  // Cancels a posted receive (it no longer counts as pending); cancel_aux also marks the
  // auxiliary receive so that a completion racing the cancel is ignored.
  void cancel_op(Token t, ActionList* out);
  void cancel_aux(int aux, ActionList* out);

  // --- reduce_scatter.cpp: the receive window, ring sends, reductions in receive order
  void post_receives(double now, ActionList* out);
  // Posts allgather receive i if it is admitted; false if it must wait.
  bool post_ag_recv(size_t i, double now, ActionList* out);
  // Posts the admitted allgather receives after next_post_ (unwindowed receives only).
  void post_ag_out_of_order(double now, ActionList* out);
  // Opens the allgather receive window (Mode::ag_open) once this rank is disturbed or its next
  // allgather receive has waited ag_stall_deadline() for the window, and posts what it can.
  void sync_ag_window(double now, ActionList* out);
  // When a windowed allgather receive that is due stops waiting for the window (infinity when
  // none waits or the window is open).
  double ag_stall_deadline() const;
  // A receive slot for the next ring piece (the window may grow), -1 when there is none.
  int take_recv_slot();
  Status on_ring_piece(size_t idx, double now, ActionList* out);
  Status on_piece_reduced(size_t idx, double now, ActionList* out);
  void post_send(Phase phase, int record, int c, int g, uint8_t* hdr, const void* payload, int slot,
                 double now, ActionList* out, bool reads_input = false, int peer = -1);
  Status start_reduces(double now, ActionList* out);
  void advance_wait_cursor();
  // Reduce-scatter step 0: our own input for the chunk before ours goes to the successor.
  void send_first_pieces(double now, ActionList* out);

  // --- allgather.cpp: routes, forwarding, per-peer queues, direct
  // Sends an allgather segment to `peer`: posted now, or once a straggler is around, queued
  // behind the segments already going to that peer (at most kAgInFlight in flight per peer).
  void send_ag(int record, int c, int g, uint8_t* hdr, const void* payload, int peer, double now,
               ActionList* out);
  void pump_ag(int peer, double now, ActionList* out);
  // Passes an allgather segment on, as its header's route says (ring, or around a late rank).
  void forward_ag(size_t idx, double now, ActionList* out);
  // The ring position an allgather segment of chunk `chunk` goes to from position `from` when
  // it is routed around rank `around` (-1: none); -1 when that would be the owner.
  int ag_next(int from, int chunk, int around) const;
  // Sends a completed segment of our chunk: around the late rank we know of (and to it
  // directly), to every rank (direct allgather), or to the successor.
  void send_own_segment(int g, double now, ActionList* out);
  // Whether the allgather receive `r` may be posted now.
  bool ag_recv_admitted(const RecvOp& r) const;
  Status on_ag_segment(size_t idx, double now, ActionList* out);

  // --- skip.cpp: the skip rule, notices, acks, bypass, control channels
  int add_aux(AuxKind kind, int c, int g);
  // Posts the send of aux op `aux` (header: `hdr`, or the op's own header when null).
  void post_aux_send(int aux, int peer, int tag, const void* payload, size_t bytes, double now,
                     ActionList* out, const uint8_t* hdr = nullptr);
  void post_ctrl_recv(int channel, double now, ActionList* out);
  void send_ctrl(int channel, uint8_t flags, int c, int g, double now, ActionList* out,
                 const ContributionSet* set = nullptr);
  int ctrl_tag(int channel) const { return p_.tag_span - 1 - channel; }
  // Own contribution for a ring piece we will not get (skip or predecessor bypassed us).
  void forward_own(size_t idx, double now, ActionList* out);
  void piece_emitted(double now, ActionList* out);
  void resolve_bypassed(size_t idx, double now, ActionList* out);
  void resolve_bypassed_unposted(double now, ActionList* out);
  // Sends our piece for (c, g): to the successor, or straight to the owner plus a redirect
  // ack to the successor when the successor asked for that.
  void emit_piece(int record, int c, int g, uint8_t* hdr, const void* payload, int slot,
                  const ContributionSet& set, bool reads_input, double now, ActionList* out);
  void bypass_to_owner(int c, int g, uint8_t* hdr, const void* payload, int slot,
                       const ContributionSet& set, bool reads_input, double now, ActionList* out);
  void redirect_to_owner(int c, int g, uint8_t* hdr, const void* payload, int slot,
                         const ContributionSet& set, bool reads_input, double now, ActionList* out);
  // A piece that arrives after we skipped it goes to the owner unchanged.
  void forward_late_piece(size_t idx, uint8_t* hdr, double now, ActionList* out);
  // How long a posted ring piece may be missing before it is skipped (grows with the step).
  double piece_threshold(const RecvOp& r) const;
  // When a posted ring piece that has not arrived gets skipped.
  double skip_deadline(const RecvOp& r) const;
  // The skip rule and the bypass request, on each timer call.
  Status check_skips(double now, ActionList* out);
  Status skip_piece(size_t idx, double now, ActionList* out);
  void resolve_rs_recv(double now, ActionList* out);
  // A skip-ahead message completed (sent, or received: control, ack, to-owner piece).
  Status on_aux(size_t aux, size_t payload_bytes, double now, ActionList* out);
  Status on_control(size_t aux, double now, ActionList* out);
  Status on_bypass_request(double now, ActionList* out);
  void on_notice(int seg_id);
  Status on_bypassed(int seg_id, double now, ActionList* out);
  Status on_ack(size_t aux, double now, ActionList* out);
  Status on_to_owner_sent(size_t aux, double now, ActionList* out);

  // --- owner.cpp: the owner's merge and its receives for to-owner pieces
  Status owner_enqueue(int g, OwnerItem item, double now, ActionList* out);
  Status owner_merge(int g, double now, ActionList* out);
  void post_to_owner_recvs(double now, ActionList* out);
  Status on_owner_merged(int g, double now, ActionList* out);
  Status on_to_owner_piece(size_t aux, size_t payload_bytes, double now, ActionList* out);

  // --- late.cpp: the late rank's pieces to the owners go out chunk by chunk, a few at a time
  // Queues the to-owner piece `piece` (chunk c, segment g) among the paced ones.
  void pace_piece(int piece, int c, int g, const uint8_t* hdr, const void* payload, double now,
                  ActionList* out);
  void send_paced(double now, ActionList* out);
  // With step 0's sends deferred: whether this poll brought no new control message for the
  // RingParams::quiet_polls-th time in a row.
  bool first_sends_due();

  RingParams p_;
  RingLayout layout_;
  int n_;
  int pos_;  // ring position of this rank
  int pred_, succ_;
  size_t hdr_bytes_;
  size_t slot_bytes_;
  bool in_place_;

  std::vector<uint8_t>* scratch_;
  uint8_t* recv_slots_ = nullptr;
  uint8_t* send_slots_ = nullptr;
  uint8_t* owner_slots_ = nullptr;  // owner: pieces coming straight to it
  uint8_t* hdr_pool_ = nullptr;
  uint8_t* first_hdrs_ = nullptr;  // headers of our step-0 sends
  uint8_t* owner_hdrs_ = nullptr;  // headers of the allgather sends of our own chunk
  size_t hdr_area_ = 0;            // header area per slot (header right-aligned in it)
  std::vector<int> free_recv_slots_, free_send_slots_;

  std::vector<RecvOp> recvs_;
  size_t next_post_ = 0;    // first receive not yet posted
  size_t wait_cursor_ = 0;  // first receive whose arrival is not yet accounted as wait
  double wait_clock_ = 0;
  int ag_posted_ = 0;                // AG receives posted and not yet arrived
  double ag_moved_ = 0;              // last time an AG receive was posted or arrived
  size_t ag_blocked_at_ = SIZE_MAX;  // the AG receive post_receives last stopped at ...
  double ag_blocked_since_ = 0;      // ... since when
  size_t reduce_cursor_ = 0;         // next ring piece to reduce, in receive-sequence order
  int awaiting_reduce_ = 0;          // ring pieces arrived and not yet reduced
  std::vector<SendOp> sends_;

  std::vector<AuxOp> aux_;
  std::vector<ring::SegmentState> seg_;  // per segment id
  std::vector<ring::OwnerPiece> owner_;  // per segment of our own chunk
  int rs_unresolved_ = 0;                // RS ring receives not yet arrived or acknowledged
  int rs_to_emit_ = 0;                   // ring pieces we still have to send on (or bypass)
  ring::ControlState ctrl_;
  ring::Mode mode_;
  // The skip timer runs per channel, not per posted receive: a piece is due a threshold after
  // max(its receive was posted, the predecessor's previous ring piece arrived). Receives are
  // posted a window ahead, so timing them from posting would skip the tail of every window.
  double t_pred_heard_ = 0;
  double t_pred_first_ = 0;  // when the predecessor's first ring piece of this collective came
  ring::FirstSends first_sends_;
  // A late rank we know of (communicator rank, -1: none): our successor once we bypass it, or
  // the rank a bypassed piece of our chunk names. Our completed segments go around it and to
  // it directly (docs/skip_ahead.md, "The allgather around the late rank").
  int late_rank_ = -1;
  // Being the late rank, our pieces for the owners go out chunk by chunk with at most
  // kPacedInFlight in flight, so that chunks complete one after another and their allgather
  // overlaps the rest of our sending (posted at once, every chunk completed at the end).
  std::vector<ring::PacedPiece> paced_;  // min-heap on order
  int paced_in_flight_ = 0;
  // Allgather sends once a straggler is around (Mode::ag_queued), per peer (communicator rank),
  // in the order they became sendable: the chunk that completed first crosses each link first
  // instead of sharing it with every segment posted after it (SimGrid, like TCP, shares a link
  // between all messages in flight on it).
  std::vector<std::deque<ring::QueuedSend>> ag_queue_;
  std::vector<int> ag_in_flight_;
  size_t ag_waiting_ = 0;                                   // sends in ag_queue_
  std::vector<std::unique_ptr<uint8_t[]>> overflow_slots_;  // receive slots beyond depth
  std::vector<std::unique_ptr<uint8_t[]>> overflow_send_;   // send slots beyond depth
  std::vector<double> piece_waits_;

  int pending_ = 0;  // receives + sends + reduces not finished
  ContributionSet scratch_set_;
};

}  // namespace skipring
