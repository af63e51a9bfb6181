// Late chain all-reduce: census, the ring of the healthy ranks, the chain of late inputs
// (late_chain.h).
#include "collectives/late_chain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "collectives/wire_header.h"
#include "common/phases.h"
#include "common/token.h"

namespace skipring {
namespace {

// Our tokens: kind 0 indexes ops_, kind 3 is the embedded ring's (NestedCore).
constexpr uint32_t kTokOp = 0;
constexpr uint32_t kTokRing = 3;
// Message kinds (tags tag_span/2 + 2 * kind + parity).
constexpr int kKindArrive = 0;
constexpr int kKindDecision = 1;
constexpr int kKindInput = 2;
constexpr int kKindFinal = 3;
constexpr int kKindGo = 4;
constexpr int kKindInputTree1 = 5;  // late inputs and D down the second tree
constexpr int kOwnTags = 12;
// The embedded ring's tags: RingAllreduce needs its 1024 control and data tags at least.
constexpr int kMinRingSpan = 1024;

}  // namespace

size_t late_segment_bytes(size_t cap, size_t bytes, int n, bool trees) {
  if (!trees) return cap;
  size_t depth = 0;
  for (size_t h = static_cast<size_t>(std::max(n - 1, 1)); h > 1; h /= 2) ++depth;
  const size_t hops = depth + 2;
  size_t seg = bytes / 2 / (kLateChainFillShare * hops);
  seg = std::max(seg - seg % 4096, kLateChainMinSegmentBytes);
  return seg < cap ? seg : cap;
}

Status LateChainAllreduce::validate(const RingParams& p, std::string* why) {
  SKIPRING_RETURN_IF_ERROR(validate_common(p, why));
  if (p.late_inflight < 1) {
    *why = fmt::format("late_inflight {} < 1", p.late_inflight);
    return Status::kErrArg;
  }
  if (!(p.late_wait_s >= 0)) {
    *why = fmt::format("late_wait_s {} is not >= 0", p.late_wait_s);
    return Status::kErrArg;
  }
  if (!(p.late_wait_suspect_s >= 0)) {
    *why = fmt::format("late_wait_suspect_s {} is not >= 0", p.late_wait_suspect_s);
    return Status::kErrArg;
  }
  if (!p.late_seen_s.empty() && p.late_seen_s.size() != p.ring.size()) {
    *why =
        fmt::format("late_seen_s has {} entries for {} ranks", p.late_seen_s.size(), p.ring.size());
    return Status::kErrArg;
  }
  if (std::isnan(p.late_pays_after_s)) {
    *why = "late_pays_after_s is not a number";
    return Status::kErrArg;
  }
  if (p.tag_span / 2 < kMinRingSpan || p.tag_span / 2 + kOwnTags > p.tag_span - 1) {
    *why = fmt::format("tag_span {} leaves the embedded ring fewer than {} tags", p.tag_span,
                       kMinRingSpan);
    return Status::kErrArg;
  }
  return Status::kOk;
}

LateChainAllreduce::LateChainAllreduce(const RingParams& p, std::vector<uint8_t>* scratch)
    : CoreBase(p.rank, p.seq),
      p_(p),
      ring_scratch_(scratch),
      n_(static_cast<int>(p.ring.size())),
      elem_(static_cast<int>(dtype_size(p.dtype))),
      hdr_bytes_(wire_header_bytes(static_cast<int>(p.ring.size()))),
      coord_(p.ring.empty() ? 0 : p.ring[0]),
      late_set_(static_cast<int>(p.ring.size())),
      ring_(pack_token(kTokRing, 0), static_cast<int>(kTokenKindShift)) {
  const size_t seg_bytes = p_.late_segment_bytes > 0 ? p_.late_segment_bytes : p_.segment_bytes;
  seg_elems_ = std::max<size_t>(1, seg_bytes / static_cast<size_t>(elem_));
  window_ = p_.late_inflight;
}

int LateChainAllreduce::tag(int kind) const {
  return p_.tag_span / 2 + 2 * kind + static_cast<int>(p_.seq & 1);
}

std::vector<size_t> late_segment_plan(size_t count, size_t seg_elems, int window, bool trees) {
  std::vector<size_t> off(1, 0);
  seg_elems = std::max<size_t>(seg_elems, 1);
  const size_t w = static_cast<size_t>(std::max(window, 1));
  for (size_t s = 0; off.back() < count; ++s) {
    const size_t j = trees ? s / 2 : s;  // its place in its stream
    const size_t len = j + 1 < w ? std::max<size_t>(1, seg_elems * (j + 1) / w) : seg_elems;
    off.push_back(off.back() + std::min(len, count - off.back()));
  }
  return off;
}

uint8_t* LateChainAllreduce::out_ptr(int s) const {
  return static_cast<uint8_t*>(p_.recvbuf) + seg_offset(s) * elem_;
}

const uint8_t* LateChainAllreduce::in_ptr(int s) const {
  return static_cast<const uint8_t*>(p_.sendbuf) + seg_offset(s) * elem_;
}

// Slots: slots_ per tree, a segment's j-th in its tree in slot j % slots_ of the tree's.
uint8_t* LateChainAllreduce::slot_ptr(int s, int j) {
  const int t = tree_of(s), idx = trees_ ? s / 2 : s;
  const size_t slot = static_cast<size_t>(t) * slots_ + idx % slots_;
  return buf_.data() + (slot * late_.size() + j) * seg_elems_ * elem_;
}

Token LateChainAllreduce::add_op(Op op, int seg, int who) {
  ops_.push_back(OpRec{op, seg, who, false});
  ++pending_;
  return pack_token(kTokOp, ops_.size() - 1);
}

void LateChainAllreduce::send(Token t, int peer, int kind, uint8_t* hdr, const void* payload,
                              size_t bytes, ActionList* out) {
  out->push_back(
      message_action(Action::Kind::kSend, t, peer, tag(kind), hdr, hdr_bytes_, payload, bytes));
  ++stats_.messages_sent;
}

void LateChainAllreduce::recv(Token t, int peer, int kind, uint8_t* hdr, void* payload,
                              size_t bytes, ActionList* out) {
  out->push_back(
      message_action(Action::Kind::kRecv, t, peer, tag(kind), hdr, hdr_bytes_, payload, bytes));
}

Status LateChainAllreduce::start(double now, ActionList* out) {
  if (started_) return fail("started twice");
  started_ = true;
  stats_.start = now;
  stats_.seq = p_.seq;
  stats_.bytes = p_.count * elem_;
  if (p_.count == 0 || n_ == 1) {
    // Nothing to agree on: every rank sees the same count and size.
    if (p_.count > 0 && p_.sendbuf != p_.recvbuf) {
      out->push_back(copy_action(p_.recvbuf, p_.sendbuf, p_.count * elem_));
    }
    decided_ = true;
    ring_done_ = true;
    maybe_done(now, out);
    return Status::kOk;
  }
  census_hdr_.assign(static_cast<size_t>(n_) * hdr_bytes_, 0);
  if (p_.rank == coord_) {
    arrived_.assign(n_, 0);
    arrived_[coord_] = 1;
    t0_ = now;
    deadline_ = now + p_.late_wait_s;
    suspect_deadline_ = now + std::min(p_.late_wait_s, p_.late_wait_suspect_s);
    seen_.assign(n_, -1.0);
    seen_[coord_] = 0;
    seen_as_.assign(n_, Seen::kUsual);
    if (p_.late_seen_s.size() == static_cast<size_t>(n_)) {
      for (int r = 0; r < n_; ++r) {
        const double was = p_.late_seen_s[r];
        if (r == coord_ || !(was > p_.late_wait_s)) continue;
        seen_as_[r] = was >= p_.late_pays_after_s ? Seen::kSuspect : Seen::kTooEarly;
      }
    }
    for (int r = 0; r < n_; ++r) {
      if (r == coord_) continue;
      recv(add_op(Op::kArriveRecv, -1, r), r, kKindArrive, hdr_ptr(&census_hdr_, r), nullptr, 0,
           out);
    }
    return Status::kOk;
  }
  ContributionSet me(n_);
  me.add(p_.rank);
  encode_wire_header(hdr_ptr(&census_hdr_, p_.rank), WireExpect{p_.seq, kLcPhaseArrive, 0, 0}, me);
  send(add_op(Op::kArriveSend, -1, coord_), coord_, kKindArrive, hdr_ptr(&census_hdr_, p_.rank),
       nullptr, 0, out);
  recv(add_op(Op::kDecisionRecv, -1, coord_), coord_, kKindDecision, hdr_ptr(&census_hdr_, coord_),
       nullptr, 0, out);
  return Status::kOk;
}

// The usual ranks get the full wait, suspects the short one; ranks that came too early for the
// chain to pay last time are not waited for (they stay in).
double LateChainAllreduce::decision_time() const {
  bool suspect_missing = false;
  for (int r = 0; r < n_; ++r) {
    if (arrived_[r]) continue;
    if (seen_as_[r] == Seen::kUsual) return deadline_;
    if (seen_as_[r] == Seen::kSuspect) suspect_missing = true;
  }
  return suspect_missing ? suspect_deadline_ : t0_;
}

Status LateChainAllreduce::decide(double now, ActionList* out) {
  decided_ = true;
  for (int r = 0; r < n_; ++r) {
    if (!arrived_[r] && seen_as_[r] != Seen::kTooEarly) late_set_.add(r);
  }
  encode_wire_header(hdr_ptr(&census_hdr_, coord_), WireExpect{p_.seq, kLcPhaseDecision, 0, 0},
                     late_set_);
  for (int r = 0; r < n_; ++r) {
    if (r == coord_) continue;
    send(add_op(Op::kDecisionSend, -1, r), r, kKindDecision, hdr_ptr(&census_hdr_, coord_), nullptr,
         0, out);
  }
  return begin(now, out);
}

// E is known: the ring of the healthy ranks, or the late rank's chain.
Status LateChainAllreduce::begin(double now, ActionList* out) {
  for (int r : p_.ring) {
    if (late_set_.contains(r)) {
      if (r == p_.rank) late_idx_ = static_cast<int>(late_.size());
      late_.push_back(r);
    } else {
      if (r == p_.rank) hpos_ = static_cast<int>(healthy_.size());
      healthy_.push_back(r);
    }
  }
  stats_.late_excluded = static_cast<uint32_t>(late_.size());
  if (hpos_ < 0) {
    ring_done_ = true;  // we take no part in it
    return start_chain(now, out);
  }
  return start_ring(now, out);
}

Status LateChainAllreduce::start_ring(double now, ActionList* out) {
  const int h = static_cast<int>(healthy_.size());
  if (h == 1) {
    if (p_.sendbuf != p_.recvbuf) {
      out->push_back(copy_action(p_.recvbuf, p_.sendbuf, p_.count * elem_));
    }
    ring_done_ = true;
    return start_chain(now, out);
  }
  RingParams rp = p_;
  rp.rank = hpos_;
  rp.ring.resize(h);
  std::iota(rp.ring.begin(), rp.ring.end(), 0);
  rp.tag_span = p_.tag_span / 2;
  std::string why;
  const Status st = RingAllreduce::validate(rp, &why);
  if (!ok(st)) {
    fail("ring of the healthy ranks: " + why);
    return st;
  }
  ActionList ring_out;
  const Status rs = ring_.start(std::make_unique<RingAllreduce>(rp, ring_scratch_), now, &ring_out);
  return forward_ring(rs, &ring_out, now, out);
}

Status LateChainAllreduce::forward_ring(Status st, ActionList* ring_out, double now,
                                        ActionList* out) {
  if (!ok(st)) {
    failed_ = true;
    error_ = fmt::format("rank {} seq {}: ring of the healthy ranks: {}", p_.rank, p_.seq,
                         ring_.error());
    return st;
  }
  for (Action a : *ring_out) {
    if ((a.kind == Action::Kind::kSend || a.kind == Action::Kind::kRecv) && a.peer >= 0) {
      a.peer = healthy_[a.peer];
    }
    out->push_back(a);
  }
  // The ring's completion: P is final on this rank, the chain can start.
  if (ring_.done() && !ring_done_) {
    ring_done_ = true;
    return start_chain(now, out);
  }
  return Status::kOk;
}

Status LateChainAllreduce::start_chain(double now, ActionList* out) {
  if (late_.empty()) {
    maybe_done(now, out);
    return Status::kOk;
  }
  // The chain: H in ring order from the first healthy rank after E's first member.
  const int first_late_pos =
      static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), late_[0]) - p_.ring.begin());
  for (int d = 1; d <= n_; ++d) {
    const int r = p_.ring[(first_late_pos + d) % n_];
    if (!late_set_.contains(r)) chain_.push_back(r);
  }
  const size_t m = late_.size();
  trees_ = p_.late_trees && chain_.size() > 2;
  seg_off_ = late_segment_plan(p_.count, seg_elems_, window_, trees_);
  nseg_ = static_cast<int>(seg_off_.size()) - 1;
  seg_hdr_.assign(static_cast<size_t>(nseg_) * hdr_bytes_, 0);
  if (hpos_ >= 0) {
    cpos_ = static_cast<int>(std::find(chain_.begin(), chain_.end(), p_.rank) - chain_.begin());
    // Receive slots per stream: 2 W. W + 1 left the sender waiting for a slot at every hop
    // (SimGrid n = 8, W = 2: 6620.6 us with 3, 6412.1 with 4 or more; with the lead-in 6414.2
    // with 3, 5669.1 with 4 to 12).
    slots_ = 2 * window_;
    buf_.assign(static_cast<size_t>(trees_ ? 2 : 1) * slots_ * m * seg_elems_ * elem_, 0);
    in_hdr_.assign(static_cast<size_t>(nseg_) * m * hdr_bytes_, 0);
    recvs_left_.assign(nseg_, 0);
    fwd_left_.assign(nseg_, 0);
    d_ready_.assign(nseg_, 0);
    fwd_done_.assign(nseg_, 0);
    fin_done_.assign(nseg_, 0);
  } else {
    in_hdr_.assign(static_cast<size_t>(nseg_) * hdr_bytes_, 0);
    input_sent_.assign(nseg_, 0);
    go_hdr_.assign(static_cast<size_t>(go_count()) * hdr_bytes_, 0);
    for (int t = 0; t < go_count(); ++t) {
      recv(add_op(Op::kGoRecv, -1, t), rank_at(t, 0), kKindGo, hdr_ptr(&go_hdr_, t), nullptr, 0,
           out);
    }
  }
  pump(now, out);
  const bool root = hpos_ >= 0 && (node_of(0) == 0 || (go_count() == 2 && node_of(1) == 0));
  if (root) {
    // Our receives for the late inputs are posted: the late ranks may send.
    go_hdr_.assign(m * hdr_bytes_, 0);
    for (size_t j = 0; j < m; ++j) {
      uint8_t* h = hdr_ptr(&go_hdr_, j);
      encode_wire_header(h, WireExpect{p_.seq, kLcPhaseGo, static_cast<uint32_t>(j), 0}, late_set_);
      send(add_op(Op::kGoSend, -1, static_cast<int>(j)), late_[j], kKindGo, h, nullptr, 0, out);
    }
  }
  maybe_done(now, out);
  return Status::kOk;
}

