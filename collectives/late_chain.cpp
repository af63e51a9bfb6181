// The late path all-reduce: census, the healthy ranks' reduce-scatter (or every rank's ring),
// the late ranks' pieces straight to the owners and the finals from them (late_chain.h).
#include "collectives/late_chain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "collectives/ring_collectives.h"
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
constexpr int kKindPiece = 2;
constexpr int kKindFinal = 3;
// Pieces and finals: a tag per segment modulo seg_tags (as ring_collectives.cpp's tag_for: under
// SimGrid a message below smpi/async-small-thresh can overtake a larger one on the same tag, and
// takes the earliest posted larger receive of its tag): at least kSegTags, and as many as the
// upper half of tag_span holds, up to 2^20, so that an owner's receives, all posted at the
// decision, never share a tag.
constexpr int kSegTags = 64;
constexpr int kOwnTags = 4 + 2 * 2 * kSegTags;
int seg_tags_for(int tag_span) {
  int t = kSegTags;
  while (t < (1 << 20) && 4 + 2 * 2 * (2 * t) <= tag_span / 2 - 1) t *= 2;
  return t;
}
// The embedded ring's tags: RingAllreduce needs its 1024 control and data tags at least.
constexpr int kMinRingSpan = 1024;

}  // namespace

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
  if (!p.late_excluded_counts.empty() && p.late_excluded_counts.size() != p.ring.size()) {
    *why = fmt::format("late_excluded_counts has {} entries for {} ranks",
                       p.late_excluded_counts.size(), p.ring.size());
    return Status::kErrArg;
  }
  if (p.late_coord < -1 || p.late_coord >= static_cast<int>(p.ring.size())) {
    *why = fmt::format("late_coord {} is not a rank of {}", p.late_coord, p.ring.size());
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
      coord_(late_coordinator(p)),
      next_coord_(coord_),
      late_set_(static_cast<int>(p.ring.size())),
      ring_(pack_token(kTokRing, 0), static_cast<int>(kTokenKindShift)) {
  const size_t seg_bytes = p_.late_segment_bytes > 0 ? p_.late_segment_bytes : p_.segment_bytes;
  seg_elems_ = std::max<size_t>(1, seg_bytes / static_cast<size_t>(elem_));
  seg_tags_ = seg_tags_for(p_.tag_span);
}

int LateChainAllreduce::tag(int kind, int seg) const {
  const int parity = static_cast<int>(p_.seq & 1);
  if (kind < kKindPiece) return p_.tag_span / 2 + 2 * kind + parity;
  return p_.tag_span / 2 + 4 + ((kind - kKindPiece) * 2 + parity) * seg_tags_ + seg % seg_tags_;
}

int LateChainAllreduce::block_of(int gid) const {
  return static_cast<int>(std::upper_bound(seg_base_.begin(), seg_base_.end(), gid) -
                          seg_base_.begin()) -
         1;
}

size_t LateChainAllreduce::seg_len(int gid) const {
  const int b = block_of(gid);
  const size_t g = static_cast<size_t>(gid - seg_base_[b]);
  return std::min(seg_elems_, block_len(b) - g * seg_elems_);
}

uint8_t* LateChainAllreduce::out_ptr(int gid) const {
  const int b = block_of(gid);
  const size_t off = boff_[b] + static_cast<size_t>(gid - seg_base_[b]) * seg_elems_;
  return static_cast<uint8_t*>(p_.recvbuf) + off * elem_;
}

const uint8_t* LateChainAllreduce::in_ptr(int gid) const {
  const int b = block_of(gid);
  const size_t off = boff_[b] + static_cast<size_t>(gid - seg_base_[b]) * seg_elems_;
  return static_cast<const uint8_t*>(p_.sendbuf) + off * elem_;
}

uint8_t* LateChainAllreduce::piece_ptr(int j, int g) {
  const size_t own = block_len(hpos_);
  return buf_.data() + (static_cast<size_t>(j) * own + static_cast<size_t>(g) * seg_elems_) * elem_;
}

Token LateChainAllreduce::add_op(Op op, int seg, int who) {
  ops_.push_back(OpRec{op, seg, who, false});
  ++pending_;
  return pack_token(kTokOp, ops_.size() - 1);
}

void LateChainAllreduce::send(Token t, int peer, int kind, uint8_t* hdr, const void* payload,
                              size_t bytes, ActionList* out, int seg) {
  out->push_back(message_action(Action::Kind::kSend, t, peer, tag(kind, seg), hdr, hdr_bytes_,
                                payload, bytes));
  ++stats_.messages_sent;
}

void LateChainAllreduce::recv(Token t, int peer, int kind, uint8_t* hdr, void* payload,
                              size_t bytes, ActionList* out, int seg) {
  out->push_back(message_action(Action::Kind::kRecv, t, peer, tag(kind, seg), hdr, hdr_bytes_,
                                payload, bytes));
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
    arrived_count_ = 1;
    t0_ = now;
    deadline_ = now + p_.late_wait_s;
    suspect_deadline_ = now + std::min(p_.late_wait_s, p_.late_wait_suspect_s);
    seen_.assign(n_, -1.0);
    seen_[coord_] = 0;
    suspect_.assign(n_, 0);
    waited_.assign(n_, -1.0);
    if (p_.late_seen_s.size() == static_cast<size_t>(n_)) {
      for (int r = 0; r < n_; ++r) {
        suspect_[r] = r != coord_ && p_.late_seen_s[r] > p_.late_wait_s;
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
  // Our wait for this coordinator's last decision, in microseconds + 1 (0: not known).
  const double wait_us = p_.late_my_wait_s >= 0 ? std::min(p_.late_my_wait_s * 1e6, 4e9) : -1;
  encode_wire_header(hdr_ptr(&census_hdr_, p_.rank), WireExpect{p_.seq, kLcPhaseArrive, 0, 0}, me,
                     0, wait_us >= 0 ? static_cast<uint32_t>(wait_us) + 1 : 0);
  send(add_op(Op::kArriveSend, -1, coord_), coord_, kKindArrive, hdr_ptr(&census_hdr_, p_.rank),
       nullptr, 0, out);
  recv(add_op(Op::kDecisionRecv, -1, coord_), coord_, kKindDecision, hdr_ptr(&census_hdr_, coord_),
       nullptr, 0, out);
  return Status::kOk;
}

// Coordinator, deciding: if every other rank waited more than twice the census's wait for our
// last decision (we came late, by more than the wait), the healthy rank after us in ring order
// that earlier decisions took out least often coordinates the next call; else we stay.
int LateChainAllreduce::next_coordinator_after() const {
  for (int r = 0; r < n_; ++r) {
    if (r == coord_) continue;
    if (!arrived_[r] || !(waited_[r] > 2 * p_.late_wait_s)) return coord_;
  }
  const int pos =
      static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), coord_) - p_.ring.begin());
  const bool counted = p_.late_excluded_counts.size() == static_cast<size_t>(n_);
  int best = coord_;
  uint32_t best_count = std::numeric_limits<uint32_t>::max();
  for (int d = 1; d < n_; ++d) {
    const int r = p_.ring[(pos + d) % n_];
    if (late_set_.contains(r)) continue;
    const uint32_t c = counted ? p_.late_excluded_counts[r] : 0;
    if (c < best_count) {
      best = r;
      best_count = c;
    }
  }
  return best;
}

