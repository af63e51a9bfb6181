// Ring all-reduce state machine (see ring_allreduce.h for the protocol).
#include "collectives/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace skipring {
namespace {

enum TokenKind : uint32_t {
  kTokRecv = 0,
  kTokSend = 1,
  kTokReduce = 2,        // ring piece reduction (index: receive)
  kTokAux = 3,           // skip-ahead protocol message (index: aux op)
  kTokOwnerReduce = 4,   // owner merge (index: owner segment)
};
constexpr uint32_t kTokShift = 29;
constexpr uint32_t kTokMask = (1u << kTokShift) - 1;
// Tag = 4 * segment id + kind; the control tags are tag_span - 1 .. tag_span - 3. Segments are made large enough
// that every tag of a collective is distinct (effective_segment_bytes), so tags never wrap.
constexpr int kTagRs = 0, kTagAg = 1, kTagExtra = 2, kTagAck = 3;
// A skipped piece still missing this many thresholds after it was due triggers the bypass.
constexpr double kBypassFactor = 4.0;
// Skip cascade suppression: a ring piece of reduce-scatter step s depends on s upstream ranks,
// and the rank next to a straggler skips it only after its own threshold, so the piece reaches
// us up to (threshold + one hop) late although our predecessor is fine. All timers of a
// window start at about the same time (receives are posted ahead), so without a margin every
// rank downstream of a straggler would skip its healthy predecessor too (measured: with one
// late rank of 4, all four ranks skipped each other). Step s therefore waits
// threshold * (1 + s * kStepGrace).
constexpr double kStepGrace = 0.5;
// The late rank's pieces to the owners in flight at once (RingAllreduce::send_paced).
constexpr int kPacedInFlight = 8;
// Allgather sends in flight per peer once a straggler is around (RingAllreduce::send_ag).
constexpr int kAgInFlight = 2;

Token make_token(TokenKind k, size_t idx) {
  return (static_cast<uint32_t>(k) << kTokShift) | static_cast<uint32_t>(idx);
}
TokenKind token_kind(Token t) { return static_cast<TokenKind>(t >> kTokShift); }
size_t token_index(Token t) { return t & kTokMask; }

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

// ---------------------------------------------------------------------------------------
RingLayout::RingLayout(int n, size_t count, size_t elem_size, size_t segment_bytes)
    : n_(n), count_(count), elem_(elem_size) {
  seg_elems_ = std::max<size_t>(1, segment_bytes / std::max<size_t>(1, elem_size));
  first_seg_.resize(n + 1);
  int acc = 0;
  for (int c = 0; c < n; ++c) {
    first_seg_[c] = acc;
    acc += segments(c);
  }
  first_seg_[n] = acc;
}

size_t RingLayout::chunk_offset(int c) const {
  const size_t base = count_ / n_, extra = count_ % n_;
  return c * base + std::min<size_t>(c, extra);
}

size_t RingLayout::chunk_count(int c) const {
  return count_ / n_ + (static_cast<size_t>(c) < count_ % n_ ? 1 : 0);
}

int RingLayout::segments(int c) const {
  return static_cast<int>((chunk_count(c) + seg_elems_ - 1) / seg_elems_);
}

size_t RingLayout::segment_count(int c, int g) const {
  const size_t start = g * seg_elems_;
  return std::min(seg_elems_, chunk_count(c) - start);
}

// ---------------------------------------------------------------------------------------
Status validate_common(const RingParams& p, std::string* why) {
  const int n = static_cast<int>(p.ring.size());
  if (n < 1) return *why = "empty ring", Status::kErrArg;
  std::vector<char> seen(n, 0);
  for (int r : p.ring) {
    if (r < 0 || r >= n || seen[r]) return *why = "ring order is not a permutation", Status::kErrArg;
    seen[r] = 1;
  }
  if (p.rank < 0 || p.rank >= n) return *why = "rank outside the ring", Status::kErrArg;
  if (!op_valid(p.op, p.dtype)) {
    *why = fmt::format("{} is not defined on {}", rop_name(p.op), dtype_name(p.dtype));
    return Status::kErrOp;
  }
  if (p.count > 0 && (p.recvbuf == nullptr || p.sendbuf == nullptr)) {
    return *why = "null buffer", Status::kErrBuffer;
  }
  return Status::kOk;
}

Status RingAllreduce::validate(const RingParams& p, std::string* why) {
  SKIPRING_CHECK(validate_common(p, why));
  if (p.depth < 1) return *why = "pipeline depth < 1", Status::kErrArg;
  if (p.tag_span < 1024) return *why = "tag space too small", Status::kErrArg;
  if (p.segment_bytes < dtype_size(p.dtype)) return *why = "segment too small", Status::kErrArg;
  return Status::kOk;
}

RingAllreduce::RingAllreduce(const RingParams& p, std::vector<uint8_t>* scratch)
    : p_(p),
      layout_(static_cast<int>(p.ring.size()), p.count, dtype_size(p.dtype),
              effective_segment_bytes(p)),
      n_(static_cast<int>(p.ring.size())),
      scratch_(scratch) {
  pos_ = pos_of(p_.rank);
  pred_ = p_.ring[(pos_ - 1 + n_) % n_];
  succ_ = p_.ring[(pos_ + 1) % n_];
  hdr_bytes_ = wire_header_bytes(n_);
  in_place_ = p_.sendbuf == p_.recvbuf;
  direct_ = p_.skip && p_.direct_allgather && n_ >= 3;
  scratch_set_ = ContributionSet(n_);
  stats_.seq = p_.seq;
  stats_.bytes = p_.count * layout_.elem_size();
  stats_.skip_threshold_s = p_.skip ? p_.skip_threshold_s : 0;
}

int RingAllreduce::pos_of(int rank) const {
  for (int i = 0; i < n_; ++i) {
    if (p_.ring[i] == rank) return i;
  }
  return -1;
}

int RingAllreduce::tag_for(int kind, int seg_id) const { return 4 * seg_id + kind; }

size_t RingAllreduce::effective_segment_bytes(const RingParams& p) {
  // At most (tag_span - 1) / 4 segments in all, each chunk rounding up by one.
  const size_t n = std::max<size_t>(1, p.ring.size());
  // (the top 3 tags are the control channels)
  const size_t max_segments = static_cast<size_t>(std::max(1, (p.tag_span - 4) / 4));
  const size_t elem = dtype_size(p.dtype);
  size_t seg = std::max(p.segment_bytes, elem);
  if (max_segments > n) {
    // Whole elements per segment, rounded up, so that no chunk needs more segments than its
    // share of the tag space.
    const size_t per_chunk_elems = p.count / n + 1;
    const size_t segs_per_chunk = max_segments / n;
    const size_t seg_elems = (per_chunk_elems + segs_per_chunk - 1) / segs_per_chunk;
    seg = std::max(seg, seg_elems * elem);
  }
  return seg;
}

Status RingAllreduce::fail(std::string why) {
  failed_ = true;
  error_ = fmt::format("rank {} seq {}: {}", p_.rank, p_.seq, why);
  return Status::kErrProtocol;
}

uint8_t* RingAllreduce::seg_ptr(void* base, int c, int g) const {
  return static_cast<uint8_t*>(base) + layout_.segment_offset(c, g) * layout_.elem_size();
}

const uint8_t* RingAllreduce::input_ptr(int c, int g) const {
  return seg_ptr(const_cast<void*>(p_.sendbuf), c, g);
}

uint8_t* RingAllreduce::recv_slot_base(int slot) const {
  if (slot < p_.depth) return recv_slots_ + slot * slot_bytes_;
  return overflow_slots_[slot - p_.depth].get();
}

uint8_t* RingAllreduce::send_slot_base(int slot) const {
  if (slot < p_.depth) return send_slots_ + slot * slot_bytes_;
  return overflow_send_[slot - p_.depth].get();
}

uint8_t* RingAllreduce::slot_hdr(uint8_t* base, int slot) const {
  return base + slot * slot_bytes_ + hdr_area_ - hdr_bytes_;
}

uint8_t* RingAllreduce::slot_payload(uint8_t* base, int slot) const {
  return base + slot * slot_bytes_ + hdr_area_;
}

void RingAllreduce::write_header(uint8_t* hdr, Phase phase, int chunk, int seg,
                                 const ContributionSet& set, uint8_t flags, uint32_t route) {
  encode_wire_header(hdr, WireExpect{p_.seq, static_cast<uint8_t>(phase),
                                     static_cast<uint32_t>(chunk), static_cast<uint32_t>(seg)},
                     set, flags, route);
}

Status RingAllreduce::check_header(const uint8_t* hdr, Phase phase, int chunk, int seg,
                                   ContributionSet* set) {
  const std::string why = decode_wire_header(
      hdr, n_,
      WireExpect{p_.seq, static_cast<uint8_t>(phase), static_cast<uint32_t>(chunk),
                 static_cast<uint32_t>(seg)},
      set);
  return why.empty() ? Status::kOk : fail(why);
}

double RingAllreduce::piece_threshold(const RecvOp& r) const {
  return p_.skip_threshold_s * (1.0 + kStepGrace * r.step);
}

double RingAllreduce::skip_deadline(const RecvOp& r) const {
  if (pred_absent_) return r.t_posted;
  return std::max(r.t_posted, t_pred_heard_) + piece_threshold(r);
}

double RingAllreduce::next_deadline() const {
  double t = std::numeric_limits<double>::infinity();
  if (!p_.skip || done_ || failed_) return t;
  if (first_sends_deferred_) return -t;  // at the next poll
  if (pred_silent_ && !pred_absent_) {
    t = std::min(t, t_pred_heard_ + kBypassFactor * p_.skip_threshold_s);
  }
  for (size_t i = wait_cursor_; i < next_post_; ++i) {
    const RecvOp& r = recvs_[i];
    if (r.phase != Phase::kReduceScatter) break;
    if (r.state == OpState::kPosted && !r.skipped && r.chunk != pos_) {
      t = std::min(t, skip_deadline(r));
    }
    if (r.state == OpState::kPosted && r.skipped && side_channels_ && !bypass_requested_) {
      t = std::min(t, r.t_posted + kBypassFactor * piece_threshold(r));
    }
  }
  return t;
}

Status RingAllreduce::start(double now, ActionList* out) {
  stats_.start = now;
  wait_clock_ = now;
  t_pred_heard_ = now;
  if (p_.count == 0 || n_ == 1) {
    if (p_.count > 0 && !in_place_) {
      Action a;
      a.kind = Action::Kind::kCopy;
      a.dst = p_.recvbuf;
      a.a = p_.sendbuf;
      a.payload_bytes = p_.count * layout_.elem_size();
      out->push_back(a);
    }
    maybe_done(now, out);
    return Status::kOk;
  }

  // Step records: RS steps 0..n-2, then AG steps 0..n-2.
  stats_.steps.resize(2 * (n_ - 1));
  for (int s = 0; s < n_ - 1; ++s) {
    StepRecord& rs = stats_.steps[s];
    rs.phase = Phase::kReduceScatter;
    rs.step = s;
    rs.chunk = (pos_ - 2 - s + 2 * n_) % n_;
    rs.from = pred_;
    rs.to = s == n_ - 2 ? -1 : succ_;
    StepRecord& ag = stats_.steps[n_ - 1 + s];
    ag.phase = Phase::kAllgather;
    ag.step = s;
    ag.chunk = (pos_ - 1 - s + 2 * n_) % n_;
    ag.from = pred_;
    ag.to = (pos_ + 1) % n_ == ag.chunk ? -1 : succ_;
  }

  // The expected receive sequence, in blocks of `depth / 2` segments: block b holds segments
  // [b·k, (b+1)·k) of step 0, then the same segments of step 1, ... of step n-2. A piece of
  // step s then follows the piece of step s-1 it depends on by k receives, so k pieces are in
  // flight on every link (segment-major order, k = 1, made the posted receives a dependency
  // chain: one piece in flight per link, 2.9 L after a late arrival under SimGrid). Deadlock-
  // free with a bounded window as long as k < depth: the piece a rank produces from its
  // receive i is receive i + k of its successor, inside the successor's window. Reduce-scatter
  // pieces come before allgather pieces, which are step-major (chunk by chunk: they need no
  // slots, so nothing bounds how far a chunk runs ahead).
  const int start_chunk = (pos_ - 1 + n_) % n_;
  size_t ag_recvs = 0;
  int max_segs = 0;
  for (int c = 0; c < n_; ++c) max_segs = std::max(max_segs, layout_.segments(c));
  const int block = std::max(1, p_.depth / 2);
  for (int g0 = 0; g0 < max_segs; g0 += block) {
    for (int s = 0; s < n_ - 1; ++s) {
      const int c = (pos_ - 2 - s + 2 * n_) % n_;
      for (int g = g0; g < std::min(g0 + block, layout_.segments(c)); ++g) {
        recvs_.push_back(RecvOp{Phase::kReduceScatter, s, c, g, layout_.first_segment(c) + g});
      }
    }
  }
  rs_unresolved_ = static_cast<int>(recvs_.size());
  for (int s = 0; s < n_ - 1; ++s) {
    const int c = (pos_ - 1 - s + 2 * n_) % n_;
    for (int g = 0; g < layout_.segments(c); ++g) {
      recvs_.push_back(RecvOp{Phase::kAllgather, s, c, g, layout_.first_segment(c) + g});
      ++ag_recvs;
    }
  }

  // Scratch: receive slots, send slots, owner extra slots (header + payload, payload 64-byte
  // aligned), then header-only buffers for the starter's sends, the owner's allgather sends
  // and every allgather receive.
  const size_t hdr_area = round_up(hdr_bytes_, 64);
  hdr_area_ = hdr_area;
  const size_t max_seg = std::min(layout_.segment_elems(), layout_.chunk_count(0));
  slot_bytes_ = hdr_area + round_up(max_seg * layout_.elem_size(), 64);
  const int depth = p_.depth;
  const size_t n_hdrs = layout_.segments(start_chunk) + layout_.segments(pos_) + ag_recvs;
  // Owner: one slot per segment of its chunk for pieces coming straight to it (a bounded pool
  // could deadlock: its senders hold their own slots until it accepts).
  const int extra_slots = p_.skip ? layout_.segments(pos_) : 0;
  const size_t need = 64 + (2 * depth + extra_slots) * slot_bytes_ + n_hdrs * hdr_area;
  if (scratch_->size() < need) scratch_->resize(need);
  uint8_t* base = scratch_->data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  recv_slots_ = base;
  send_slots_ = base + depth * slot_bytes_;
  extra_slots_ = base + 2 * depth * slot_bytes_;
  hdr_pool_ = base + (2 * depth + extra_slots) * slot_bytes_;
  for (int i = depth - 1; i >= 0; --i) {
    free_recv_slots_.push_back(i);
    free_send_slots_.push_back(i);
  }
  size_t hdr_next = 0;
  auto take_hdr = [&]() { return hdr_pool_ + (hdr_next++) * hdr_area; };
  local_done_.assign(layout_.total_segments(), 0);
  rs_sent_.assign(layout_.total_segments(), 0);
  redirect_.assign(layout_.total_segments(), 0);
  owner_.resize(layout_.segments(pos_));
  for (auto& o : owner_) {
    o.acc = ContributionSet(n_);
    o.acc.add(p_.rank);
  }

  // Control channels, open for the whole reduce-scatter so that no control message is ever
  // left unread: from the successor (skip notices) always; with skip-ahead on and at least 3
  // ranks also from the predecessor (bypassed pieces) and from the rank two ahead (bypass
  // requests).
  bypassed_.assign(layout_.total_segments(), 0);
  // Every piece we send in the reduce-scatter: the relayed ones and our step-0 ones (those may
  // be sent after relayed ones: send_first_pieces waits for queued notices). fwd-done follows
  // the last of them, after any "bypassed" message.
  for (const RecvOp& r : recvs_) {
    if (r.phase == Phase::kReduceScatter && r.chunk != pos_) ++rs_to_emit_;
  }
  rs_to_emit_ += layout_.segments(start_chunk);
  open_[kBack] = true;
  post_ctrl_recv(kBack, now, out);
  side_channels_ = p_.skip && n_ >= 3;
  if (side_channels_) {
    open_[kFwd] = open_[kFar] = true;
    post_ctrl_recv(kFwd, now, out);
    post_ctrl_recv(kFar, now, out);
    if (rs_to_emit_ == 0) {
      fwd_done_sent_ = true;
      send_ctrl(kFwd, kFlagFwdDone, -1, -1, now, out);
    }
  }

  // Reduce-scatter, step 0 (send_first_pieces): headers from the pool, sent now or, with
  // skip-ahead on, once the queued notices are read.
  first_hdrs_ = take_hdr();
  hdr_next += layout_.segments(start_chunk) - 1;
  owner_hdrs_ = hdr_pool_ + hdr_next * hdr_area;
  hdr_next += layout_.segments(pos_);
  for (auto& r : recvs_) {
    if (r.phase == Phase::kAllgather) r.header = take_hdr();
  }
  if (p_.skip) {
    first_sends_deferred_ = true;
  } else {
    send_first_pieces(now, out);
  }
  post_receives(now, out);
  owner_post_extras(now, out);
  resolve_rs_recv(now, out);  // a rank with nothing to receive is done with notices at once
  maybe_done(now, out);
  return Status::kOk;
}

void RingAllreduce::cancel_op(Token t, ActionList* out) {
  Action c;
  c.kind = Action::Kind::kCancel;
  c.token = t;
  out->push_back(c);
  --pending_;
}

void RingAllreduce::cancel_aux(int aux, ActionList* out) {
  cancel_op(make_token(kTokAux, static_cast<size_t>(aux)), out);
  aux_[aux].cancelled = true;
}

void RingAllreduce::send_first_pieces(double now, ActionList* out) {
  first_sends_deferred_ = false;
  const int c = (pos_ - 1 + n_) % n_;
  ContributionSet mine(n_);
  mine.add(p_.rank);
  for (int g = 0; g < layout_.segments(c); ++g) {
    uint8_t* hdr = first_hdrs_ + static_cast<size_t>(g) * hdr_area_;
    emit_piece(0, c, g, hdr, input_ptr(c, g), -1, mine, /*reads_input=*/true, now, out);
  }
}

void RingAllreduce::post_send(Phase phase, int record, int c, int g, uint8_t* hdr,
                              const void* payload, int slot, double now, ActionList* out,
                              bool reads_input, int peer) {
  SendOp s{phase, record, layout_.first_segment(c) + g, slot, false, now, reads_input};
  sends_.push_back(s);
  Action a;
  a.kind = Action::Kind::kSend;
  a.token = make_token(kTokSend, sends_.size() - 1);
  a.peer = peer >= 0 ? peer : succ_;
  a.tag = tag_for(phase == Phase::kReduceScatter ? kTagRs : kTagAg, s.seg_id);
  a.header = hdr;
  a.header_bytes = hdr_bytes_;
  a.payload = const_cast<void*>(payload);
  a.payload_bytes = layout_.segment_count(c, g) * layout_.elem_size();
  a.phase = static_cast<int8_t>(phase);
  a.step = static_cast<int16_t>(phase == Phase::kReduceScatter ? record : record - (n_ - 1));
  out->push_back(a);
  ++pending_;
  ++stats_.messages_sent;
}

int RingAllreduce::ag_next(int from, int chunk, int around) const {
  int to = (from + 1) % n_;
  if (p_.ring[to] == around) to = (to + 1) % n_;
  return to == chunk ? -1 : to;
}

void RingAllreduce::forward_ag(size_t idx, double now, ActionList* out) {
  const RecvOp& r = recvs_[idx];
  const uint32_t route = wire_route(r.header);
  // Sent by the owner to every rank (direct allgather): nothing to pass on.
  if (route & kRouteDirect) return;
  const int around = route & kRouteAround ? static_cast<int>(route & kRouteLateMask) - 1 : -1;
  if (around == p_.rank) return;  // the late rank: the owner sent it to us directly
  const int to = ag_next(pos_, r.chunk, around);
  if (to < 0) return;  // the owner has it
  send_ag(n_ - 1 + r.step, r.chunk, r.seg, r.header, seg_ptr(p_.recvbuf, r.chunk, r.seg),
          p_.ring[to], now, out);
}

void RingAllreduce::send_ag(int record, int c, int g, uint8_t* hdr, const void* payload,
                            int peer, double now, ActionList* out) {
  if (!ag_queued()) {
    post_send(Phase::kAllgather, record, c, g, hdr, payload, -1, now, out, false, peer);
    return;
  }
  if (ag_queue_.empty()) {
    ag_queue_.resize(n_);
    ag_in_flight_.assign(n_, 0);
  }
  ag_queue_[peer].push_back(QueuedSend{record, c, g, hdr, payload});
  ++ag_waiting_;
  pump_ag(peer, now, out);
}

void RingAllreduce::pump_ag(int peer, double now, ActionList* out) {
  std::deque<QueuedSend>& q = ag_queue_[peer];
  while (!q.empty() && ag_in_flight_[peer] < kAgInFlight) {
    const QueuedSend qs = q.front();
    q.pop_front();
    --ag_waiting_;
    ++ag_in_flight_[peer];
    post_send(Phase::kAllgather, qs.record, qs.chunk, qs.seg, qs.hdr, qs.payload, -1, now, out,
              false, peer);
    sends_.back().ag_peer = peer;
  }
}

void RingAllreduce::send_own_segment(int g, double now, ActionList* out) {
  const OwnerPiece& o = owner_[g];
  uint8_t* hdr = owner_hdrs_ + g * hdr_area_;
  const void* seg = seg_ptr(p_.recvbuf, pos_, g);
  if (goes_direct()) {
    // A straggler or late rank around: the final segment goes to every rank from us (one
    // hop instead of n - 1 forwards, none through a late or descheduled rank). All at once: a
    // window on these sends could deadlock against a receiver's window, which takes segments
    // in another order.
    write_header(hdr, Phase::kAllgather, pos_, g, o.acc, 0, kRouteDirect);
    ++stats_.direct_segments;
    for (int k = 1; k < n_; ++k) {
      post_send(Phase::kAllgather, n_ - 2, pos_, g, hdr, seg, -1, now, out, false,
                p_.ring[(pos_ + k) % n_]);
    }
    return;
  }
  // Around the late rank we know of, which gets the segment from us directly: its link then
  // carries its own pieces and nothing of the others' allgather. The choice is ours alone
  // (receivers take allgather segments from any source and forward as the header says).
  const int around = side_channels_ ? late_rank_ : -1;
  write_header(hdr, Phase::kAllgather, pos_, g, o.acc, 0,
               around >= 0 ? kRouteAround | static_cast<uint32_t>(around + 1) : 0);
  const int to = ag_next(pos_, pos_, around);
  if (to >= 0) send_ag(n_ - 2, pos_, g, hdr, seg, p_.ring[to], now, out);
  if (around >= 0) send_ag(n_ - 2, pos_, g, hdr, seg, around, now, out);
}

void RingAllreduce::post_receives(double now, ActionList* out) {
  while (next_post_ < recvs_.size()) {
    RecvOp& r = recvs_[next_post_];
    Action a;
    a.kind = Action::Kind::kRecv;
    a.token = make_token(kTokRecv, next_post_);
    a.peer = pred_;
    a.tag = tag_for(r.phase == Phase::kReduceScatter ? kTagRs : kTagAg, r.seg_id);
    a.header_bytes = hdr_bytes_;
    a.payload_bytes = layout_.segment_count(r.chunk, r.seg) * layout_.elem_size();
    if (r.phase == Phase::kReduceScatter) {
      if (bypassed_[r.seg_id]) {
        // The predecessor already sent this piece to the owner: only our own goes on.
        r.state = OpState::kFinished;
        r.t_posted = r.t_arrived = now;
        ++next_post_;
        --rs_unresolved_;
        forward_own(next_post_ - 1, now, out);
        advance_wait_cursor();
        resolve_rs_recv(now, out);
        continue;
      }
      if (free_recv_slots_.empty() && (overflow_slots_.size() < stats_.skips || pred_absent_)) {
        // Skipped receives keep their slots until the late rank answers; each skip lends the
        // window one more slot so the ring keeps moving around a late rank. Once the
        // predecessor is absent the window grows on demand: our own chunk's pieces from it
        // cannot be skipped, and each would otherwise hold a slot until it arrives (one per
        // segment: the window closed after `depth` segments and the ranks behind us started
        // skipping us in turn).
        overflow_slots_.emplace_back(new uint8_t[slot_bytes_]);
        free_recv_slots_.push_back(p_.depth + static_cast<int>(overflow_slots_.size()) - 1);
      }
      if (free_recv_slots_.empty()) break;
      r.slot = free_recv_slots_.back();
      free_recv_slots_.pop_back();
      a.header = slot_hdr(recv_slot_base(r.slot), 0);
      a.payload = slot_payload(recv_slot_base(r.slot), 0);
    } else {
      // Allgather lands in the user's buffer: only once our reduce-scatter work on that
      // segment no longer reads it (in place) and within the pipeline depth.
      // Direct allgather, once the collective is disturbed: chunks complete at different times
      // (a late rank's pieces reach one owner before another) and segments come from every
      // owner, so each is received as soon as it is sent instead of through a window that
      // would advance at the pace of the slowest chunk. Not on the late rank itself: there
      // the final segments would crowd out the partials it still needs.
      if ((ag_posted_ >= p_.depth && !ag_unwindowed()) || !local_done_[r.seg_id]) break;
      // With skip-ahead the owner routes each segment (ring, around a late rank, or direct):
      // exactly one message per segment reaches every rank, from whichever rank the route
      // names, and its header says where it goes on.
      if (side_channels_) a.peer = -1;
      ++ag_posted_;
      a.header = r.header;
      a.payload = seg_ptr(p_.recvbuf, r.chunk, r.seg);
    }
    StepRecord& rec = stats_.steps[(r.phase == Phase::kAllgather ? n_ - 1 : 0) + r.step];
    if (rec.t_start == 0) rec.t_start = now;
    r.state = OpState::kPosted;
    r.t_posted = now;
    out->push_back(a);
    ++pending_;
    ++next_post_;
  }
}

void RingAllreduce::advance_wait_cursor() {
  // Wait time = time this rank spent with nothing left to do on its receive sequence:
  // arrivals are accounted in sequence order.
  while (wait_cursor_ < recvs_.size() && recvs_[wait_cursor_].state >= OpState::kArrived) {
    const RecvOp& r = recvs_[wait_cursor_];
    const double w = std::max(0.0, r.t_arrived - wait_clock_);
    wait_clock_ = std::max(wait_clock_, r.t_arrived);
    StepRecord& rec = stats_.steps[(r.phase == Phase::kAllgather ? n_ - 1 : 0) + r.step];
    rec.wait_s += w;
    ++wait_cursor_;
  }
}

// ---------------------------------------------------------------------------------------
// Skip-ahead protocol
int RingAllreduce::add_aux(AuxKind kind, int c, int g) {
  AuxOp op;
  op.kind = kind;
  op.chunk = c;
  op.seg = g;
  op.seg_id = c >= 0 ? layout_.first_segment(c) + g : -1;
  aux_.push_back(std::move(op));
  return static_cast<int>(aux_.size()) - 1;
}

void RingAllreduce::post_aux_send(int aux, int peer, int tag, const void* payload, size_t bytes,
                                  double now, ActionList* out) {
  AuxOp& op = aux_[aux];
  op.t = now;
  Action a;
  a.kind = Action::Kind::kSend;
  a.token = make_token(kTokAux, aux);
  a.peer = peer;
  a.tag = tag;
  a.header = op.hdr.empty() ? nullptr : op.hdr.data();
  a.header_bytes = hdr_bytes_;
  a.payload = const_cast<void*>(payload);
  a.payload_bytes = bytes;
  out->push_back(a);
  ++pending_;
}

void RingAllreduce::post_ctrl_recv(int channel, double now, ActionList* out) {
  const int aux = add_aux(AuxKind::kCtrlRecv, -1, -1);
  aux_[aux].channel = channel;
  aux_[aux].hdr.assign(hdr_bytes_, 0);
  aux_[aux].t = now;
  Action a;
  a.kind = Action::Kind::kRecv;
  a.token = make_token(kTokAux, aux);
  a.peer = channel == kBack ? succ_ : channel == kFwd ? pred_ : p_.ring[(pos_ + 2) % n_];
  a.tag = ctrl_tag(channel);
  a.header = aux_[aux].hdr.data();
  a.header_bytes = hdr_bytes_;
  out->push_back(a);
  ++pending_;
}

void RingAllreduce::send_ctrl(int channel, uint8_t flags, int c, int g, double now,
                              ActionList* out, const ContributionSet* set) {
  const int aux = add_aux(AuxKind::kCtrlSend, c, g);
  aux_[aux].hdr.assign(hdr_bytes_, 0);
  scratch_set_.clear();
  write_header(aux_[aux].hdr.data(), Phase::kReduceScatter, std::max(c, 0), std::max(g, 0),
               set != nullptr ? *set : scratch_set_, flags);
  const int peer =
      channel == kBack ? pred_ : channel == kFwd ? succ_ : p_.ring[(pos_ - 2 + 2 * n_) % n_];
  post_aux_send(aux, peer, ctrl_tag(channel), nullptr, 0, now, out);
}

void RingAllreduce::piece_emitted(double now, ActionList* out) {
  // Once every ring piece we pass on has gone, no more bypass messages can follow.
  if (--rs_to_emit_ == 0 && side_channels_ && !fwd_done_sent_) {
    fwd_done_sent_ = true;
    send_ctrl(kFwd, kFlagFwdDone, -1, -1, now, out);
  }
}

void RingAllreduce::emit_piece(int record, int c, int g, uint8_t* hdr, const void* payload,
                               int slot, const ContributionSet& set, bool reads_input,
                               double now, ActionList* out) {
  const int seg_id = layout_.first_segment(c) + g;
  rs_sent_[seg_id] = 1;
  // Never bypass our successor for a piece we were bypassed for ourselves: at most one rank is
  // routed around per segment, which keeps the allgather routes consistent.
  const bool bypass = bypass_ && !redirect_[seg_id] && p_.ring[c] != succ_ && !bypassed_[seg_id];
  if (!redirect_[seg_id] && !bypass) {
    write_header(hdr, Phase::kReduceScatter, c, g, set);
    post_send(Phase::kReduceScatter, record, c, g, hdr, payload, slot, now, out, reads_input);
    piece_emitted(now, out);
    return;
  }
  if (bypass) {
    // Our successor is late (the rank after it asked): the piece goes straight to the owner
    // and the successor learns it has only its own input to send for (c, g).
    // The route word names the late rank: the owner routes its allgather around it.
    write_header(hdr, Phase::kReduceScatter, c, g, set, kFlagExtra,
                 static_cast<uint32_t>(succ_ + 1));
    const int extra = add_aux(AuxKind::kExtraSend, c, g);
    aux_[extra].send_slot = slot;
    if (reads_input) aux_[extra].recv_slot = -2;
    post_aux_send(extra, p_.ring[c], tag_for(kTagExtra, seg_id), payload,
                  layout_.segment_count(c, g) * layout_.elem_size(), now, out);
    out->back().header = hdr;
    ++stats_.messages_sent;
    send_ctrl(kFwd, kFlagBypassed, c, g, now, out, &set);
    piece_emitted(now, out);
    return;
  }
  // The successor skipped us for this piece: it goes straight to the chunk's owner, and the
  // successor's ring receive is answered by an ack carrying the set we delivered. Being the
  // late rank, we name ourselves in the route word: the owner routes its allgather around us
  // (its chunk may have reached us before our predecessor started bypassing us).
  write_header(hdr, Phase::kReduceScatter, c, g, set, kFlagExtra,
               self_late_ ? static_cast<uint32_t>(p_.rank + 1) : 0);
  const int extra = add_aux(AuxKind::kExtraSend, c, g);
  aux_[extra].send_slot = slot;
  if (self_late_ && (reads_input || !direct_)) {
    // Being the late rank, every piece we owe an owner (our input alone, or a partial our
    // predecessor sent us before it started bypassing us, plus ours) is paced, chunk by chunk:
    // pieces of a later chunk that are ready earlier (the partials) would otherwise share our
    // link with the current chunk, and chunks would complete together again. With the direct
    // allgather (one host: no link to share) only our input is: pacing the partials too made
    // the harness's shared-memory model slower (n = 8: 34.0 -> 44.2 us after the arrival). Deadlock-free:
    // the owner keeps a receive posted for every incomplete segment (owner_post_extras), so a
    // paced piece in flight always completes (and frees its send slot, if it holds one).
    aux_[extra].paced = true;
    paced_.push_back(PacedPiece{((pos_ - 1 - c + 2 * n_) % n_) * (layout_.segments(0) + 1) + g,
                                extra, p_.ring[c], hdr, payload});
    std::push_heap(paced_.begin(), paced_.end(),
                   paced_later);
    send_paced(now, out);
  } else {
    post_aux_send(extra, p_.ring[c], tag_for(kTagExtra, seg_id), payload,
                  layout_.segment_count(c, g) * layout_.elem_size(), now, out);
    out->back().header = hdr;
    ++stats_.messages_sent;
  }
  const int ack = add_aux(AuxKind::kAckSend, c, g);
  aux_[ack].hdr.assign(hdr_bytes_, 0);
  write_header(aux_[ack].hdr.data(), Phase::kReduceScatter, c, g, set, kFlagAck);
  post_aux_send(ack, succ_, tag_for(kTagAck, seg_id), nullptr, 0, now, out);
  if (reads_input) {
    // An own-input piece sent as an extra: the input is read until that send completes.
    aux_[extra].recv_slot = -2;
  }
  piece_emitted(now, out);
}

void RingAllreduce::send_paced(double now, ActionList* out) {
  while (paced_in_flight_ < kPacedInFlight && !paced_.empty()) {
    std::pop_heap(paced_.begin(), paced_.end(),
                  paced_later);
    const PacedPiece p = paced_.back();
    paced_.pop_back();
    const AuxOp& op = aux_[p.aux];
    post_aux_send(p.aux, p.peer, tag_for(kTagExtra, op.seg_id), p.payload,
                  layout_.segment_count(op.chunk, op.seg) * layout_.elem_size(), now, out);
    out->back().header = const_cast<uint8_t*>(p.hdr);
    ++stats_.messages_sent;
    ++paced_in_flight_;
  }
}

void RingAllreduce::forward_own(size_t idx, double now, ActionList* out) {
  const RecvOp& r = recvs_[idx];
  ContributionSet mine(n_);
  mine.add(p_.rank);
  const int hdr_aux = add_aux(AuxKind::kCtrlSend, -1, -1);  // header storage only
  aux_[hdr_aux].hdr.assign(hdr_bytes_, 0);
  aux_[hdr_aux].done = true;
  emit_piece(r.step, r.chunk, r.seg, aux_[hdr_aux].hdr.data(), input_ptr(r.chunk, r.seg), -1,
             mine, /*reads_input=*/true, now, out);
}

Status RingAllreduce::skip_piece(size_t idx, double now, ActionList* out) {
  RecvOp& r = recvs_[idx];
  r.skipped = true;
  pred_silent_ = true;
  disturbed_ = true;
  ++stats_.skips;
  stats_.steps[r.step].skips += 1;
  // Our own contribution goes on now; the predecessor's piece will go straight to the owner.
  forward_own(idx, now, out);
  send_ctrl(kBack, kFlagNotice, r.chunk, r.seg, now, out);
  // The predecessor answers with its piece (on the ring receive) or an ack, never both.
  const int ack = add_aux(AuxKind::kAckRecv, recvs_[idx].chunk, recvs_[idx].seg);
  aux_[ack].hdr.assign(hdr_bytes_, 0);
  aux_[ack].t = now;
  recvs_[idx].ack_aux = ack;
  Action a;
  a.kind = Action::Kind::kRecv;
  a.token = make_token(kTokAux, ack);
  a.peer = pred_;
  a.tag = tag_for(kTagAck, aux_[ack].seg_id);
  a.header = aux_[ack].hdr.data();
  a.header_bytes = hdr_bytes_;
  out->push_back(a);
  ++pending_;
  return Status::kOk;
}

void RingAllreduce::resolve_bypassed(size_t idx, double now, ActionList* out) {
  // The predecessor sent its piece for this receive straight to the owner: the ring receive
  // will never match. If we had skipped it, this also answers our notice.
  RecvOp& r = recvs_[idx];
  cancel_op(make_token(kTokRecv, idx), out);
  if (r.skipped) cancel_aux(r.ack_aux, out);
  r.state = OpState::kFinished;
  r.t_arrived = now;
  free_recv_slots_.push_back(r.slot);
  --rs_unresolved_;
  if (!r.skipped) forward_own(idx, now, out);
  advance_wait_cursor();
  post_receives(now, out);
  resolve_rs_recv(now, out);
  (void)start_reduces(now, out);  // the cursor may have waited on this piece
}

void RingAllreduce::resolve_rs_recv(double now, ActionList* out) {
  // Once every ring piece has arrived or been acknowledged we will send no more notices.
  if (rs_unresolved_ == 0 && !rs_done_sent_) {
    rs_done_sent_ = true;
    send_ctrl(kBack, kFlagRsDone, -1, -1, now, out);
    if (side_channels_) send_ctrl(kFar, kFlagFarDone, -1, -1, now, out);
  }
}

Status RingAllreduce::owner_enqueue(int g, int item, double now, ActionList* out) {
  owner_[g].queue.push_back(item);
  return owner_merge(g, now, out);
}

Status RingAllreduce::owner_merge(int g, double now, ActionList* out) {
  OwnerPiece& o = owner_[g];
  if (o.merging || o.queue.empty()) return Status::kOk;
  const int item = o.queue.front();
  o.queue.erase(o.queue.begin());
  const uint8_t* hdr;
  const uint8_t* payload;
  if (item >= 0) {
    hdr = slot_hdr(recv_slot_base(recvs_[item].slot), 0);
    payload = slot_payload(recv_slot_base(recvs_[item].slot), 0);
  } else {
    const AuxOp& x = aux_[-item - 1];
    hdr = slot_hdr(extra_slots_, x.extra_slot);
    payload = slot_payload(extra_slots_, x.extra_slot);
  }
  SKIPRING_CHECK(check_header(hdr, Phase::kReduceScatter, pos_, g, &scratch_set_));
  const uint32_t late = wire_route(hdr) & kRouteLateMask;
  if (late != 0) {
    if (late > static_cast<uint32_t>(n_) || static_cast<int>(late - 1) == p_.rank) {
      return fail(fmt::format("owner of chunk {} segment {}: bad allgather route {}", pos_, g,
                              late - 1));
    }
    if (late_rank_ < 0) late_rank_ = static_cast<int>(late - 1);
  }
  if (scratch_set_.empty() || scratch_set_.overlaps(o.acc)) {
    return fail(fmt::format("owner of chunk {} segment {}: piece {} overlaps what it holds {}",
                            pos_, g, scratch_set_.to_string(), o.acc.to_string()));
  }
  o.acc.merge(scratch_set_);
  o.merging = true;
  if (item >= 0) o.main_merged = true;
  Action a;
  a.kind = Action::Kind::kReduce;
  a.token = make_token(kTokOwnerReduce, g);
  a.dst = seg_ptr(p_.recvbuf, pos_, g);
  a.a = o.started ? static_cast<const void*>(a.dst) : input_ptr(pos_, g);
  a.b = payload;
  a.count = layout_.segment_count(pos_, g);
  a.dtype = p_.dtype;
  a.op = p_.op;
  o.started = true;
  owner_merge_item_.resize(owner_.size(), 0);
  owner_merge_item_[g] = item;
  owner_merge_t_.resize(owner_.size(), 0);
  owner_merge_t_[g] = now;
  out->push_back(a);
  ++pending_;
  return Status::kOk;
}

void RingAllreduce::owner_post_extras(double now, ActionList* out) {
  // With skip-ahead on, each incomplete segment of our chunk always has a receive posted for a
  // piece coming straight to us, so such a piece never waits on us (its sender holds a slot).
  if (!p_.skip) return;
  for (size_t g = 0; g < owner_.size(); ++g) {
    OwnerPiece& o = owner_[g];
    if (o.full || o.extra_posted) continue;
    const int aux = add_aux(AuxKind::kExtraRecv, pos_, static_cast<int>(g));
    aux_[aux].extra_slot = static_cast<int>(g);
    aux_[aux].t = now;
    o.extra_posted = true;
    o.extra_aux = aux;
    Action a;
    a.kind = Action::Kind::kRecv;
    a.token = make_token(kTokAux, aux);
    a.peer = -1;  // from whoever delivers it: the slow rank or a rank forwarding a late piece
    a.tag = tag_for(kTagExtra, aux_[aux].seg_id);
    a.header = slot_hdr(extra_slots_, aux_[aux].extra_slot);
    a.header_bytes = hdr_bytes_;
    a.payload = slot_payload(extra_slots_, aux_[aux].extra_slot);
    a.payload_bytes = layout_.segment_count(pos_, static_cast<int>(g)) * layout_.elem_size();
    out->push_back(a);
    ++pending_;
  }
}

Status RingAllreduce::on_aux(size_t idx, size_t payload_bytes, double now, ActionList* out) {
  // `op` is only valid until the next add_aux (aux_ may move): read what is needed first.
  AuxOp& op = aux_[idx];
  if (op.done || op.cancelled) return Status::kOk;  // completion of a cancelled receive
  op.done = true;
  --pending_;
  switch (op.kind) {
    case AuxKind::kCtrlRecv: {
      WireHeader h;
      const std::string why = decode_wire_control(op.hdr.data(), p_.seq, &h);
      if (!why.empty()) return fail(why);
      ++ctrl_seen_;
      const int channel = op.channel;
      if (h.flags & (kFlagRsDone | kFlagFwdDone | kFlagFarDone)) {
        open_[channel] = false;
        break;
      }
      disturbed_ = true;
      if (channel == kFar) {
        if (!(h.flags & kFlagBypassReq)) return fail("malformed bypass request");
        bypass_ = true;
        if (late_rank_ < 0) late_rank_ = succ_;
        SKIPRING_CHECK(start_reduces(now, out));  // may have been waiting for a send slot
      } else {
        if (h.chunk >= static_cast<uint32_t>(n_) ||
            h.segment >= static_cast<uint32_t>(layout_.segments(h.chunk))) {
          return fail("malformed control message");
        }
        const int seg_id = layout_.first_segment(h.chunk) + h.segment;
        if (channel == kBack) {
          if (!(h.flags & kFlagNotice)) return fail("malformed notice");
          self_late_ = true;
          // Not yet sent: it will go straight to the owner. Already sent: the successor gets
          // it on its ring receive and forwards it itself.
          if (!rs_sent_[seg_id]) redirect_[seg_id] = 1;
        } else {
          if (!(h.flags & kFlagBypassed) || bypassed_[seg_id]) return fail("malformed bypass");
          self_late_ = true;
          bypassed_[seg_id] = 1;
          size_t ri = recvs_.size();
          for (size_t i = 0; i < next_post_; ++i) {
            if (recvs_[i].phase == Phase::kReduceScatter && recvs_[i].seg_id == seg_id) ri = i;
          }
          if (ri < recvs_.size()) {
            if (recvs_[ri].state != OpState::kPosted) {
              return fail("bypass notice for a piece that arrived");
            }
            resolve_bypassed(ri, now, out);
          }  // not posted yet: post_receives resolves it
        }
      }
      post_ctrl_recv(channel, now, out);
      break;
    }
    case AuxKind::kAckRecv: {
      // The predecessor delivered its piece to the owner: our ring receive will never match.
      disturbed_ = true;
      size_t ri = recvs_.size();
      for (size_t i = 0; i < recvs_.size(); ++i) {
        if (recvs_[i].ack_aux == static_cast<int>(idx)) ri = i;
      }
      if (ri == recvs_.size()) return fail("redirect ack without a skipped piece");
      SKIPRING_CHECK(check_header(op.hdr.data(), Phase::kReduceScatter, op.chunk, op.seg,
                                  &scratch_set_));
      RecvOp& r = recvs_[ri];
      cancel_op(make_token(kTokRecv, ri), out);  // the ring receive
      r.state = OpState::kFinished;
      r.t_arrived = now;
      free_recv_slots_.push_back(r.slot);
      --rs_unresolved_;
      advance_wait_cursor();
      post_receives(now, out);
      resolve_rs_recv(now, out);
      break;
    }
    case AuxKind::kExtraRecv: {
      const size_t expect = layout_.segment_count(op.chunk, op.seg) * layout_.elem_size();
      if (payload_bytes != expect) return fail("extra piece of the wrong size");
      ++stats_.messages_received;
      disturbed_ = true;
      // extra_posted stays set until the merge is done: the slot is still in use.
      SKIPRING_CHECK(owner_enqueue(op.seg, -static_cast<int>(idx) - 1, now, out));
      break;
    }
    case AuxKind::kExtraSend: {
      // Copies: post_receives may add aux ops and move aux_ (and `op`) in memory.
      const int recv_slot = op.recv_slot, send_slot = op.send_slot, seg_id = op.seg_id;
      if (op.paced) {
        --paced_in_flight_;
        send_paced(now, out);
      }
      if (send_slot >= 0) free_send_slots_.push_back(send_slot);
      if (recv_slot >= 0) {
        free_recv_slots_.push_back(recv_slot);
      } else if (recv_slot == -2) {
        local_done_[seg_id] = 1;
      }
      post_receives(now, out);
      SKIPRING_CHECK(start_reduces(now, out));
      break;
    }
    case AuxKind::kCtrlSend:
    case AuxKind::kAckSend:
      break;
  }
  owner_post_extras(now, out);
  maybe_done(now, out);
  return Status::kOk;
}

// ---------------------------------------------------------------------------------------
Status RingAllreduce::on_recv(Token t, size_t payload_bytes, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (token_kind(t) == kTokAux) {
    if (token_index(t) >= aux_.size()) return fail("completion for an unknown message");
    return on_aux(token_index(t), payload_bytes, now, out);
  }
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokRecv || idx >= recvs_.size() || recvs_[idx].state != OpState::kPosted) {
    if (idx < recvs_.size() && recvs_[idx].state == OpState::kFinished) return Status::kOk;
    return fail("completion for an unknown receive");
  }
  RecvOp& r = recvs_[idx];
  const size_t expect = layout_.segment_count(r.chunk, r.seg) * layout_.elem_size();
  if (payload_bytes != expect) {
    return fail(fmt::format("chunk {} segment {}: {} payload bytes, expected {}", r.chunk, r.seg,
                            payload_bytes, expect));
  }
  r.state = OpState::kArrived;
  r.t_arrived = now;
  if (r.phase == Phase::kReduceScatter) {
    r.t_ready = std::max(r.t_posted, t_pred_heard_);
    r.timed = true;
    t_pred_heard_ = now;
    pred_silent_ = pred_absent_ = false;
  }
  --pending_;
  ++stats_.messages_received;
  StepRecord& rec = stats_.steps[(r.phase == Phase::kAllgather ? n_ - 1 : 0) + r.step];
  if (rec.segments++ == 0) rec.first_arrival = now;
  rec.last_arrival = now;
  advance_wait_cursor();