int LateChainAllreduce::input_kind(int t) const { return t == 0 ? kKindInput : kKindInputTree1; }

int LateChainAllreduce::tree_segs(int t) const { return trees_ ? (nseg_ - t + 1) / 2 : nseg_; }

int LateChainAllreduce::rank_at(int t, int k) const {
  return chain_[t == 0 ? k : static_cast<int>(chain_.size()) - 1 - k];
}

int LateChainAllreduce::node_of(int t) const {
  return t == 0 ? cpos_ : static_cast<int>(chain_.size()) - 1 - cpos_;
}

int LateChainAllreduce::kids_of(int k, int kid[2]) const {
  const int h = static_cast<int>(chain_.size());
  int nk = 0;
  if (trees_) {
    for (int c = 2 * k + 1; c <= 2 * k + 2 && c < h; ++c) kid[nk++] = c;
  } else if (k + 1 < h) {
    kid[nk++] = k + 1;
  }
  return nk;
}

int LateChainAllreduce::final_sender(int s) const {
  const int h = static_cast<int>(chain_.size());
  if (!trees_) return chain_.back();
  // Leaves of a heap over h nodes: indices h/2 .. h - 1.
  const int leaves = h - h / 2;
  return rank_at(tree_of(s), h / 2 + (s >> 1) % leaves);
}