// The usual ranks get the full wait; once only suspects are missing, the short one. Never before
// the healthy ranks would be a strict majority: each owner sends its block's final to the n - 1
// others, (n - 1) S / h on its uplink after the late inputs come, which is at least the ring's
// 2 (n - 1) / n S per link unless h > n / 2 (4 ranks, 3 taken out: 3 S, twice the ring).
double LateChainAllreduce::decision_time() const {
  if (2 * arrived_count_ <= n_) return std::numeric_limits<double>::infinity();
  for (int r = 0; r < n_; ++r) {
    if (!arrived_[r] && !suspect_[r]) return deadline_;
  }
  return suspect_deadline_;
}

Status LateChainAllreduce::decide(double now, ActionList* out) {
  decided_ = true;
  for (int r = 0; r < n_; ++r) {
    if (!arrived_[r]) late_set_.add(r);
  }
  next_coord_ = next_coordinator_after();
  encode_wire_header(hdr_ptr(&census_hdr_, coord_), WireExpect{p_.seq, kLcPhaseDecision, 0, 0},
                     late_set_, 0, static_cast<uint32_t>(next_coord_ + 1));
  for (int r = 0; r < n_; ++r) {
    if (r == coord_) continue;
    send(add_op(Op::kDecisionSend, -1, r), r, kKindDecision, hdr_ptr(&census_hdr_, coord_), nullptr,
         0, out);
  }
  return begin(now, out);
}

