// Hierarchical all-reduce state machine (see hier_allreduce.h for the protocol).
#include "collectives/hier_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "common/align.h"

namespace skipring {
namespace {

// Our tokens: a kind in the top bits (common/token.h), an index below. kTokRing is the embedded
// ring's (NestedCore maps each of its operations to one index: its own token numbers stay its
// own).
enum TokenKind : uint32_t { kTokRecv = 0, kTokSend = 1, kTokReduce = 2, kTokRing = 3 };

Token make_token(TokenKind k, size_t idx) { return pack_token(k, idx); }
uint32_t token_kind(Token t) { return token_kind_of(t); }
size_t token_index(Token t) { return token_index_of(t); }

int smallest_host(const std::vector<int>& host_of, int n) {
  std::vector<int> size(n, 0);
  for (int h : host_of) {
    if (h >= 0 && h < n) ++size[h];
  }
  int m = n;
  for (int s : size) {
    if (s > 0) m = std::min(m, s);
  }
  return std::max(1, m);
}

}  // namespace

Status HierAllreduce::validate(const RingParams& p, const std::vector<int>& host_of_rank,
                               std::string* why, const std::vector<std::vector<int>>& local_order) {
  SKIPRING_RETURN_IF_ERROR(validate_common(p, why));
  const int n = static_cast<int>(p.ring.size());
  if (static_cast<int>(host_of_rank.size()) != n) {
    *why = fmt::format("host map has {} entries for {} ranks", host_of_rank.size(), n);
    return Status::kErrArg;
  }
  std::vector<int> size(n, 0);
  int hosts = 0;
  for (int h : host_of_rank) {
    if (h < 0 || h >= n) return *why = "host id outside 0..n-1", Status::kErrArg;
    ++size[h];
    hosts = std::max(hosts, h + 1);
  }
  for (int h = 0; h < hosts; ++h) {
    if (size[h] == 0)
      return *why = fmt::format("host ids not dense: host {} empty", h), Status::kErrArg;
  }
  if (!local_order.empty()) {
    if (static_cast<int>(local_order.size()) != hosts)
      return *why = fmt::format("local order for {} hosts, {} expected", local_order.size(), hosts),
             Status::kErrArg;
    for (int h = 0; h < hosts; ++h) {
      std::vector<int> got = local_order[h];
      std::sort(got.begin(), got.end());
      std::vector<int> want;
      for (int r = 0; r < n; ++r) {
        if (host_of_rank[r] == h) want.push_back(r);
      }
      if (got != want)
        return *why = fmt::format("local order of host {} is not a permutation of its ranks", h),
               Status::kErrArg;
    }
  }
  if (p.depth < 1) return *why = "pipeline depth < 1", Status::kErrArg;
  if (p.tag_span < 2048) return *why = "tag space too small", Status::kErrArg;
  if (p.segment_bytes < dtype_size(p.dtype)) return *why = "segment too small", Status::kErrArg;
  return Status::kOk;
}

HierAllreduce::HierAllreduce(const RingParams& p, std::vector<int> host_of_rank,
                             std::vector<uint8_t>* scratch,
                             std::vector<std::vector<int>> local_order)
    : CoreBase(p.rank, p.seq),
      p_(p),
      host_of_(std::move(host_of_rank)),
      local_order_(std::move(local_order)),
      n_(static_cast<int>(p.ring.size())),
      elem_(dtype_size(p.dtype)),
      in_place_(p.sendbuf == p.recvbuf),
      layout_(1, 0, 1, 1),
      scratch_(scratch),
      ring_(make_token(kTokRing, 0), static_cast<int>(kTokenKindShift)) {
  ring_span_ = p_.tag_span / 2;
  tag_rs_ = ring_span_;
  tag_ag_ = ring_span_ + (p_.tag_span - ring_span_) / 2;
  hdr_bytes_ = wire_header_bytes(n_);
  hdr_area_ = round_up(hdr_bytes_, 64);
  stats_.seq = p_.seq;
  stats_.bytes = p_.count * elem_;
  stats_.skip_threshold_s = p_.skip ? p_.skip_threshold_s : 0;
  std::string why;
  if (!ok(validate(p_, host_of_, &why, local_order_))) return;  // start() reports it
  for (int h : host_of_) hosts_ = std::max(hosts_, h + 1);
  if (!local_order_.empty()) {
    groups_ = local_order_;
  } else {
    groups_.resize(hosts_);
    for (int r = 0; r < n_; ++r) groups_[host_of_[r]].push_back(r);
  }
  std::vector<char> seen(hosts_, 0);
  for (int r : p_.ring) {
    if (!seen[host_of_[r]]) host_order_.push_back(host_of_[r]);
    seen[host_of_[r]] = 1;
  }
  host_ = host_of_[p_.rank];
  const auto& g = groups_[host_];
  local_ = static_cast<int>(std::find(g.begin(), g.end(), p_.rank) - g.begin());
  m_ = static_cast<int>(g.size());
  blocks_ = smallest_host(host_of_, n_);
  owner_ = local_ < blocks_;
  // Segments grow so that every block's segment index fits each local phase's tag range.
  const size_t max_segs = static_cast<size_t>(std::min(tag_ag_ - tag_rs_, p_.tag_span - tag_ag_));
  const size_t per_block = p_.count / blocks_ + 1;
  const size_t need_elems = (per_block + max_segs - 1) / max_segs;
  const size_t seg = std::max({p_.segment_bytes, elem_, need_elems * elem_});
  layout_ = RingLayout(blocks_, p_.count, elem_, seg);
  host_set_ = ContributionSet(n_);
  for (int r : g) host_set_.add(r);
  full_set_ = ContributionSet(n_);
  for (int r = 0; r < n_; ++r) full_set_.add(r);
}

uint8_t* HierAllreduce::recv_ptr(int k, int g) const {
  return static_cast<uint8_t*>(p_.recvbuf) + layout_.segment_offset(k, g) * elem_;
}

const uint8_t* HierAllreduce::input_ptr(int k, int g) const {
  return static_cast<const uint8_t*>(p_.sendbuf) + layout_.segment_offset(k, g) * elem_;
}

int HierAllreduce::add_record(bool rs, int from, int to, int chunk) {
  StepRecord r;
  r.phase = rs ? Phase::kReduceScatter : Phase::kAllgather;
  r.step = rs ? 0 : hosts_ - 1;
  r.chunk = chunk;
  r.from = from;
  r.to = to;
  r.t_start = t_start_;
  auto& v = rs ? local_rs_steps_ : local_ag_steps_;
  v.push_back(r);
  return static_cast<int>(v.size()) - 1;
}

Status HierAllreduce::start(double now, ActionList* out) {
  t_start_ = now;
  stats_.start = now;
  std::string why;
  const Status valid = validate(p_, host_of_, &why, local_order_);
  if (!ok(valid)) {
    fail(why);
    return valid;
  }
  const int my_segs = owner_ ? layout_.segments(local_) : 0;

  // Receives: phase 1 (owner, from every other local rank, into scratch), phase 3 (every
  // other block, from its local owner, straight into recvbuf).
  size_t p1_recvs = 0;
  if (owner_ && m_ > 1) p1_recvs = static_cast<size_t>(m_ - 1) * my_segs;
  size_t p1_sends = 0, p3_recvs = 0;
  for (int k = 0; k < blocks_; ++k) {
    if (owner_ && k == local_) continue;
    p1_sends += layout_.segments(k);
    p3_recvs += layout_.segments(k);
  }
  const size_t nhdr = p1_recvs + p3_recvs + p1_sends + my_segs;
  hdrs_.assign(nhdr * hdr_area_ + 64, 0);
  uint8_t* hdr = hdrs_.data() + (64 - reinterpret_cast<uintptr_t>(hdrs_.data()) % 64) % 64;
  auto next_hdr = [&]() {
    uint8_t* h = hdr;
    hdr += hdr_area_;
    return h;
  };

  // Scratch (phase 1 of our block): one block-sized area per other local rank, plus our own
  // input in place when it is not folded first (recvbuf is the accumulator).
  const size_t block_bytes = owner_ ? layout_.chunk_count(local_) * elem_ : 0;
  const size_t area = round_up(block_bytes, 64);
  const bool copy_own = owner_ && m_ > 1 && in_place_ && local_ > 0 && block_bytes > 0;
  if (p1_recvs > 0) {
    const size_t need = 64 + area * (m_ - 1 + (copy_own ? 1 : 0));
    if (scratch_->size() < need) scratch_->resize(need);
  }
  uint8_t* sbase = scratch_->empty() ? nullptr : scratch_->data();
  if (sbase) sbase += (64 - reinterpret_cast<uintptr_t>(sbase) % 64) % 64;

  if (owner_) {
    folds_.resize(my_segs);
    final_bytes_.assign(my_segs, 0);
    ag_seg_sent_.assign(my_segs, 0);
    rs_record_of_local_.assign(m_, -1);
    if (my_segs > 0) {
      for (int i = 0; i < m_; ++i) {
        if (i != local_)
          rs_record_of_local_[i] = add_record(true, local_rank(host_, i), -1, local_);
      }
    }
    for (int g = 0; g < my_segs; ++g) {
      folds_[g].acc = ContributionSet(n_);
      folds_[g].piece.assign(m_, -1);
    }
    int slot = 0;
    for (int i = 0; i < m_ && my_segs > 0; ++i) {
      if (i == local_) continue;
      uint8_t* piece = sbase + area * slot++;
      for (int g = 0; g < my_segs; ++g) {
        RecvOp r;
        r.phase = kHierPhaseLocalRs;
        r.src_local = i;
        r.block = local_;
        r.seg = g;
        r.hdr = next_hdr();
        r.payload =
            piece + (layout_.segment_offset(local_, g) - layout_.chunk_offset(local_)) * elem_;
        r.bytes = layout_.segment_count(local_, g) * elem_;
        r.record = rs_record_of_local_[i];
        r.set = ContributionSet(n_);
        folds_[g].piece[i] = static_cast<int>(recvs_.size());
        recvs_.push_back(std::move(r));
      }
    }
    if (copy_own) own_copy_ = sbase + area * (m_ - 1);
  }
  ag_recv_of_.assign(layout_.total_segments(), SIZE_MAX);
  for (int k = 0; k < blocks_; ++k) {
    if ((owner_ && k == local_) || layout_.segments(k) == 0) continue;
    const int rec = add_record(false, local_rank(host_, k), -1, k);
    for (int g = 0; g < layout_.segments(k); ++g) {
      RecvOp r;
      r.phase = kHierPhaseLocalAg;
      r.src_local = k;
      r.block = k;
      r.seg = g;
      r.hdr = next_hdr();
      r.payload = recv_ptr(k, g);
      r.bytes = layout_.segment_count(k, g) * elem_;
      r.record = rec;
      r.set = ContributionSet(n_);
      ag_recv_of_[layout_.first_segment(k) + g] = recvs_.size();
      recvs_.push_back(std::move(r));
    }
  }

  // Our own input for our block, before anything writes recvbuf.
  if (owner_ && block_bytes > 0) {
    if (copy_own) {
      out->push_back(copy_action(own_copy_, recv_ptr(local_, 0), block_bytes));
    } else if (m_ == 1 && !in_place_) {
      out->push_back(copy_action(recv_ptr(local_, 0), input_ptr(local_, 0), block_bytes));
    }
  }
  for (size_t i = 0; i < recvs_.size(); ++i) {
    // In place, a block segment we still send in phase 1 is received only after that send.
    if (recvs_[i].phase == kHierPhaseLocalAg && in_place_) continue;
    post_recv(i, now, out);
  }

  // Phase 1 sends, to the owners in turn starting after us (spreads the load on the owners).
  p1_sends_left_.assign(layout_.total_segments(), 0);
  ContributionSet mine(n_);
  mine.add(p_.rank);
  for (int d = 1; d <= blocks_; ++d) {
    const int k = (local_ + d) % blocks_;
    if ((owner_ && k == local_) || layout_.segments(k) == 0) continue;
    const int owner = local_rank(host_, k);
    const int rec = add_record(true, -1, owner, k);
    for (int g = 0; g < layout_.segments(k); ++g) {
      uint8_t* h = next_hdr();
      encode_wire_header(
          h,
          WireExpect{p_.seq, kHierPhaseLocalRs, static_cast<uint32_t>(k), static_cast<uint32_t>(g)},
          mine);
      p1_sends_left_[layout_.first_segment(k) + g] = 1;
      post_send(owner, tag_rs_ + g, h, input_ptr(k, g), layout_.segment_count(k, g) * elem_, rec,
                true, k, g, now, out);
    }
  }
  // Headers of our block's allgather segments follow the others.
  ag_hdr_base_ = hdr;

  if (!owner_ || my_segs == 0) {
    block_reduced_ = true;
  } else if (m_ == 1) {
    for (int g = 0; g < my_segs; ++g) folds_[g].acc = host_set_;
    block_reduced_ = true;
    segs_reduced_ = my_segs;
    if (hosts_ > 1) SKIPRING_RETURN_IF_ERROR(start_ring(now, out));
  } else {
    for (int g = 0; g < my_segs; ++g) SKIPRING_RETURN_IF_ERROR(advance_fold(g, now, out));
  }
  maybe_done(now, out);
  return Status::kOk;
}

void HierAllreduce::post_recv(size_t idx, double now, ActionList* out) {
  RecvOp& r = recvs_[idx];
  r.posted = true;
  r.t_posted = now;
  out->push_back(message_action(Action::Kind::kRecv, make_token(kTokRecv, idx),
                                local_rank(host_, r.src_local),
                                (r.phase == kHierPhaseLocalRs ? tag_rs_ : tag_ag_) + r.seg, r.hdr,
                                hdr_bytes_, r.payload, r.bytes));
  ++pending_;
}

void HierAllreduce::post_send(int peer, int tag, uint8_t* hdr, const void* payload, size_t bytes,
                              int record, bool rs, int block, int seg, double now,
                              ActionList* out) {
  SendOp s;
  s.record = record;
  s.t_posted = now;
  s.block = block;
  s.seg = seg;
  s.phase1 = rs;
  Action a = message_action(Action::Kind::kSend, make_token(kTokSend, sends_.size()), peer, tag,
                            hdr, hdr_bytes_, payload, bytes);
  a.phase = static_cast<int8_t>(rs ? Phase::kReduceScatter : Phase::kAllgather);
  a.step = static_cast<int16_t>(rs ? 0 : hosts_ - 1);
  sends_.push_back(s);
  out->push_back(a);
  ++pending_;
  ++stats_.messages_sent;
}

const void* HierAllreduce::piece_ptr(int g, int i) const {
  if (i != local_) return recvs_[folds_[g].piece[i]].payload;
  if (!in_place_) return input_ptr(local_, g);
  if (local_ == 0) return recv_ptr(local_, g);  // the accumulator starts as our input
  return own_copy_ + (layout_.segment_offset(local_, g) - layout_.chunk_offset(local_)) * elem_;
}

Status HierAllreduce::advance_fold(int g, double now, ActionList* out) {
  Fold& f = folds_[g];
  if (f.reducing || f.next >= m_) return Status::kOk;
  const int s = f.next;
  auto ready = [&](int i) { return i == local_ || recvs_[f.piece[i]].arrived; };
  auto set_of = [&](int i) -> ContributionSet {
    if (i != local_) return recvs_[f.piece[i]].set;
    ContributionSet own(n_);
    own.add(p_.rank);
    return own;
  };
  if (!ready(s) || (s == 1 && !ready(0))) return Status::kOk;
  // Checked in fold order: a piece that arrived early is checked against everything folded
  // before it, whatever the arrival order.
  for (int i = (s == 1 ? 0 : s); i <= s; ++i) {
    const ContributionSet set = set_of(i);
    if (set.overlaps(f.acc)) {
      return fail(
          fmt::format("local reduce-scatter block {} segment {}: piece of local rank {} "
                      "has contribution set {} overlapping accumulated set {}",
                      local_, g, local_rank(host_, i), set.to_string(), f.acc.to_string()));
    }
    f.acc.merge(set);
  }
  if (s == m_ - 1 && f.acc != host_set_) {
    return fail(
        fmt::format("local reduce-scatter block {} segment {} would complete with set {}, "
                    "expected {}",
                    local_, g, f.acc.to_string(), host_set_.to_string()));
  }
  f.reducing = true;
  f.t_reduce = now;
  void* dst = recv_ptr(local_, g);
  const void* a = s == 1 ? piece_ptr(g, 0) : dst;
  out->push_back(reduce_action(make_token(kTokReduce, g), dst, a, piece_ptr(g, s),
                               layout_.segment_count(local_, g), p_.dtype, p_.op));
  ++pending_;
  return Status::kOk;
}

Status HierAllreduce::segment_reduced(int g, double now, ActionList* out) {
  ++segs_reduced_;
  if (hosts_ == 1) send_block_segment(g, now, out);
  if (segs_reduced_ == layout_.segments(local_)) {
    block_reduced_ = true;
    if (hosts_ > 1) SKIPRING_RETURN_IF_ERROR(start_ring(now, out));
  }
  return Status::kOk;
}

bool HierAllreduce::in_block(const void* p, size_t bytes) const {
  if (!owner_) return false;
  const uint8_t* base = recv_ptr(local_, 0);
  const uint8_t* q = static_cast<const uint8_t*>(p);
  return q >= base && q + bytes <= base + layout_.chunk_count(local_) * elem_ && bytes > 0;
}

void HierAllreduce::mark_final(const void* p, size_t bytes, double now, ActionList* out) {
  if (m_ == 1) return;
  const size_t lo = static_cast<const uint8_t*>(p) - recv_ptr(local_, 0), hi = lo + bytes;
  if (!final_regions_.insert(lo).second) return;  // forwarded after it was received
  const size_t base = layout_.chunk_offset(local_);
  for (int g = 0; g < layout_.segments(local_); ++g) {
    const size_t s0 = (layout_.segment_offset(local_, g) - base) * elem_;
    const size_t s1 = s0 + layout_.segment_count(local_, g) * elem_;
    if (s1 <= lo || s0 >= hi) continue;
    final_bytes_[g] += std::min(s1, hi) - std::max(s0, lo);
    if (final_bytes_[g] == s1 - s0) send_block_segment(g, now, out);
  }
}

void HierAllreduce::send_block_segment(int g, double now, ActionList* out) {
  if (m_ == 1 || ag_seg_sent_[g]) return;
  ag_seg_sent_[g] = 1;
  if (ag_records_.empty()) {
    ag_records_.assign(m_, -1);
    for (int i = 0; i < m_; ++i) {
      if (i != local_) ag_records_[i] = add_record(false, -1, local_rank(host_, i), local_);
    }
  }
  uint8_t* h = ag_hdr_base_ + static_cast<size_t>(g) * hdr_area_;
  encode_wire_header(h,
                     WireExpect{p_.seq, kHierPhaseLocalAg, static_cast<uint32_t>(local_),
                                static_cast<uint32_t>(g)},
                     full_set_);
  for (int d = 1; d < m_; ++d) {
    const int i = (local_ + d) % m_;
    post_send(local_rank(host_, i), tag_ag_ + g, h, recv_ptr(local_, g),
              layout_.segment_count(local_, g) * elem_, ag_records_[i], false, local_, g, now, out);
  }
}

Status HierAllreduce::start_ring(double now, ActionList* out) {
  RingParams rp;
  rp.rank = host_;
  rp.ring = host_order_;
  rp.count = layout_.chunk_count(local_);
  rp.dtype = p_.dtype;
  rp.op = p_.op;
  rp.sendbuf = rp.recvbuf = recv_ptr(local_, 0);
  // A ring across hosts: its segments follow the flat ring's rules (cross_host_segment_bytes,
  // the lead-in), so with one rank per host this is the flat ring, to the message.
  const size_t hosts = host_order_.size();
  rp.segment_bytes = cross_host_segment_bytes(p_.segment_bytes,
                                              rp.count * elem_ / std::max<size_t>(1, hosts) + elem_,
                                              hosts, p_.socket_links);
  rp.lead_in = hosts > 1;
  rp.socket_links = p_.socket_links;
  rp.depth = p_.depth;
  rp.seq = p_.seq;
  rp.skip = p_.skip;
  rp.skip_threshold_s = p_.skip_threshold_s;
  rp.tag_span = ring_span_;
  std::string why;
  const Status st = RingAllreduce::validate(rp, &why);
  if (!ok(st)) {
    fail("inter-host ring: " + why);
    return st;
  }
  // Phase 1 of our block is over: its scratch is free for the ring.
  ActionList ring_out;
  const Status rs = ring_.start(std::make_unique<RingAllreduce>(rp, scratch_), now, &ring_out);
  return forward_ring(rs, ring_out, now, out);
}

Status HierAllreduce::forward_ring(Status st, const ActionList& ring_out, double now,
                                   ActionList* out) {
  if (!ok(st)) {
    failed_ = true;
    error_ = fmt::format("rank {} seq {}: inter-host ring: {}", p_.rank, p_.seq, ring_.error());
    return st;
  }
  // ring_out holds the ring's actions with our tokens, without its kDone (NestedCore).
  for (Action a : ring_out) {
    if (a.kind == Action::Kind::kSend || a.kind == Action::Kind::kRecv) {
      // Ring peers are host ids. A receive from any source (-1: the ring's pieces that come
      // straight to a chunk's owner) stays one: only our sub-ring sends on ring tags to us,
      // since every rank is in at most one sub-ring.
      if (a.peer >= 0) a.peer = local_rank(a.peer, local_);
      if (a.phase == static_cast<int8_t>(Phase::kReduceScatter) && a.step >= 0) ++a.step;
    }
    out->push_back(a);
    // Final data of the block, which phase 3 may send on at once: what the ring receives into
    // the block (only its allgather does; its reduce-scatter pieces land in scratch) once it
    // has arrived, and what it sends from the block in its allgather (its own chunk, final).
    // A cancelled receive delivers nothing (and NestedCore may give its token to a later one).
    if (a.kind == Action::Kind::kCancel) {
      ring_ag_recvs_.erase(a.token);
    } else if (a.kind == Action::Kind::kRecv && in_block(a.payload, a.payload_bytes)) {
      ring_ag_recvs_.emplace(a.token, std::make_pair(a.payload, a.payload_bytes));
    } else if (a.kind == Action::Kind::kSend && a.phase == static_cast<int8_t>(Phase::kAllgather) &&
               in_block(a.payload, a.payload_bytes)) {
      mark_final(a.payload, a.payload_bytes, now, out);
    }
  }
  // The ring's completion: every byte of the block is final.
  if (ring_.done() && !ring_done_) {
    ring_done_ = true;
    for (int g = 0; g < layout_.segments(local_); ++g) send_block_segment(g, now, out);
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status HierAllreduce::on_recv(Token t, size_t payload_bytes, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (ring_.owns(t)) {
    if (!ring_.started() || ring_done_) return fail("completion for an unknown ring receive");
    ActionList ring_out;
    const Status st = ring_.on_recv(t, payload_bytes, now, &ring_out);
    const auto ag = ring_ag_recvs_.find(t);
    if (ok(st) && ag != ring_ag_recvs_.end()) {
      mark_final(ag->second.first, ag->second.second, now, out);
      ring_ag_recvs_.erase(ag);
    }
    return forward_ring(st, ring_out, now, out);
  }
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokRecv || idx >= recvs_.size() || !recvs_[idx].posted ||
      recvs_[idx].arrived) {
    return fail("completion for an unknown receive");
  }
  RecvOp& r = recvs_[idx];
  const char* what = r.phase == kHierPhaseLocalRs ? "local reduce-scatter" : "local allgather";
  if (payload_bytes != r.bytes) {
    return fail(fmt::format("{} block {} segment {} from rank {}: {} payload bytes, expected {}",
                            what, r.block, r.seg, local_rank(host_, r.src_local), payload_bytes,
                            r.bytes));
  }
  r.arrived = true;
  --pending_;
  ++stats_.messages_received;
  StepRecord& rec = (r.phase == kHierPhaseLocalRs ? local_rs_steps_ : local_ag_steps_)[r.record];
  if (rec.segments++ == 0) rec.first_arrival = now;
  rec.last_arrival = now;
  rec.t_end = std::max(rec.t_end, now);
  rec.wait_s = std::max(rec.wait_s, now - rec.t_start);
  const std::string why = decode_wire_header(
      r.hdr, n_,
      WireExpect{p_.seq, r.phase, static_cast<uint32_t>(r.block), static_cast<uint32_t>(r.seg)},
      &r.set);
  if (!why.empty()) {
    return fail(fmt::format("{} block {} segment {} from rank {}: {}", what, r.block, r.seg,
                            local_rank(host_, r.src_local), why));
  }
  if (r.phase == kHierPhaseLocalRs) {
    if (r.set.empty()) return fail(fmt::format("{}: empty contribution set", what));
    SKIPRING_RETURN_IF_ERROR(advance_fold(r.seg, now, out));
  } else if (!r.set.full()) {
    return fail(fmt::format("{} block {} segment {} from rank {}: incomplete contribution set {}",
                            what, r.block, r.seg, local_rank(host_, r.src_local),
                            r.set.to_string()));
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status HierAllreduce::on_send(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (ring_.owns(t)) {
    if (!ring_.started() || ring_done_) return fail("completion for an unknown ring send");
    ActionList ring_out;
    const Status st = ring_.on_send(t, now, &ring_out);
    return forward_ring(st, ring_out, now, out);
  }
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokSend || idx >= sends_.size() || sends_[idx].done) {
    return fail("completion for an unknown send");
  }
  SendOp& s = sends_[idx];
  s.done = true;
  --pending_;
  StepRecord& rec = (s.phase1 ? local_rs_steps_ : local_ag_steps_)[s.record];
  rec.transfer_s += now - s.t_posted;
  rec.segments += s.phase1 ? 1 : 0;
  rec.t_end = std::max(rec.t_end, now);
  if (s.phase1 && in_place_) {
    // The segment of recvbuf this send read may now receive the final block.
    const int id = layout_.first_segment(s.block) + s.seg;
    if (--p1_sends_left_[id] == 0 && ag_recv_of_[id] != SIZE_MAX) {
      post_recv(ag_recv_of_[id], now, out);
    }
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status HierAllreduce::on_reduce(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (ring_.owns(t)) {
    if (!ring_.started() || ring_done_) return fail("completion for an unknown ring reduction");
    ActionList ring_out;
    const Status st = ring_.on_reduce(t, now, &ring_out);
    return forward_ring(st, ring_out, now, out);
  }
  const size_t g = token_index(t);
  if (token_kind(t) != kTokReduce || g >= folds_.size() || !folds_[g].reducing) {
    return fail("completion for an unknown reduction");
  }
  Fold& f = folds_[g];
  f.reducing = false;
  --pending_;
  const int s = f.next++;
  // Accounted to the local peer whose piece was folded (ours: the previous one's).
  const int src = s != local_ ? s : s - 1;
  if (rs_record_of_local_[src] >= 0)
    local_rs_steps_[rs_record_of_local_[src]].reduce_s += now - f.t_reduce;
  if (f.next == m_) {
    SKIPRING_RETURN_IF_ERROR(segment_reduced(static_cast<int>(g), now, out));
  } else {
    SKIPRING_RETURN_IF_ERROR(advance_fold(static_cast<int>(g), now, out));
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status HierAllreduce::on_time(double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (!ring_.started() || ring_done_) return Status::kOk;
  ActionList ring_out;
  const Status st = ring_.on_time(now, &ring_out);
  return forward_ring(st, ring_out, now, out);
}

double HierAllreduce::next_deadline() const {
  if (ring_.started() && !ring_done_ && !failed_) return ring_.next_deadline();
  return std::numeric_limits<double>::infinity();
}

void HierAllreduce::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || pending_ != 0) return;
  if (!block_reduced_) return;
  if (owner_ && hosts_ > 1 && layout_.segments(local_) > 0 && !ring_done_) return;
  for (const RecvOp& r : recvs_) {
    if (!r.arrived) return;
  }
  stats_.steps = local_rs_steps_;
  if (ring_.started()) {
    const CollectiveStats& rs = ring_.core().stats();
    for (StepRecord r : rs.steps) {
      if (r.from >= 0) r.from = local_rank(r.from, local_);
      if (r.to >= 0) r.to = local_rank(r.to, local_);
      if (r.phase == Phase::kReduceScatter) ++r.step;
      stats_.steps.push_back(r);
    }
    stats_.messages_sent += rs.messages_sent;
    stats_.messages_received += rs.messages_received;
    stats_.skips += rs.skips;
    stats_.late_pieces += rs.late_pieces;
    stats_.bypass_requests += rs.bypass_requests;
    stats_.rs_piece_wait_max = rs.rs_piece_wait_max;
    stats_.pred_behind = rs.pred_behind;
  }
  stats_.steps.insert(stats_.steps.end(), local_ag_steps_.begin(), local_ag_steps_.end());
  complete(now, out);
}

std::string HierAllreduce::describe() const {
  int waiting = 0;
  for (const RecvOp& r : recvs_) waiting += r.arrived ? 0 : 1;
  std::string s = fmt::format(
      "hier rank {} host {} local {}/{} blocks {}: pending {}, receives waiting {}, segments "
      "reduced {}/{}, ring {}",
      p_.rank, host_, local_, m_, blocks_, pending_, waiting, segs_reduced_,
      owner_ ? layout_.segments(local_) : 0,
      ring_done_        ? "done"
      : ring_.started() ? "running"
                        : "not started");
  if (ring_.started() && !ring_done_) s += "\n    ring: " + ring_.core().describe();
  return s;
}

std::string HierAllreduce::describe_wait(double now) const {
  std::string s = fmt::format("hierarchical all-reduce #{} (host {}, local index {} of {})", p_.seq,
                              host_, local_, m_);
  std::vector<int> from;
  int waiting = 0;
  for (const RecvOp& r : recvs_) {
    if (r.arrived) continue;
    ++waiting;
    const int rank = local_rank(host_, r.src_local);
    if (std::find(from.begin(), from.end(), rank) == from.end()) from.push_back(rank);
  }
  std::string parts;
  if (waiting > 0) {
    std::sort(from.begin(), from.end());
    std::string ranks;
    for (const int r : from) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    parts = fmt::format("{} local piece(s) not arrived, from rank(s) {}", waiting, ranks);
  }
  if (ring_.started() && !ring_done_) {
    parts += (parts.empty() ? "" : "; ") + std::string("inter-host ring: ") +
             ring_.core().describe_wait(now);
  }
  if (parts.empty()) parts = fmt::format("{} operation(s) pending", pending_);
  return s + ": " + parts;
}

// ---------------------------------------------------------------------------------------
double hier_cost(double bytes, const std::vector<int>& ranks_per_host, const HierCostParams& c) {
  const int hosts = static_cast<int>(ranks_per_host.size());
  if (hosts == 0 || bytes <= 0) return 0;
  int b = ranks_per_host[0], big = ranks_per_host[0], n = 0;
  for (int m : ranks_per_host) {
    b = std::min(b, m);
    big = std::max(big, m);
    n += m;
  }
  if (n <= 1 || b < 1) return 0;
  const double block = bytes / b;
  double t = 0;
  if (big > 1) {
    // Local phases (reduce-scatter, allgather mirrored): an owner of the largest host receives
    // big - 1 blocks (sends as many in the allgather); a rank that owns nothing sends all b.
    const double owner_bytes = (big - 1) * block;
    const double bytes_local = std::max(owner_bytes, big > b ? bytes : (b - 1) * block);
    const double msgs = std::max(big - 1, big > b ? b : b - 1);
    // The owner folds each segment while the next arrives: the fold overlaps phase 1.
    t += 2 * msgs * c.alpha_intra + bytes_local * c.beta_intra +
         std::max(bytes_local * c.beta_intra, owner_bytes * c.gamma);
  }
  if (hosts > 1) {
    // b concurrent rings of `hosts` ranks on a block each; a host's link carries all b of them.
    t += 2 * (hosts - 1) * c.alpha_inter;
    t += 2.0 * (hosts - 1) / hosts * bytes * c.beta_inter;
    t += static_cast<double>(hosts - 1) / hosts * block * c.gamma;
  }
  return t;
}

}  // namespace skipring