// A segment's slot is free again: D went on to our children (if any) and P op D is done.
bool LateChainAllreduce::seg_finished(int s) const { return fin_done_[s] && fwd_done_[s]; }

// Posts whatever the windows allow. Each tree is its own stream (its own tag, slots and
// windows, its segments in order): a slow path down one tree does not hold the other's.
void LateChainAllreduce::pump(double now, ActionList* out) {
  (void)now;
  const int m = static_cast<int>(late_.size());
  const int ntrees = trees_ ? 2 : 1;
  if (hpos_ < 0) {
    // Late rank: once the roots said go, input segments to each, at most window_ in flight.
    for (int t = 0; t < ntrees; ++t) {
      while (go_ && next_input_[t] < tree_segs(t) && input_flight_[t] < window_) {
        const int s = seg_at(t, next_input_[t]++);
        ContributionSet me(n_);
        me.add(p_.rank);
        uint8_t* h = hdr_ptr(&seg_hdr_, s);
        encode_wire_header(h,
                           WireExpect{p_.seq, kLcPhaseInput, static_cast<uint32_t>(late_idx_),
                                      static_cast<uint32_t>(s)},
                           me);
        send(add_op(Op::kInputSend, s, late_idx_), rank_at(t, 0), input_kind(t), h, in_ptr(s),
             seg_count(s) * elem_, out);
        ++input_flight_[t];
      }
    }
    return;
  }
  for (int t = 0; t < ntrees; ++t) {
    const int k = node_of(t), segs = tree_segs(t);
    // Receives into free slots: the late inputs at the root, D from the parent elsewhere.
    while (next_recv_[t] < segs &&
           (next_recv_[t] < slots_ || seg_finished(seg_at(t, next_recv_[t] - slots_)))) {
      const int s = seg_at(t, next_recv_[t]++);
      const size_t bytes = seg_count(s) * elem_;
      if (k == 0) {
        recvs_left_[s] = m;
        for (int j = 0; j < m; ++j) {
          recv(add_op(Op::kChainRecv, s, j), late_[j], input_kind(t),
               hdr_ptr(&in_hdr_, static_cast<size_t>(s) * m + j), slot_ptr(s, j), bytes, out);
        }
      } else {
        recvs_left_[s] = 1;
        recv(add_op(Op::kChainRecv, s, -1), rank_at(t, parent_of(k)), input_kind(t),
             hdr_ptr(&in_hdr_, static_cast<size_t>(s) * m), slot_ptr(s, 0), bytes, out);
      }
    }
    // D on to our children, in order, window_ segments in flight.
    int kid[2];
    const int nk = kids_of(k, kid);
    while (next_fwd_[t] < segs && d_ready_[seg_at(t, next_fwd_[t])] && fwd_flight_[t] < window_) {
      const int s = seg_at(t, next_fwd_[t]++);
      if (nk == 0) {
        fwd_done_[s] = 1;
        continue;
      }
      uint8_t* h = hdr_ptr(&seg_hdr_, s);
      encode_wire_header(h, WireExpect{p_.seq, kLcPhaseInput, 0, static_cast<uint32_t>(s)},
                         late_set_);
      fwd_left_[s] = nk;
      for (int c = 0; c < nk; ++c) {
        send(add_op(Op::kChainSend, s, -1), rank_at(t, kid[c]), input_kind(t), h, slot_ptr(s, 0),
             seg_count(s) * elem_, out);
      }
      ++fwd_flight_[t];
    }
  }
  // The final segments we send to the late ranks, in order.
  while (next_final_ < nseg_) {
    const int s = next_final_;
    if (final_sender(s) != p_.rank) {
      ++next_final_;
      continue;
    }
    if (!fin_done_[s] || final_flight_ >= window_ * m) break;
    ++next_final_;
    ContributionSet all(n_);
    for (int r = 0; r < n_; ++r) all.add(r);
    uint8_t* h = hdr_ptr(&seg_hdr_, s);
    encode_wire_header(h, WireExpect{p_.seq, kLcPhaseFinal, 0, static_cast<uint32_t>(s)}, all);
    for (int j = 0; j < m; ++j) {
      send(add_op(Op::kFinalSend, s, j), late_[j], kKindFinal, h, out_ptr(s), seg_count(s) * elem_,
           out);
      ++final_flight_;
    }
  }
}

