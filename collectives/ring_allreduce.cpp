// Ring all-reduce state machine (see ring_allreduce.h for the protocol).
#include "collectives/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace skipring {
namespace {

enum TokenKind : uint32_t { kTokRecv = 0, kTokSend = 1, kTokReduce = 2 };
constexpr uint32_t kTokShift = 29;
constexpr uint32_t kTokMask = (1u << kTokShift) - 1;
constexpr int kTagSpan = 1 << 28;

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
Status RingAllreduce::validate(const RingParams& p, std::string* why) {
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
  if (p.depth < 1) return *why = "pipeline depth < 1", Status::kErrArg;
  if (p.segment_bytes < dtype_size(p.dtype)) return *why = "segment too small", Status::kErrArg;
  return Status::kOk;
}

RingAllreduce::RingAllreduce(const RingParams& p, std::vector<uint8_t>* scratch)
    : p_(p),
      layout_(static_cast<int>(p.ring.size()), p.count, dtype_size(p.dtype), p.segment_bytes),
      n_(static_cast<int>(p.ring.size())),
      scratch_(scratch) {
  pos_ = pos_of(p_.rank);
  pred_ = p_.ring[(pos_ - 1 + n_) % n_];
  succ_ = p_.ring[(pos_ + 1) % n_];
  hdr_bytes_ = wire_header_bytes(n_);
  in_place_ = p_.sendbuf == p_.recvbuf;
  scratch_set_ = ContributionSet(n_);
  stats_.seq = p_.seq;
  stats_.bytes = p_.count * layout_.elem_size();
}

int RingAllreduce::pos_of(int rank) const {
  for (int i = 0; i < n_; ++i) {
    if (p_.ring[i] == rank) return i;
  }
  return -1;
}

int RingAllreduce::tag_for(Phase phase, int seg_id) const {
  return (2 * seg_id + static_cast<int>(phase)) % kTagSpan;
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

void RingAllreduce::write_header(uint8_t* hdr, Phase phase, int chunk, int seg,
                                 const ContributionSet& set) {
  encode_wire_header(hdr, WireExpect{p_.seq, static_cast<uint8_t>(phase),
                                     static_cast<uint32_t>(chunk), static_cast<uint32_t>(seg)},
                     set);
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

Status RingAllreduce::start(double now, ActionList* out) {
  stats_.start = now;
  wait_clock_ = now;
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

  // The expected receive sequence, segment-major: segment g of every step before segment g+1
  // of any step. The receive window then always holds pieces of every step in flight, which is
  // what makes the bounded window deadlock-free under rendezvous sends (a piece only ever
  // waits for pieces earlier in this order, on this rank or its neighbours) and pipelines the
  // steps. Reduce-scatter pieces come before allgather pieces.
  const int start_chunk = (pos_ - 1 + n_) % n_;
  size_t ag_recvs = 0;
  int max_segs = 0;
  for (int c = 0; c < n_; ++c) max_segs = std::max(max_segs, layout_.segments(c));
  for (int g = 0; g < max_segs; ++g) {
    for (int s = 0; s < n_ - 1; ++s) {
      const int c = (pos_ - 2 - s + 2 * n_) % n_;
      if (g < layout_.segments(c)) {
        recvs_.push_back(RecvOp{Phase::kReduceScatter, s, c, g, layout_.first_segment(c) + g});
      }
    }
  }
  for (int g = 0; g < max_segs; ++g) {
    for (int s = 0; s < n_ - 1; ++s) {
      const int c = (pos_ - 1 - s + 2 * n_) % n_;
      if (g < layout_.segments(c)) {
        recvs_.push_back(RecvOp{Phase::kAllgather, s, c, g, layout_.first_segment(c) + g});
        ++ag_recvs;
      }
    }
  }

  // Scratch: receive slots, send slots (header + payload, payload 64-byte aligned), then
  // header-only buffers for the starter's sends, the owner's allgather sends and every
  // allgather receive.
  const size_t hdr_area = round_up(hdr_bytes_, 64);
  hdr_area_ = hdr_area;
  const size_t max_seg = std::min(layout_.segment_elems(), layout_.chunk_count(0));
  slot_bytes_ = hdr_area + round_up(max_seg * layout_.elem_size(), 64);
  const int depth = p_.depth;
  const size_t n_hdrs = layout_.segments(start_chunk) + layout_.segments(pos_) + ag_recvs;
  const size_t need = 64 + 2 * depth * slot_bytes_ + n_hdrs * hdr_area;
  if (scratch_->size() < need) scratch_->resize(need);
  uint8_t* base = scratch_->data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  recv_slots_ = base;
  send_slots_ = base + depth * slot_bytes_;
  hdr_pool_ = base + 2 * depth * slot_bytes_;
  for (int i = depth - 1; i >= 0; --i) {
    free_recv_slots_.push_back(i);
    free_send_slots_.push_back(i);
  }
  size_t hdr_next = 0;
  auto take_hdr = [&]() { return hdr_pool_ + (hdr_next++) * hdr_area; };
  local_done_.assign(layout_.total_segments(), 0);

  // Reduce-scatter, step 0: our own input for chunk pos-1 goes straight to the successor.
  ContributionSet mine(n_);
  mine.add(p_.rank);
  for (int g = 0; g < layout_.segments(start_chunk); ++g) {
    uint8_t* hdr = take_hdr();
    write_header(hdr, Phase::kReduceScatter, start_chunk, g, mine);
    post_send(Phase::kReduceScatter, 0, start_chunk, g, hdr, input_ptr(start_chunk, g), -1, now,
              out);
  }
  owner_hdrs_ = hdr_pool_ + hdr_next * hdr_area;
  hdr_next += layout_.segments(pos_);
  for (auto& r : recvs_) {
    if (r.phase == Phase::kAllgather) r.header = take_hdr();
  }
  post_receives(now, out);
  maybe_done(now, out);
  return Status::kOk;
}

void RingAllreduce::post_send(Phase phase, int record, int c, int g, uint8_t* hdr,
                              const void* payload, int slot, double now, ActionList* out) {
  SendOp s{phase, record, layout_.first_segment(c) + g, slot, false, now};
  sends_.push_back(s);
  Action a;
  a.kind = Action::Kind::kSend;
  a.token = make_token(kTokSend, sends_.size() - 1);
  a.peer = succ_;
  a.tag = tag_for(phase, s.seg_id);
  a.header = hdr;
  a.header_bytes = hdr_bytes_;
  a.payload = const_cast<void*>(payload);
  a.payload_bytes = layout_.segment_count(c, g) * layout_.elem_size();
  out->push_back(a);
  ++pending_;
  ++stats_.messages_sent;
}

void RingAllreduce::post_receives(double now, ActionList* out) {
  (void)now;
  while (next_post_ < recvs_.size()) {
    RecvOp& r = recvs_[next_post_];
    Action a;
    a.kind = Action::Kind::kRecv;
    a.token = make_token(kTokRecv, next_post_);
    a.peer = pred_;
    a.tag = tag_for(r.phase, r.seg_id);
    a.header_bytes = hdr_bytes_;
    a.payload_bytes = layout_.segment_count(r.chunk, r.seg) * layout_.elem_size();
    if (r.phase == Phase::kReduceScatter) {
      if (free_recv_slots_.empty()) break;
      r.slot = free_recv_slots_.back();
      free_recv_slots_.pop_back();
      uint8_t* slot = recv_slots_ + r.slot * slot_bytes_;
      a.header = slot + hdr_area_ - hdr_bytes_;
      a.payload = slot + hdr_area_;
    } else {
      // Allgather lands in the user's buffer: only once our reduce-scatter work on that
      // segment no longer reads it (in place) and within the pipeline depth.
      if (ag_posted_ >= p_.depth || !local_done_[r.seg_id]) break;
      ++ag_posted_;
      a.header = r.header;
      a.payload = seg_ptr(p_.recvbuf, r.chunk, r.seg);
    }
    r.state = OpState::kPosted;
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

Status RingAllreduce::on_recv(Token t, size_t payload_bytes, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokRecv || idx >= recvs_.size() || recvs_[idx].state != OpState::kPosted) {
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
  --pending_;
  ++stats_.messages_received;
  StepRecord& rec = stats_.steps[(r.phase == Phase::kAllgather ? n_ - 1 : 0) + r.step];
  if (rec.segments++ == 0) rec.first_arrival = now;
  rec.last_arrival = now;
  advance_wait_cursor();

  if (r.phase == Phase::kReduceScatter) {
    const uint8_t* hdr = recv_slots_ + r.slot * slot_bytes_ + hdr_area_ - hdr_bytes_;
    SKIPRING_CHECK(check_header(hdr, r.phase, r.chunk, r.seg, &scratch_set_));
    if (scratch_set_.empty() || scratch_set_.contains(p_.rank)) {
      return fail(fmt::format("chunk {} segment {}: contribution set {} overlaps own rank {}",
                              r.chunk, r.seg, scratch_set_.to_string(), p_.rank));
    }
    if (r.chunk == pos_ && scratch_set_.count() != n_ - 1) {
      return fail(fmt::format("owner of chunk {} would complete with set {} + own rank", r.chunk,
                              scratch_set_.to_string()));
    }
    reduce_queue_.push_back(idx);
    SKIPRING_CHECK(start_reduces(now, out));
  } else {
    SKIPRING_CHECK(check_header(r.header, r.phase, r.chunk, r.seg, &scratch_set_));
    if (!scratch_set_.full()) {
      return fail(fmt::format("allgather of chunk {} carries incomplete set {}", r.chunk,
                              scratch_set_.to_string()));
    }
    --ag_posted_;
    r.state = OpState::kFinished;
    if ((pos_ + 1) % n_ != r.chunk) {
      post_send(Phase::kAllgather, n_ - 1 + r.step, r.chunk, r.seg, r.header,
                seg_ptr(p_.recvbuf, r.chunk, r.seg), -1, now, out);
    }
    post_receives(now, out);
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status RingAllreduce::start_reduces(double now, ActionList* out) {
  while (reduce_queue_head_ < reduce_queue_.size()) {
    RecvOp& r = recvs_[reduce_queue_[reduce_queue_head_]];
    const bool owner = r.chunk == pos_;
    const uint8_t* in_slot = recv_slots_ + r.slot * slot_bytes_;
    Action a;
    a.kind = Action::Kind::kReduce;
    a.token = make_token(kTokReduce, reduce_queue_[reduce_queue_head_]);
    a.a = input_ptr(r.chunk, r.seg);
    a.b = in_slot + hdr_area_;
    a.count = layout_.segment_count(r.chunk, r.seg);
    a.dtype = p_.dtype;
    a.op = p_.op;
    if (owner) {
      a.dst = seg_ptr(p_.recvbuf, r.chunk, r.seg);
    } else {
      if (free_send_slots_.empty()) break;
      r.out_slot = free_send_slots_.back();
      free_send_slots_.pop_back();
      uint8_t* out_slot = send_slots_ + r.out_slot * slot_bytes_;
      // The outgoing partial sums what came in plus our input.
      SKIPRING_CHECK(check_header(in_slot + hdr_area_ - hdr_bytes_, r.phase, r.chunk, r.seg,
                                  &scratch_set_));
      scratch_set_.add(p_.rank);
      write_header(out_slot + hdr_area_ - hdr_bytes_, Phase::kReduceScatter, r.chunk, r.seg,
                   scratch_set_);
      a.dst = out_slot + hdr_area_;
    }
    r.state = OpState::kReducing;
    r.t_reduce = now;
    ++pending_;
    ++reduce_queue_head_;
    out->push_back(a);
  }
  return Status::kOk;
}

Status RingAllreduce::on_reduce(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokReduce || idx >= recvs_.size() ||
      recvs_[idx].state != OpState::kReducing) {
    return fail("completion for an unknown reduction");
  }
  RecvOp& r = recvs_[idx];
  r.state = OpState::kFinished;
  --pending_;
  stats_.steps[r.step].reduce_s += now - r.t_reduce;
  local_done_[r.seg_id] = 1;
  free_recv_slots_.push_back(r.slot);
  uint8_t* hdr_for_next;
  if (r.chunk == pos_) {
    // Chunk complete: its allgather starts now.
    hdr_for_next = owner_hdrs_ + r.seg * hdr_area_;
    scratch_set_ = ContributionSet(n_);
    for (int i = 0; i < n_; ++i) scratch_set_.add(i);
    write_header(hdr_for_next, Phase::kAllgather, r.chunk, r.seg, scratch_set_);
    post_send(Phase::kAllgather, r.step, r.chunk, r.seg, hdr_for_next,
              seg_ptr(p_.recvbuf, r.chunk, r.seg), -1, now, out);
  } else {
    uint8_t* slot = send_slots_ + r.out_slot * slot_bytes_;
    post_send(Phase::kReduceScatter, r.step, r.chunk, r.seg, slot + hdr_area_ - hdr_bytes_,
              slot + hdr_area_, r.out_slot, now, out);
  }
  post_receives(now, out);
  maybe_done(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_send(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokSend || idx >= sends_.size() || sends_[idx].done) {
    return fail("completion for an unknown send");
  }
  SendOp& s = sends_[idx];
  s.done = true;
  --pending_;
  stats_.steps[s.step].transfer_s += now - s.t_posted;
  if (s.slot >= 0) {
    free_send_slots_.push_back(s.slot);
    SKIPRING_CHECK(start_reduces(now, out));
  } else if (s.phase == Phase::kReduceScatter) {
    // The starter's send read our input directly: only now may allgather overwrite it.
    local_done_[s.seg_id] = 1;
    post_receives(now, out);
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_time(double now, ActionList* out) {
  (void)now;
  (void)out;
  return failed_ ? Status::kErrProtocol : Status::kOk;
}

void RingAllreduce::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || pending_ != 0 || next_post_ != recvs_.size() ||
      reduce_queue_head_ != reduce_queue_.size()) {
    return;
  }
  done_ = true;
  stats_.end = now;
  stats_.summarise();
  Action a;
  a.kind = Action::Kind::kDone;
  out->push_back(a);
}

}  // namespace skipring