  if (r.phase == Phase::kReduceScatter) {
    --rs_unresolved_;
    uint8_t* hdr = slot_hdr(recv_slot_base(r.slot), 0);
    SKIPRING_CHECK(check_header(hdr, r.phase, r.chunk, r.seg, &scratch_set_));
    if (scratch_set_.empty() || scratch_set_.contains(p_.rank)) {
      return fail(fmt::format("chunk {} segment {}: contribution set {} overlaps own rank {}",
                              r.chunk, r.seg, scratch_set_.to_string(), p_.rank));
    }
    if (r.skipped) {
      // A late piece: we already forwarded our own contribution. It goes straight to the
      // owner as it is; the ack we were also waiting for will never come.
      r.state = OpState::kFinished;
      ++stats_.late_pieces;
      rec.late_pieces += 1;
      cancel_aux(r.ack_aux, out);
      write_header(hdr, Phase::kReduceScatter, r.chunk, r.seg, scratch_set_, kFlagExtra);
      const int extra = add_aux(AuxKind::kExtraSend, r.chunk, r.seg);
      aux_[extra].recv_slot = r.slot;
      post_aux_send(extra, p_.ring[r.chunk], tag_for(kTagExtra, r.seg_id),
                    slot_payload(recv_slot_base(r.slot), 0), expect, now, out);
      out->back().header = hdr;
      ++stats_.messages_sent;
    } else if (r.chunk == pos_) {
      r.state = OpState::kFinished;
      SKIPRING_CHECK(owner_enqueue(r.seg, static_cast<int>(idx), now, out));
    } else {
      ++awaiting_reduce_;
      SKIPRING_CHECK(start_reduces(now, out));
    }
    resolve_rs_recv(now, out);
  } else {
    SKIPRING_CHECK(check_header(r.header, r.phase, r.chunk, r.seg, &scratch_set_));
    if (!scratch_set_.full()) {
      return fail(fmt::format("allgather of chunk {} carries incomplete set {}", r.chunk,
                              scratch_set_.to_string()));
    }
    const uint32_t route = wire_route(r.header);
    if ((route & kRouteAround) &&
        ((route & kRouteLateMask) == 0 || (route & kRouteLateMask) > static_cast<uint32_t>(n_) ||
         static_cast<int>((route & kRouteLateMask) - 1) == p_.ring[r.chunk])) {
      return fail(fmt::format("allgather of chunk {} segment {}: bad route {:#x}", r.chunk,
                              r.seg, route));
    }
    --ag_posted_;
    r.state = OpState::kFinished;
    rec.t_end = now;
    forward_ag(idx, now, out);
    post_receives(now, out);
  }
  owner_post_extras(now, out);
  maybe_done(now, out);
  return Status::kOk;
}