Status LateChainAllreduce::on_op(size_t idx, double now, ActionList* out) {
  if (idx >= ops_.size() || ops_[idx].done) return fail("completion for an unknown operation");
  OpRec& o = ops_[idx];
  o.done = true;
  --pending_;
  const int m = static_cast<int>(late_.size());
  std::string why;
  ContributionSet set(n_);
  switch (o.op) {
    case Op::kArriveRecv: {
      why = decode_wire_header(hdr_ptr(&census_hdr_, o.who), n_,
                               WireExpect{p_.seq, kLcPhaseArrive, 0, 0}, &set);
      ContributionSet want(n_);
      want.add(o.who);
      if (why.empty() && set != want) why = "arrival with set " + set.to_string();
      if (!why.empty()) return fail(fmt::format("arrival of rank {}: {}", o.who, why));
      ++stats_.messages_received;
      arrived_[o.who] = 1;
      seen_[o.who] = std::max(0.0, now - t0_);
      if (!decided_ && (now >= decision_time() ||
                        std::all_of(arrived_.begin(), arrived_.end(), [](char c) { return c; }))) {
        SKIPRING_RETURN_IF_ERROR(decide(now, out));
      }
      break;
    }
    case Op::kDecisionRecv: {
      why = decode_wire_header(hdr_ptr(&census_hdr_, coord_), n_,
                               WireExpect{p_.seq, kLcPhaseDecision, 0, 0}, &late_set_);
      if (why.empty() && late_set_.contains(coord_)) why = "the coordinator is in it";
      if (!why.empty()) return fail("decision: " + why);
      ++stats_.messages_received;
      decided_ = true;
      SKIPRING_RETURN_IF_ERROR(begin(now, out));
      break;
    }
    case Op::kArriveSend:
    case Op::kDecisionSend:
    case Op::kGoSend:
      break;
    case Op::kGoRecv:
      why = decode_wire_header(hdr_ptr(&go_hdr_, o.who), n_,
                               WireExpect{p_.seq, kLcPhaseGo, static_cast<uint32_t>(late_idx_), 0},
                               &set);
      if (why.empty() && set != late_set_) {
        why = "set " + set.to_string() + ", expected " + late_set_.to_string();
      }
      if (!why.empty()) return fail("go from the chain's head: " + why);
      ++stats_.messages_received;
      go_ = ++go_in_ == go_count();
      break;
    case Op::kInputSend:
      --input_flight_[tree_of(o.seg)];
      input_sent_[o.seg] = 1;
      // In place the final lands where the input was: receive it once the input has gone, and
      // in segment order (each final sender sends its share in that order on one tag).
      while (next_final_ < nseg_ && input_sent_[next_final_]) {
        const int s = next_final_++;
        recv(add_op(Op::kFinalRecv, s, -1), final_sender(s), kKindFinal, hdr_ptr(&in_hdr_, s),
             out_ptr(s), seg_count(s) * elem_, out);
      }
      break;
    case Op::kFinalRecv: {
      ContributionSet all(n_);
      for (int r = 0; r < n_; ++r) all.add(r);
      why = decode_wire_header(hdr_ptr(&in_hdr_, o.seg), n_,
                               WireExpect{p_.seq, kLcPhaseFinal, 0, static_cast<uint32_t>(o.seg)},
                               &set);
      if (why.empty() && set != all) why = "set " + set.to_string() + " is not every rank";
      if (!why.empty()) return fail(fmt::format("final segment {}: {}", o.seg, why));
      ++stats_.messages_received;
      ++finals_in_;
      break;
    }
    case Op::kChainRecv: {
      const int s = o.seg;
      const bool head = node_of(tree_of(s)) == 0;
      ContributionSet want(n_);
      uint8_t* h;
      if (head) {
        want.add(late_[o.who]);
        h = hdr_ptr(&in_hdr_, static_cast<size_t>(s) * m + o.who);
      } else {
        want = late_set_;
        h = hdr_ptr(&in_hdr_, static_cast<size_t>(s) * m);
      }
      why = decode_wire_header(
          h, n_,
          WireExpect{p_.seq, kLcPhaseInput, head ? static_cast<uint32_t>(o.who) : 0u,
                     static_cast<uint32_t>(s)},
          &set);
      if (why.empty() && set != want) {
        why = "set " + set.to_string() + ", expected " + want.to_string();
      }
      if (!why.empty()) return fail(fmt::format("late input segment {}: {}", s, why));
      ++stats_.messages_received;
      if (--recvs_left_[s] > 0) break;
      if (head && m > 1) {
        out->push_back(reduce_action(add_op(Op::kFold, s, 1), slot_ptr(s, 0), slot_ptr(s, 0),
                                     slot_ptr(s, 1), seg_count(s), p_.dtype, p_.op));
        break;
      }
      d_ready_[s] = 1;
      finish_.push_back(s);
      break;
    }
    case Op::kFold: {
      const int s = o.seg;
      if (o.who + 1 < m) {
        out->push_back(reduce_action(add_op(Op::kFold, s, o.who + 1), slot_ptr(s, 0),
                                     slot_ptr(s, 0), slot_ptr(s, o.who + 1), seg_count(s), p_.dtype,
                                     p_.op));
        break;
      }
      d_ready_[s] = 1;
      finish_.push_back(s);
      break;
    }
    case Op::kChainSend:
      if (--fwd_left_[o.seg] == 0) {
        --fwd_flight_[tree_of(o.seg)];
        fwd_done_[o.seg] = 1;
      }
      break;
    case Op::kFinish:
      fin_done_[o.seg] = 1;
      break;
    case Op::kFinalSend:
      --final_flight_;
      break;
  }
  if (decided_ && ring_done_ && !late_.empty() && !chain_.empty()) pump(now, out);
  // P op D after D's forward is posted: the send goes out while we add (under SimGrid the
  // addition is charged as time in which this rank posts nothing).
  for (const int s : finish_) {
    out->push_back(reduce_action(add_op(Op::kFinish, s, -1), out_ptr(s), out_ptr(s), slot_ptr(s, 0),
                                 seg_count(s), p_.dtype, p_.op));
  }
  finish_.clear();
  maybe_done(now, out);
  return Status::kOk;
}