// E is known: every rank's ring (E empty), or the blocks, the healthy ranks' reduce-scatter and
// the late ranks' pieces.
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
  if (late_.empty()) return start_ring(now, out);
  const int h = static_cast<int>(healthy_.size());
  const int m = static_cast<int>(late_.size());
  boff_ = block_offsets({}, p_.count, h);
  seg_base_.assign(static_cast<size_t>(h) + 1, 0);
  for (int i = 0; i < h; ++i) {
    const size_t len = block_len(i);
    seg_base_[i + 1] = seg_base_[i] + static_cast<int>((len + seg_elems_ - 1) / seg_elems_);
  }
  nseg_ = seg_base_[h];
  final_hdr_.assign(static_cast<size_t>(nseg_) * hdr_bytes_, 0);
  if (hpos_ < 0) {
    // Late: every segment of every block comes back as a final; our pieces go out round-robin
    // over the owners (each late rank starting at another), segment by segment.
    finals_expected_ = nseg_;
    piece_hdr_.assign(static_cast<size_t>(nseg_) * hdr_bytes_, 0);
    int most = 0;
    for (int i = 0; i < h; ++i) most = std::max(most, block_segs(i));
    for (int g = 0; g < most; ++g) {
      for (int t = 0; t < h; ++t) {
        const int i = (t + late_idx_) % h;
        if (g < block_segs(i)) piece_order_.push_back(seg_base_[i] + g);
      }
    }
    piece_sent_.assign(nseg_, 0);
    next_final_.assign(h, 0);
    ring_done_ = true;  // we take no part in it
    pump_pieces(out);
    maybe_done(now, out);
    return Status::kOk;
  }
  // Healthy: the late pieces of our block may come at any time from now on.
  const int own = block_segs(hpos_);
  finals_expected_ = nseg_ - own;
  buf_.assign(static_cast<size_t>(m) * block_len(hpos_) * elem_, 0);
  piece_hdr_.assign(static_cast<size_t>(m) * own * hdr_bytes_, 0);
  pieces_left_.assign(own, m);
  folded_.assign(own, 0);
  for (int g = 0; g < own; ++g) {
    const int gid = seg_base_[hpos_] + g;
    for (int j = 0; j < m; ++j) {
      recv(add_op(Op::kPieceRecv, gid, j), late_[j], kKindPiece,
           hdr_ptr(&piece_hdr_, static_cast<size_t>(g) * m + j), piece_ptr(j, g),
           seg_len(gid) * elem_, out, g);
    }
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
    on_ring_done(now, out);
    return Status::kOk;
  }
  RingParams rp = p_;
  rp.rank = hpos_;
  rp.ring.resize(h);
  std::iota(rp.ring.begin(), rp.ring.end(), 0);
  rp.tag_span = p_.tag_span / 2;
  std::string why;
  std::unique_ptr<CollectiveCore> core;
  if (late_.empty()) {
    const Status st = RingAllreduce::validate(rp, &why);
    if (!ok(st)) {
      fail("ring of every rank: " + why);
      return st;
    }
    core = std::make_unique<RingAllreduce>(rp, ring_scratch_);
  } else {
    // Our block of P lands in place in recvbuf (RingReduceScatter reads sendbuf, in place or
    // not, and writes only our block).
    rp.skip = false;
    CollParams cp;
    cp.block_counts.resize(h);
    for (int i = 0; i < h; ++i) cp.block_counts[i] = block_len(i);
    const Status st = RingReduceScatter::validate(rp, cp, &why);
    if (!ok(st)) {
      fail("reduce-scatter of the healthy ranks: " + why);
      return st;
    }
    auto rs = std::make_unique<RingReduceScatter>(rp, cp, ring_scratch_);
    rs_ = rs.get();
    core = std::move(rs);
  }
  ActionList ring_out;
  const Status rs = ring_.start(std::move(core), now, &ring_out);
  return forward_ring(rs, &ring_out, now, out);
}