Status RingAllreduce::start_reduces(double now, ActionList* out) {
  // Ring pieces are reduced strictly in receive-sequence order: a later piece must never take
  // the send slot an earlier one needs (the order is what keeps the pipeline deadlock-free,
  // also when skips lend the receive window extra slots). Pieces that are skipped, bypassed
  // or our own chunk's are not reduced here.
  while (reduce_cursor_ < recvs_.size()) {
    RecvOp& r = recvs_[reduce_cursor_];
    if (r.phase != Phase::kReduceScatter) {
      reduce_cursor_ = recvs_.size();
      break;
    }
    if (r.chunk == pos_ || r.skipped || r.state == OpState::kFinished ||
        r.state == OpState::kReducing) {
      ++reduce_cursor_;
      continue;
    }
    if (r.state != OpState::kArrived) break;
    if (free_send_slots_.empty() && bypass_) {
      // Bypassing a late successor: send slots still hold pieces it has not taken, so the
      // pieces now going to the owners get fresh ones.
      overflow_send_.emplace_back(new uint8_t[slot_bytes_]);
      free_send_slots_.push_back(p_.depth + static_cast<int>(overflow_send_.size()) - 1);
    }
    if (free_send_slots_.empty()) break;
    const uint8_t* in_slot = recv_slot_base(r.slot);
    Action a;
    a.kind = Action::Kind::kReduce;
    a.token = make_token(kTokReduce, reduce_cursor_);
    a.a = input_ptr(r.chunk, r.seg);
    a.b = in_slot + hdr_area_;
    a.count = layout_.segment_count(r.chunk, r.seg);
    a.dtype = p_.dtype;
    a.op = p_.op;
    r.out_slot = free_send_slots_.back();
    free_send_slots_.pop_back();
    a.dst = slot_payload(send_slot_base(r.out_slot), 0);
    r.state = OpState::kReducing;
    r.t_reduce = now;
    ++pending_;
    --awaiting_reduce_;
    ++reduce_cursor_;
    out->push_back(a);
  }
  return Status::kOk;
}