Status LateChainAllreduce::on_recv(Token t, size_t payload_bytes, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (ring_.owns(t)) {
    if (!ring_.started() || ring_done_) return fail("completion for an unknown ring receive");
    ActionList ring_out;
    const Status st = ring_.on_recv(t, payload_bytes, now, &ring_out);
    return forward_ring(st, &ring_out, now, out);
  }
  const size_t idx = token_index_of(t);
  if (token_kind_of(t) != kTokOp) return fail("completion for an unknown receive");
  const bool data =
      idx < ops_.size() && (ops_[idx].op == Op::kChainRecv || ops_[idx].op == Op::kFinalRecv);
  if (data && payload_bytes != seg_count(ops_[idx].seg) * elem_) {
    return fail(fmt::format("segment {} of {} bytes, expected {}", ops_[idx].seg, payload_bytes,
                            seg_count(ops_[idx].seg) * elem_));
  }
  return on_op(idx, now, out);
}

Status LateChainAllreduce::on_send(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (!ring_.owns(t)) return on_op(token_index_of(t), now, out);
  if (!ring_.started() || ring_done_) return fail("completion for an unknown ring send");
  ActionList ring_out;
  return forward_ring(ring_.on_send(t, now, &ring_out), &ring_out, now, out);
}

Status LateChainAllreduce::on_reduce(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (!ring_.owns(t)) return on_op(token_index_of(t), now, out);
  if (!ring_.started() || ring_done_) return fail("completion for an unknown ring reduction");
  ActionList ring_out;
  return forward_ring(ring_.on_reduce(t, now, &ring_out), &ring_out, now, out);
}