Status LateChainAllreduce::forward_ring(Status st, ActionList* ring_out, double now,
                                        ActionList* out) {
  if (!ok(st)) {
    failed_ = true;
    error_ = fmt::format("rank {} seq {}: {} of the healthy ranks: {}", p_.rank, p_.seq,
                         late_.empty() ? "ring" : "reduce-scatter", ring_.error());
    return st;
  }
  for (Action a : *ring_out) {
    if ((a.kind == Action::Kind::kSend || a.kind == Action::Kind::kRecv) && a.peer >= 0) {
      a.peer = healthy_[a.peer];
    }
    out->push_back(a);
  }
  if (ring_.done() && !ring_done_) {
    ring_done_ = true;
    on_ring_done(now, out);
  } else if (rs_ != nullptr && !ring_done_ && rs_->final_prefix_elems() != final_seen_) {
    final_seen_ = rs_->final_prefix_elems();
    try_folds(out);  // our block's segments that the reduce-scatter has just finished
  }
  return Status::kOk;
}

// P (our block) is final on this rank: receive the other owners' finals (into recvbuf, which the
// reduce-scatter no longer reads once it is over, in place too) and fold what has come.
void LateChainAllreduce::on_ring_done(double now, ActionList* out) {
  if (!late_.empty() && hpos_ >= 0) {
    post_finals(out);
    try_folds(out);
  }
  maybe_done(now, out);
}

void LateChainAllreduce::post_finals(ActionList* out) {
  if (finals_posted_) return;
  finals_posted_ = true;
  const int h = static_cast<int>(healthy_.size());
  for (int i = 0; i < h; ++i) {
    if (i == hpos_) continue;
    for (int g = 0; g < block_segs(i); ++g) {
      const int gid = seg_base_[i] + g;
      recv(add_op(Op::kFinalRecv, gid, i), healthy_[i], kKindFinal, hdr_ptr(&final_hdr_, gid),
           out_ptr(gid), seg_len(gid) * elem_, out, g);
    }
  }
}

// Owner: every segment whose late pieces are all in and whose P is final (the reduce-scatter
// is over, or has finished that part of our block: final_prefix_elems) starts its fold.
void LateChainAllreduce::try_folds(ActionList* out) {
  if (hpos_ < 0 || late_.empty()) return;
  size_t final_elems = block_len(hpos_);
  if (!ring_done_) {
    if (rs_ == nullptr) return;
    final_elems = rs_->final_prefix_elems();
  }
  const int own = block_segs(hpos_);
  while (fold_scan_ < own && pieces_left_[fold_scan_] < 0) ++fold_scan_;
  for (int g = fold_scan_; g < own; ++g) {
    const size_t end = std::min(block_len(hpos_), (static_cast<size_t>(g) + 1) * seg_elems_);
    if (end > final_elems) break;
    if (pieces_left_[g] != 0) continue;
    pieces_left_[g] = -1;  // its fold is under way
    const int gid = seg_base_[hpos_] + g;
    out->push_back(reduce_action(add_op(Op::kFold, gid, 0), out_ptr(gid), out_ptr(gid),
                                 piece_ptr(0, g), seg_len(gid), p_.dtype, p_.op));
  }
}

// Owner: our final segment g to every other rank, in ring order from our successor on.
void LateChainAllreduce::send_finals(int g, ActionList* out) {
  const int gid = seg_base_[hpos_] + g;
  ContributionSet all(n_);
  for (int r = 0; r < n_; ++r) all.add(r);
  uint8_t* h = hdr_ptr(&final_hdr_, gid);
  encode_wire_header(
      h, WireExpect{p_.seq, kLcPhaseFinal, static_cast<uint32_t>(hpos_), static_cast<uint32_t>(g)},
      all);
  const int pos =
      static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), p_.rank) - p_.ring.begin());
  for (int d = 1; d < n_; ++d) {
    const int r = p_.ring[(pos + d) % n_];
    send(add_op(Op::kFinalSend, gid, r), r, kKindFinal, h, out_ptr(gid), seg_len(gid) * elem_, out,
         g);
  }
}