Status RingAllreduce::on_reduce(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t idx = token_index(t);
  if (token_kind(t) == kTokOwnerReduce) {
    if (idx >= owner_.size() || !owner_[idx].merging) return fail("unknown owner reduction");
    OwnerPiece& o = owner_[idx];
    o.merging = false;
    --pending_;
    const int g = static_cast<int>(idx);
    stats_.steps[n_ - 2].reduce_s += now - owner_merge_t_[g];
    const int item = owner_merge_item_[g];
    if (item >= 0) {
      free_recv_slots_.push_back(recvs_[item].slot);
      post_receives(now, out);
    } else {
      o.extra_posted = false;  // its slot is free again
    }
    if (o.acc.full()) {
      // Chunk segment complete: its allgather starts now. Nothing more can come straight to
      // us for it (it would overlap), so the standing receive for such pieces is cancelled.
      o.full = true;
      if (o.extra_posted) {
        cancel_aux(o.extra_aux, out);
        o.extra_posted = false;
      }
      stats_.steps[n_ - 2].t_end = now;
      send_own_segment(g, now, out);
    } else {
      SKIPRING_CHECK(owner_merge(g, now, out));
    }
    owner_post_extras(now, out);
    maybe_done(now, out);
    return Status::kOk;
  }
  if (token_kind(t) != kTokReduce || idx >= recvs_.size() ||
      recvs_[idx].state != OpState::kReducing) {
    return fail("completion for an unknown reduction");
  }
  RecvOp& r = recvs_[idx];
  r.state = OpState::kFinished;
  --pending_;
  StepRecord& rec = stats_.steps[r.step];
  rec.reduce_s += now - r.t_reduce;
  rec.t_end = now;
  local_done_[r.seg_id] = 1;
  // The outgoing partial sums what came in plus our input.
  SKIPRING_CHECK(check_header(slot_hdr(recv_slot_base(r.slot), 0), r.phase, r.chunk, r.seg,
                              &scratch_set_));
  scratch_set_.add(p_.rank);
  free_recv_slots_.push_back(r.slot);
  emit_piece(r.step, r.chunk, r.seg, slot_hdr(send_slot_base(r.out_slot), 0),
             slot_payload(send_slot_base(r.out_slot), 0), r.out_slot, scratch_set_, false, now, out);
  post_receives(now, out);
  owner_post_extras(now, out);
  maybe_done(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_send(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (token_kind(t) == kTokAux) {
    if (token_index(t) >= aux_.size()) return fail("completion for an unknown message");
    return on_aux(token_index(t), 0, now, out);
  }
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokSend || idx >= sends_.size() || sends_[idx].done) {
    return fail("completion for an unknown send");
  }
  SendOp& s = sends_[idx];
  s.done = true;
  --pending_;
  stats_.steps[s.step].transfer_s += now - s.t_posted;
  const SendOp sent = s;  // pump_ag appends to sends_
  if (sent.ag_peer >= 0) {
    --ag_in_flight_[sent.ag_peer];
    pump_ag(sent.ag_peer, now, out);
  }
  if (sent.slot >= 0) {
    free_send_slots_.push_back(sent.slot);
    SKIPRING_CHECK(start_reduces(now, out));
  } else if (sent.reads_input) {
    // A send that read our input directly: only now may allgather overwrite it.
    local_done_[sent.seg_id] = 1;
    post_receives(now, out);
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_time(double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (!p_.skip) return Status::kOk;
  if (first_sends_deferred_) {
    if (ctrl_seen_ != ctrl_seen_mark_) {
      ctrl_seen_mark_ = ctrl_seen_;  // notices are still coming in: read them first
      quiet_polls_ = 0;
      return Status::kOk;
    }
    if (++quiet_polls_ < p_.quiet_polls) return Status::kOk;
    send_first_pieces(now, out);
  }
  if (pred_silent_ && !pred_absent_ &&
      t_pred_heard_ + kBypassFactor * p_.skip_threshold_s <= now) {
    pred_absent_ = true;
  }
  for (size_t i = wait_cursor_; i < next_post_; ++i) {
    RecvOp& r = recvs_[i];
    if (r.phase != Phase::kReduceScatter) break;
    if (r.state == OpState::kPosted && r.skipped && side_channels_ && !bypass_requested_ &&
        r.t_posted + kBypassFactor * piece_threshold(r) <= now) {
      // Still nothing long after the skip: the predecessor is absent or very slow. Ask the
      // rank before it to stop feeding it and send its pieces straight to their owners.
      bypass_requested_ = true;
      ++stats_.bypass_requests;
      send_ctrl(kFar, kFlagBypassReq, -1, -1, now, out);
    }
    if (r.state != OpState::kPosted || r.skipped || r.chunk == pos_) continue;
    if (skip_deadline(r) > now) continue;
    if (rs_sent_[r.seg_id]) continue;  // cannot happen for ring pieces; defensive
    SKIPRING_CHECK(skip_piece(i, now, out));
  }
  post_receives(now, out);  // each skip lends the receive window a slot
  SKIPRING_CHECK(start_reduces(now, out));  // skipped pieces no longer hold up later ones
  maybe_done(now, out);
  return Status::kOk;
}

std::string RingAllreduce::describe() const {
  std::string unsent;
  for (size_t i = 0; i < recvs_.size(); ++i) {
    const RecvOp& r = recvs_[i];
    if (r.state == OpState::kFinished) continue;
    unsent += fmt::format(" {}{}:c{}g{}s{}{}", r.phase == Phase::kReduceScatter ? "RS" : "AG",
                          static_cast<int>(r.state), r.chunk, r.seg, r.step,
                          r.skipped ? "skipped" : "");
    if (unsent.size() > 300) break;
  }
  for (const SendOp& sd : sends_) {
    if (!sd.done) unsent += fmt::format(" SEND:seg{}slot{}", sd.seg_id, sd.slot);
  }
  static const char* kAuxNames[] = {"ctrlR", "ctrlS", "ackR", "ackS", "extraS", "extraR"};
  for (const AuxOp& a : aux_) {
    if (!a.done && !a.cancelled) {
      unsent += fmt::format(" {}:seg{}ch{}", kAuxNames[static_cast<int>(a.kind)], a.seg_id,
                            a.channel);
    }
  }
  int owner_open = 0;
  for (const auto& o : owner_) owner_open += o.full ? 0 : 1;
  return fmt::format(
      "rank {} pending={} next_post={}/{} rs_unresolved={} rs_to_emit={} open={}{}{} "
      "bypass={} owner_open={} free_recv={} free_send={} reduce_cursor={} awaiting={} |{}",
      p_.rank, pending_, next_post_, recvs_.size(), rs_unresolved_, rs_to_emit_, open_[0],
      open_[1], open_[2], bypass_, owner_open, free_recv_slots_.size(), free_send_slots_.size(),
      reduce_cursor_, awaiting_reduce_, unsent);
}

void RingAllreduce::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || pending_ != 0 || !paced_.empty() || ag_waiting_ != 0 ||
      next_post_ != recvs_.size() ||
      awaiting_reduce_ != 0 || open_[kBack] || open_[kFwd] || open_[kFar]) {
    return;
  }
  for (const auto& o : owner_) {
    if (!o.full) return;
  }
  done_ = true;
  stats_.end = now;
  stats_.summarise();
  piece_waits_.clear();
  for (const RecvOp& r : recvs_) {
    // Ring pieces this rank could have skipped but did not: their wait (from when the timer
    // started, see skip_deadline) is the normal step time
    // (the owner's pieces also wait for everything upstream, stragglers included). Pieces
    // the predecessor sent straight to the owner never arrive here: they have no wait (counted
    // as "now" since the clock's epoch, they once set a late rank's threshold to hours).
    if (r.phase == Phase::kReduceScatter && r.chunk != pos_ && !r.skipped && r.timed) {
      piece_waits_.push_back(std::max(0.0, r.t_arrived - r.t_ready));
    }
  }
  // The longest normal wait of this collective: on a shared or oversubscribed machine a
  // healthy predecessor is off its core now and then for a time slice, and a threshold below
  // that skips it every time (the 90th percentile did: hundreds of skips per 64 MiB
  // collective on 4 ranks / 2 cores). The timer takes the median over collectives, so one
  // outlier collective does not count either.
  if (!piece_waits_.empty()) {
    stats_.rs_piece_wait_max = *std::max_element(piece_waits_.begin(), piece_waits_.end());
  }
  Action a;
  a.kind = Action::Kind::kDone;
  out->push_back(a);
}

}  // namespace skipring