Status LateChainAllreduce::on_time(double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (p_.rank == coord_ && started_ && !decided_ && now >= decision_time()) {
    return decide(now, out);
  }
  if (!ring_.started() || ring_done_) return Status::kOk;
  ActionList ring_out;
  return forward_ring(ring_.on_time(now, &ring_out), &ring_out, now, out);
}

double LateChainAllreduce::next_deadline() const {
  if (failed_ || done_) return std::numeric_limits<double>::infinity();
  if (p_.rank == coord_ && started_ && !decided_) return decision_time();
  if (ring_.started() && !ring_done_) return ring_.next_deadline();
  return std::numeric_limits<double>::infinity();
}

void LateChainAllreduce::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || pending_ != 0 || !decided_ || !ring_done_) return;
  if (!late_.empty()) {
    if (hpos_ < 0) {
      if (finals_in_ < nseg_) return;
    } else {
      for (int s = 0; s < nseg_; ++s) {
        if (!seg_finished(s)) return;
      }
      if (next_final_ < nseg_) return;
    }
  }
  if (ring_.started()) {
    const CollectiveStats& rs = ring_.core().stats();
    for (StepRecord r : rs.steps) {
      if (r.from >= 0) r.from = healthy_[r.from];
      if (r.to >= 0) r.to = healthy_[r.to];
      stats_.steps.push_back(r);
    }
    stats_.messages_sent += rs.messages_sent;
    stats_.messages_received += rs.messages_received;
    stats_.skips += rs.skips;
    stats_.late_pieces += rs.late_pieces;
    stats_.bypass_requests += rs.bypass_requests;
    stats_.direct_segments += rs.direct_segments;
    stats_.ag_window_opened = rs.ag_window_opened;
    stats_.rs_piece_wait_max = rs.rs_piece_wait_max;
    stats_.pred_behind = rs.pred_behind;
    stats_.skip_threshold_s = rs.skip_threshold_s;
  }
  complete(now, out);
}