// Late rank: our pieces, at most late_inflight in flight.
void LateChainAllreduce::pump_pieces(ActionList* out) {
  ContributionSet me(n_);
  me.add(p_.rank);
  while (next_piece_ < piece_order_.size() && piece_flight_ < p_.late_inflight) {
    const int gid = piece_order_[next_piece_++];
    const int b = block_of(gid);
    uint8_t* h = hdr_ptr(&piece_hdr_, gid);
    encode_wire_header(h,
                       WireExpect{p_.seq, kLcPhaseInput, static_cast<uint32_t>(late_idx_),
                                  static_cast<uint32_t>(gid - seg_base_[b])},
                       me);
    send(add_op(Op::kPieceSend, gid, b), healthy_[b], kKindPiece, h, in_ptr(gid),
         seg_len(gid) * elem_, out, gid - seg_base_[b]);
    ++piece_flight_;
  }
}

Status LateChainAllreduce::on_op(size_t idx, double now, ActionList* out) {
  if (idx >= ops_.size() || ops_[idx].done) return fail("completion for an unknown operation");
  ops_[idx].done = true;
  const OpRec o = ops_[idx];  // a copy: add_op below may move ops_
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
      ++arrived_count_;  // one arrival receive per rank
      arrived_[o.who] = 1;
      seen_[o.who] = std::max(0.0, now - t0_);
      if (now < deadline_) {
        // Ranks that keep arriving are a spread, not stragglers (kCensusSpreadShare).
        deadline_ = std::min(t0_ + kCensusSpreadCap * p_.late_wait_s,
                             std::max(deadline_, now + kCensusSpreadShare * p_.late_wait_s));
      }
      if (const uint32_t w = wire_route(hdr_ptr(&census_hdr_, o.who)); w > 0) {
        waited_[o.who] = (w - 1) * 1e-6;
      }
      if (!decided_ && (now >= decision_time() || arrived_count_ == n_)) {
        SKIPRING_RETURN_IF_ERROR(decide(now, out));
      }
      break;
    }
    case Op::kDecisionRecv: {
      why = decode_wire_header(hdr_ptr(&census_hdr_, coord_), n_,
                               WireExpect{p_.seq, kLcPhaseDecision, 0, 0}, &late_set_);
      if (why.empty() && late_set_.contains(coord_)) why = "the coordinator is in it";
      if (why.empty()) {
        const uint32_t next = wire_route(hdr_ptr(&census_hdr_, coord_));
        if (next == 0 || next > static_cast<uint32_t>(n_)) {
          why = fmt::format("next coordinator word {} is not a rank", next);
        } else if (late_set_.contains(static_cast<int>(next) - 1)) {
          why = fmt::format("next coordinator {} is late", next - 1);
        } else {
          next_coord_ = static_cast<int>(next) - 1;
        }
        decision_wait_ = std::max(0.0, now - stats_.start);
      }
      if (!why.empty()) return fail("decision: " + why);
      ++stats_.messages_received;
      decided_ = true;
      SKIPRING_RETURN_IF_ERROR(begin(now, out));
      break;
    }
    case Op::kArriveSend:
    case Op::kDecisionSend:
    case Op::kFinalSend:
      break;
    case Op::kPieceSend: {
      --piece_flight_;
      piece_sent_[o.seg] = 1;
      // In place the final lands where the piece was: receive it once the piece has gone, in
      // segment order per owner (each owner sends us its finals in that order on one tag).
      const int b = o.who;
      while (next_final_[b] < block_segs(b) && piece_sent_[seg_base_[b] + next_final_[b]]) {
        const int g = next_final_[b]++;
        const int gid = seg_base_[b] + g;
        recv(add_op(Op::kFinalRecv, gid, b), healthy_[b], kKindFinal, hdr_ptr(&final_hdr_, gid),
             out_ptr(gid), seg_len(gid) * elem_, out, g);
      }
      pump_pieces(out);
      break;
    }
    case Op::kPieceRecv: {
      const int g = o.seg - seg_base_[hpos_];
      uint8_t* h = hdr_ptr(&piece_hdr_, static_cast<size_t>(g) * m + o.who);
      why = decode_wire_header(
          h, n_,
          WireExpect{p_.seq, kLcPhaseInput, static_cast<uint32_t>(o.who), static_cast<uint32_t>(g)},
          &set);
      ContributionSet want(n_);
      want.add(late_[o.who]);
      if (why.empty() && set != want) {
        why = "set " + set.to_string() + ", expected " + want.to_string();
      }
      if (!why.empty()) return fail(fmt::format("late piece, segment {}: {}", g, why));
      ++stats_.messages_received;
      ++stats_.late_pieces;
      if (--pieces_left_[g] == 0) try_folds(out);
      break;
    }
    case Op::kFold: {
      const int g = o.seg - seg_base_[hpos_];
      if (o.who + 1 < m) {
        out->push_back(reduce_action(add_op(Op::kFold, o.seg, o.who + 1), out_ptr(o.seg),
                                     out_ptr(o.seg), piece_ptr(o.who + 1, g), seg_len(o.seg),
                                     p_.dtype, p_.op));
        break;
      }
      folded_[g] = 1;
      ++folds_done_;
      // In segment order: every rank posts its receives for our finals in that order.
      while (next_final_send_ < block_segs(hpos_) && folded_[next_final_send_]) {
        send_finals(next_final_send_++, out);
      }
      break;
    }
    case Op::kFinalRecv: {
      ContributionSet all(n_);
      for (int r = 0; r < n_; ++r) all.add(r);
      const int b = o.who;
      why = decode_wire_header(hdr_ptr(&final_hdr_, o.seg), n_,
                               WireExpect{p_.seq, kLcPhaseFinal, static_cast<uint32_t>(b),
                                          static_cast<uint32_t>(o.seg - seg_base_[b])},
                               &set);
      if (why.empty() && set != all) why = "set " + set.to_string() + " is not every rank";
      if (!why.empty()) {
        return fail(fmt::format("final segment {} of block {}: {}", o.seg - seg_base_[b], b, why));
      }
      ++stats_.messages_received;
      ++finals_in_;
      break;
    }
  }
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
      idx < ops_.size() && (ops_[idx].op == Op::kPieceRecv || ops_[idx].op == Op::kFinalRecv);
  if (data && payload_bytes != seg_len(ops_[idx].seg) * elem_) {
    return fail(fmt::format("segment {} of {} bytes, expected {}", ops_[idx].seg, payload_bytes,
                            seg_len(ops_[idx].seg) * elem_));
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
    if (finals_in_ < finals_expected_) return;
    if (hpos_ < 0 && next_piece_ < piece_order_.size()) return;
    if (hpos_ >= 0 && (!finals_posted_ || next_final_send_ < block_segs(hpos_))) return;
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
  std::string s = fmt::format("late path rank {}: {}, pending {}, late {}", p_.rank,
                              !decided_       ? "census"
                              : !ring_done_   ? (late_.empty() ? "ring" : "reduce-scatter")
                              : late_.empty() ? "done"
                                              : "late pieces",
                              pending_, late_set_.to_string());
  if (decided_ && !late_.empty()) {
    if (hpos_ >= 0) {
      s += fmt::format(" owner of block {}: folded {}/{} finals in {}/{}", hpos_, folds_done_,
                       block_segs(hpos_), finals_in_, finals_expected_);
    } else {
      s += fmt::format(" pieces sent {}/{} finals in {}/{}", next_piece_, piece_order_.size(),
                       finals_in_, finals_expected_);
    }
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
    return (late_.empty() ? "ring of every rank: " : "reduce-scatter of the healthy ranks: ") +
           ring_.core().describe_wait(now);
  }
  if (hpos_ >= 0 && !late_.empty()) {
    for (int g = 0; g < block_segs(hpos_); ++g) {
      if (pieces_left_[g] > 0) {
        std::string who;
        for (int j = 0; j < static_cast<int>(late_.size()); ++j) {
          who += (who.empty() ? "" : ",") + std::to_string(late_[j]);
        }
        return fmt::format("waiting for late ranks {}'s pieces of block {} (segment {} of {})", who,
                           hpos_, g, block_segs(hpos_));
      }
    }
  }
  return describe();
}

}  // namespace skipring