std::string LateChainAllreduce::describe() const {
  std::string s = fmt::format("late chain rank {}: {}, pending {}, late {}", p_.rank,
                              !decided_       ? "census"
                              : !ring_done_   ? "ring"
                              : late_.empty() ? "done"
                                              : "chain",
                              pending_, late_set_.to_string());
  if (decided_ && !late_.empty() && ring_done_) {
    s += fmt::format(" chain pos {} recv {} fwd {} final {} go {} inputs {} finals in {}/{}", cpos_,
                     next_recv_[0] + next_recv_[1], next_fwd_[0] + next_fwd_[1], next_final_, go_,
                     next_input_[0] + next_input_[1], finals_in_, nseg_);
  }
  if (ring_.started() && !ring_done_) s += "\n    ring: " + ring_.core().describe();
  return s;
}

std::string LateChainAllreduce::describe_wait(double now) const {
  if (!decided_) {
    if (p_.rank != coord_)
      return fmt::format("waiting for the census decision from rank {}", coord_);
    std::string missing;
    for (int r = 0; r < n_; ++r) {
      if (!arrived_[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    }
    return "census: waiting for the arrival of ranks " + missing;
  }
  if (ring_.started() && !ring_done_) {
    return "ring of the healthy ranks: " + ring_.core().describe_wait(now);
  }
  if (hpos_ < 0 && !go_ && !chain_.empty()) {
    return fmt::format("waiting for go from the chain's head{} (rank {}{}), {} read",
                       go_count() > 1 ? "s" : "", rank_at(0, 0),
                       go_count() > 1 ? fmt::format(" and {}", rank_at(1, 0)) : "", go_in_);
  }
  return describe();
}

}  // namespace skipring
