// Schedule-driven collectives: the ScheduleCore engine and the ring / chain cores (see
// ring_collectives.h).
#include "collectives/ring_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "collectives/wire_header.h"
#include "common/align.h"

namespace skipring {
namespace {

// A message's tag: its phase and, in the low 6 bits, its round (Rabenseifner's rounds), or for
// the segmented ring and chain schedules (round 0) its index among the messages of its channel
// (kind, peer, phase) in schedule order, modulo 64. Consecutive messages of a stream thus go on
// different tags: SimGrid's SMPI (smpi/async-small-thresh, which the simulations set to 64 KiB
// as real MPI's eager limit) delivers a message under the threshold through another mailbox
// than a larger one, so a block's short last segment could overtake whole segments sent before
// it on one tag (MPI's non-overtaking rule broken: the late path's healthy reduce-scatter failed
// with "37448 payload bytes, expected 262144" at n = 8, 16 MiB; the harness reproduces it with
// Options::small_overtakes_bytes, LateChain.SmallMessagesOvertakeLarge). Both ends number a
// channel's messages alike (they are matched in that order anyway), and a receive can then only
// match a message 2^bits messages apart from its own. A schedule may post every receive of a
// channel at once (the reduce-scatter does), and SMPI files a receive by its own size: a small
// message takes the earliest posted larger receive of its tag, so tags must not repeat within
// a channel at all ("17472 payload bytes, expected 262144" at n = 16, 64 MiB: 238 messages per
// channel with 64 tags; LateChain.SmpiMailboxesManySegments). `bits` is therefore as wide as
// the tag space allows (low_tag_bits): 20 bits from 2^25 tags (Open MPI's ob1 and SMPI give
// far more), 6 with the 1024 tags the schedules need at least.
int tag_for(uint8_t phase, int low, int bits) {
  return (static_cast<int>(phase) << bits) | (low & ((1 << bits) - 1));
}

// Phases stay below 11 (validate_tags): phase << bits below tag_span / 2 for bits =
// log2(tag_span) - 5, at least 6 and at most 20.
int low_tag_bits(int tag_span) {
  int log2 = 0;
  while (log2 < 30 && (2 << log2) <= tag_span) ++log2;
  return std::clamp(log2 - 5, 6, 20);
}

bool segmented_phase(uint8_t phase) {
  return phase == kRsPhase || phase == kAgPhase || phase == kBcastPhase || phase == kReducePhase;
}

// Tags are phase << bits | low (tag_for), below 11 << bits <= tag_span / 2.
Status validate_tags(const RingParams& p, std::string* why) {
  if (p.tag_span < 1024) return *why = "tag space too small", Status::kErrArg;
  return Status::kOk;
}

// Ring and buffers, without the op (allgather and broadcast do not reduce).
Status validate_layout(const RingParams& p, bool needs_op, std::string* why) {
  SKIPRING_RETURN_IF_ERROR(validate_tags(p, why));
  if (needs_op) return validate_common(p, why);
  RingParams q = p;
  q.op = ROp::kMax;
  q.dtype = DType::kInt32;
  return validate_common(q, why);
}

Status validate_blocks(const RingParams& p, const CollParams& c, std::string* why) {
  const size_t n = p.ring.size();
  if (c.block_counts.empty()) return Status::kOk;
  if (c.block_counts.size() != n) return *why = "block_counts: one per rank", Status::kErrArg;
  size_t sum = 0;
  for (size_t b : c.block_counts) sum += b;
  if (sum != p.count) return *why = "block_counts do not sum to count", Status::kErrCount;
  return Status::kOk;
}

Status validate_root(const RingParams& p, const CollParams& c, std::string* why) {
  if (c.root < 0 || c.root >= static_cast<int>(p.ring.size())) {
    return *why = "root outside the communicator", Status::kErrArg;
  }
  return Status::kOk;
}

size_t seg_elems_of(const RingParams& p) {
  return std::max<size_t>(1, p.segment_bytes / dtype_size(p.dtype));
}

// Segments of a range of `elems` elements cut in pieces of seg: at least one (an empty
// message still carries the contribution set).
size_t nsegs(size_t elems, size_t seg) { return elems == 0 ? 1 : (elems + seg - 1) / seg; }

}  // namespace

std::vector<size_t> block_offsets(const std::vector<size_t>& block_counts, size_t count, int n) {
  std::vector<size_t> off(static_cast<size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r) {
    size_t b;
    if (!block_counts.empty()) {
      b = block_counts[r];
    } else {
      b = count / n + (static_cast<size_t>(r) < count % n ? 1 : 0);
    }
    off[r + 1] = off[r] + b;
  }
  return off;
}

// ---------------------------------------------------------------------------------------
// ScheduleCore

ScheduleCore::ScheduleCore(const RingParams& p, std::vector<uint8_t>* scratch)
    : CoreBase(p.rank, p.seq), p_(p), n_(static_cast<int>(p.ring.size())), scratch_(scratch) {
  pos_ = static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), p_.rank) - p_.ring.begin());
  elem_ = dtype_size(p_.dtype);
  in_place_ = p_.sendbuf == p_.recvbuf;
  hdr_bytes_ = wire_header_bytes(n_);
  tag_bits_ = low_tag_bits(p_.tag_span);
  vars_.push_back(single(p_.rank));
  stats_.seq = p_.seq;
  stats_.bytes = p_.count * elem_;
}

ContributionSet ScheduleCore::full_set() const {
  ContributionSet s(n_);
  for (int r = 0; r < n_; ++r) s.add(r);
  return s;
}

ContributionSet ScheduleCore::single(int rank) const {
  ContributionSet s(n_);
  s.add(rank);
  return s;
}

int ScheduleCore::new_var() {
  vars_.emplace_back(n_);
  return static_cast<int>(vars_.size()) - 1;
}

int ScheduleCore::new_var(const ContributionSet& init) {
  vars_.push_back(init);
  return static_cast<int>(vars_.size()) - 1;
}

int ScheduleCore::add_step(Phase phase, int step, int chunk, int from_pos, int to_pos) {
  StepRecord r;
  r.phase = phase;
  r.step = step;
  r.chunk = chunk;
  r.from = from_pos >= 0 ? p_.ring[from_pos] : -1;
  r.to = to_pos >= 0 ? p_.ring[to_pos] : -1;
  stats_.steps.push_back(r);
  return static_cast<int>(stats_.steps.size()) - 1;
}

int ScheduleCore::add_op(Op op, const Deps& deps) {
  const int id = static_cast<int>(ops_.size());
  for (int d : deps) {
    if (d < 0) continue;
    ops_[d].dependents.push_back(id);
    ++op.unmet;
  }
  if (op.kind == Kind::kSend || op.kind == Kind::kRecv) {
    // Same-channel messages are posted in schedule order (non-overtaking matches them).
    const uint64_t key = (static_cast<uint64_t>(op.kind == Kind::kSend) << 62) |
                         (static_cast<uint64_t>(op.peer) << 32) | static_cast<uint32_t>(op.tag);
    auto it = std::find_if(channels_.begin(), channels_.end(),
                           [&](const std::pair<uint64_t, int>& c) { return c.first == key; });
    if (it == channels_.end()) {
      channels_.push_back({key, id});
    } else {
      ops_[it->second].channel_next = id;
      it->second = id;
      ++op.unmet;
    }
  }
  ops_.push_back(std::move(op));
  return id;
}

int ScheduleCore::channel_index(bool send, int peer_pos, uint8_t phase) {
  const uint64_t key = (static_cast<uint64_t>(send) << 40) |
                       (static_cast<uint64_t>(static_cast<uint32_t>(peer_pos)) << 8) | phase;
  return channel_count_[key]++;
}

int ScheduleCore::add_send(int peer_pos, uint8_t phase, int round, uint32_t chunk, uint32_t segment,
                           const void* payload, size_t elems, int set_var, const Deps& deps,
                           int step) {
  Op op;
  op.kind = Kind::kSend;
  op.peer = p_.ring[peer_pos];
  op.tag = tag_for(phase, segmented_phase(phase) ? channel_index(true, peer_pos, phase) : round,
                   tag_bits_);
  op.phase = phase;
  op.chunk = chunk;
  op.segment = segment;
  op.a = payload;
  op.elems = elems;
  op.var_a = set_var;
  op.step = step;
  return add_op(std::move(op), deps);
}

int ScheduleCore::add_recv(int peer_pos, uint8_t phase, int round, uint32_t chunk, uint32_t segment,
                           void* payload, size_t elems, int out_var, const ContributionSet* expect,
                           const Deps& deps, int step) {
  Op op;
  op.kind = Kind::kRecv;
  op.peer = p_.ring[peer_pos];
  op.tag = tag_for(phase, segmented_phase(phase) ? channel_index(false, peer_pos, phase) : round,
                   tag_bits_);
  op.phase = phase;
  op.chunk = chunk;
  op.segment = segment;
  op.dst = payload;
  op.elems = elems;
  op.out_var = out_var;
  if (expect) {
    op.has_expect = true;
    op.expect = *expect;
  }
  op.step = step;
  return add_op(std::move(op), deps);
}

int ScheduleCore::add_reduce(void* dst, const void* a, const void* b, size_t elems, int var_a,
                             int var_b, int out_var, const ContributionSet* expect,
                             const Deps& deps, int step) {
  Op op;
  op.kind = Kind::kReduce;
  op.dst = dst;
  op.a = a;
  op.b = b;
  op.elems = elems;
  op.var_a = var_a;
  op.var_b = var_b;
  op.out_var = out_var;
  if (expect) {
    op.has_expect = true;
    op.expect = *expect;
  }
  op.step = step;
  return add_op(std::move(op), deps);
}

int ScheduleCore::add_copy(void* dst, const void* src, size_t elems, const Deps& deps) {
  Op op;
  op.kind = Kind::kCopy;
  op.dst = dst;
  op.a = src;
  op.elems = elems;
  return add_op(std::move(op), deps);
}

std::string ScheduleCore::what(const Op& op) const {
  return fmt::format("phase {} chunk {} segment {} from rank {}", op.phase, op.chunk, op.segment,
                     op.peer);
}

Status ScheduleCore::start(double now, ActionList* out) {
  if (started_) return fail("started twice");
  started_ = true;
  stats_.start = now;
  const size_t need = scratch_bytes();
  uint8_t* base = nullptr;
  if (need > 0) {
    if (scratch_->size() < need + 64) scratch_->resize(need + 64);
    base = scratch_->data();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  }
  SKIPRING_RETURN_IF_ERROR(build(base));
  channels_.clear();
  hdr_bytes_ = round_up(hdr_bytes_, 8);
  hdrs_.assign(ops_.size() * hdr_bytes_, 0);
  pending_ = static_cast<int>(ops_.size());
  for (int id = 0; id < static_cast<int>(ops_.size()); ++id) {
    if (ops_[id].unmet == 0) ready_.push_back(id);
  }
  SKIPRING_RETURN_IF_ERROR(run_ready(now, out));
  maybe_done(now, out);
  return Status::kOk;
}

Status ScheduleCore::run_ready(double now, ActionList* out) {
  // FIFO over the ready list keeps the schedule order among operations ready together.
  size_t i = 0;
  while (i < ready_.size()) {
    const int id = ready_[i++];
    SKIPRING_RETURN_IF_ERROR(issue(id, now, out));
  }
  ready_.clear();
  return Status::kOk;
}

Status ScheduleCore::issue(int id, double now, ActionList* out) {
  Op& op = ops_[id];
  op.issued = true;
  op.t_issue = now;
  if (op.channel_next >= 0 && --ops_[op.channel_next].unmet == 0) {
    ready_.push_back(op.channel_next);
  }
  const Token tok = static_cast<Token>(id);
  switch (op.kind) {
    case Kind::kSend: {
      encode_wire_header(header_of(id), WireExpect{p_.seq, op.phase, op.chunk, op.segment},
                         vars_[op.var_a]);
      out->push_back(message_action(Action::Kind::kSend, tok, op.peer, op.tag, header_of(id),
                                    hdr_bytes_, op.a, op.elems * elem_));
      ++stats_.messages_sent;
      return Status::kOk;
    }
    case Kind::kRecv: {
      out->push_back(message_action(Action::Kind::kRecv, tok, op.peer, op.tag, header_of(id),
                                    hdr_bytes_, op.dst, op.elems * elem_));
      return Status::kOk;
    }
    case Kind::kReduce: {
      const ContributionSet& sa = vars_[op.var_a];
      const ContributionSet& sb = vars_[op.var_b];
      if (sa.overlaps(sb)) {
        return fail(fmt::format("contribution set {} overlaps {}", sa.to_string(), sb.to_string()));
      }
      ContributionSet u = sa;
      u.merge(sb);
      if (op.has_expect && u != op.expect) {
        return fail(fmt::format("reduction would complete with set {}, expected {} (incomplete)",
                                u.to_string(), op.expect.to_string()));
      }
      vars_[op.out_var] = u;
      if (op.elems == 0) return finish(id, now, out);
      out->push_back(reduce_action(tok, op.dst, op.a, op.b, op.elems, p_.dtype, p_.op));
      return Status::kOk;
    }
    case Kind::kCopy: {
      if (op.elems > 0 && op.dst != op.a) {
        Action a = copy_action(op.dst, op.a, op.elems * elem_);
        a.token = tok;
        out->push_back(a);
      }
      return finish(id, now, out);
    }
  }
  return Status::kOk;
}

Status ScheduleCore::finish(int id, double now, ActionList* out) {
  (void)out;
  Op& op = ops_[id];
  op.finished = true;
  --pending_;
  if (op.step >= 0) {
    StepRecord& r = stats_.steps[op.step];
    if (op.kind == Kind::kSend) r.transfer_s += now - op.t_issue;
    if (op.kind == Kind::kReduce) r.reduce_s += now - op.t_issue;
  }
  for (int d : op.dependents) {
    if (--ops_[d].unmet == 0) ready_.push_back(d);
  }
  return Status::kOk;
}

Status ScheduleCore::on_recv(Token t, size_t payload_bytes, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t id = t;
  if (id >= ops_.size() || ops_[id].kind != Kind::kRecv || !ops_[id].issued || ops_[id].finished) {
    return fail("completion for an unknown receive");
  }
  Op& op = ops_[id];
  if (payload_bytes != op.elems * elem_) {
    return fail(fmt::format("{}: {} payload bytes, expected {}", what(op), payload_bytes,
                            op.elems * elem_));
  }
  ++stats_.messages_received;
  if (op.step >= 0) {
    StepRecord& r = stats_.steps[op.step];
    if (r.segments == 0) r.first_arrival = now;
    ++r.segments;
    r.last_arrival = now;
    r.wait_s += std::max(0.0, now - op.t_issue);
  }
  ContributionSet set(n_);
  const std::string why =
      decode_wire_header(header_of(static_cast<int>(id)), n_,
                         WireExpect{p_.seq, op.phase, op.chunk, op.segment}, &set);
  if (!why.empty()) return fail(fmt::format("{}: {}", what(op), why));
  if (set.empty()) return fail(fmt::format("{}: empty contribution set", what(op)));
  if (op.has_expect && set != op.expect) {
    return fail(fmt::format("{}: contribution set {}, expected {}", what(op), set.to_string(),
                            op.expect.to_string()));
  }
  vars_[op.out_var] = set;
  SKIPRING_RETURN_IF_ERROR(finish(static_cast<int>(id), now, out));
  SKIPRING_RETURN_IF_ERROR(run_ready(now, out));
  maybe_done(now, out);
  return Status::kOk;
}

Status ScheduleCore::on_send(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t id = t;
  if (id >= ops_.size() || ops_[id].kind != Kind::kSend || !ops_[id].issued || ops_[id].finished) {
    return fail("completion for an unknown send");
  }
  SKIPRING_RETURN_IF_ERROR(finish(static_cast<int>(id), now, out));
  SKIPRING_RETURN_IF_ERROR(run_ready(now, out));
  maybe_done(now, out);
  return Status::kOk;
}

Status ScheduleCore::on_reduce(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t id = t;
  if (id >= ops_.size() || ops_[id].kind != Kind::kReduce || !ops_[id].issued ||
      ops_[id].finished) {
    return fail("completion for an unknown reduction");
  }
  SKIPRING_RETURN_IF_ERROR(finish(static_cast<int>(id), now, out));
  SKIPRING_RETURN_IF_ERROR(run_ready(now, out));
  maybe_done(now, out);
  return Status::kOk;
}

void ScheduleCore::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || !started_ || pending_ != 0) return;
  complete(now, out);
}

std::string ScheduleCore::describe() const {
  std::string s = fmt::format("rank {} seq {}: {} of {} operations pending", p_.rank, p_.seq,
                              pending_, ops_.size());
  int shown = 0;
  for (const Op& op : ops_) {
    if (op.finished) continue;
    if (++shown > 4) break;
    const char* k = op.kind == Kind::kSend     ? "send"
                    : op.kind == Kind::kRecv   ? "recv"
                    : op.kind == Kind::kReduce ? "reduce"
                                               : "copy";
    s += fmt::format("; {} {} peer {} phase {} chunk {} seg {}", op.issued ? "posted" : "waiting",
                     k, op.peer, op.phase, op.chunk, op.segment);
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// Segmented schedules

SegmentedSchedule::SegmentedSchedule(const RingParams& p, const CollParams& c,
                                     std::vector<uint8_t>* scratch)
    : ScheduleCore(p, scratch), c_(c), seg_elems_(seg_elems_of(p_)) {}

Status SegmentedSchedule::validate_segmented(const RingParams& p, const CollParams& c, bool reduces,
                                             bool blocked, std::string* why) {
  SKIPRING_RETURN_IF_ERROR(validate_layout(p, reduces, why));
  SKIPRING_RETURN_IF_ERROR(blocked ? validate_blocks(p, c, why) : validate_root(p, c, why));
  if (p.segment_bytes < dtype_size(p.dtype)) return *why = "segment too small", Status::kErrArg;
  return Status::kOk;
}

// ---------------------------------------------------------------------------------------
// Ring reduce-scatter

Status RingReduceScatter::validate(const RingParams& p, const CollParams& c, std::string* why) {
  return validate_segmented(p, c, /*reduces=*/true, /*blocked=*/true, why);
}

RingReduceScatter::RingReduceScatter(const RingParams& p, const CollParams& c,
                                     std::vector<uint8_t>* scratch)
    : SegmentedSchedule(p, c, scratch) {
  off_ = block_offsets(c_.block_counts, p_.count, n_);
}

size_t RingReduceScatter::scratch_bytes() const {
  // One slot per received piece: every block but the one this rank starts (its predecessor's,
  // sent straight from the input at step 0).
  const int first = p_.ring[(pos_ - 1 + n_) % n_];
  return (p_.count - (off_[first + 1] - off_[first])) * elem_;
}

size_t RingReduceScatter::final_prefix_elems() {
  while (out_done_ < out_ops_.size() && op_finished(out_ops_[out_done_].first)) {
    out_done_elems_ += out_ops_[out_done_++].second;
  }
  return out_done_elems_;
}

Status RingReduceScatter::build(uint8_t* scratch) {
  const int own = p_.rank;
  uint8_t* out = c_.result ? static_cast<uint8_t*>(c_.result)
                           : static_cast<uint8_t*>(p_.recvbuf) + off_[own] * elem_;
  const auto* in = static_cast<const uint8_t*>(p_.sendbuf);
  const size_t own_elems = off_[own + 1] - off_[own];
  if (n_ == 1 || p_.count == 0) {
    if (n_ == 1)
      out_ops_.emplace_back(add_copy(out, in + off_[own] * elem_, own_elems, {}), own_elems);
    return Status::kOk;
  }
  const int pred = (pos_ - 1 + n_) % n_, succ = (pos_ + 1) % n_;
  const ContributionSet full = full_set();
  // The partial of each segment this rank forwards next: (op id that produced it, set var,
  // buffer). Step 0 forwards its own input of block ring[pos - 1].
  struct Piece {
    int op;
    int var;
    const uint8_t* data;
  };
  size_t slot = 0;
  std::vector<Piece> fwd;
  {
    const int b = p_.ring[(pos_ - 1 + n_) % n_];
    const size_t elems = off_[b + 1] - off_[b];
    const size_t k = nsegs(elems, seg_elems_);
    for (size_t g = 0; g < k; ++g) fwd.push_back({-1, 0, in + (off_[b] + g * seg_elems_) * elem_});
  }
  for (int s = 0; s < n_ - 1; ++s) {
    const int sb = p_.ring[((pos_ - s - 1) % n_ + n_) % n_];  // block sent
    const int rb = p_.ring[((pos_ - s - 2) % n_ + n_) % n_];  // block received
    const bool last = s == n_ - 2;
    const int step = add_step(Phase::kReduceScatter, s, rb, pred, succ);
    {
      const size_t elems = off_[sb + 1] - off_[sb];
      const size_t k = nsegs(elems, seg_elems_);
      for (size_t g = 0; g < k; ++g) {
        const size_t e = seg_len(elems, g);
        add_send(succ, kRsPhase, 0, static_cast<uint32_t>(sb), static_cast<uint32_t>(g),
                 fwd[g].data, e, fwd[g].var, {fwd[g].op}, step);
      }
    }
    const size_t elems = off_[rb + 1] - off_[rb];
    const size_t k = nsegs(elems, seg_elems_);
    std::vector<Piece> next;
    for (size_t g = 0; g < k; ++g) {
      const size_t e = seg_len(elems, g);
      uint8_t* buf = scratch + slot * elem_;
      slot += e;
      const int rv = new_var();
      const int r = add_recv(pred, kRsPhase, 0, static_cast<uint32_t>(rb), static_cast<uint32_t>(g),
                             buf, e, rv, nullptr, {}, step);
      const uint8_t* mine = in + (off_[rb] + g * seg_elems_) * elem_;
      uint8_t* dst = last ? out + g * seg_elems_ * elem_ : buf;
      const int ov = new_var();
      const int red = add_reduce(dst, buf, mine, e, rv, 0, ov, last ? &full : nullptr, {r}, step);
      if (last) out_ops_.emplace_back(red, e);
      next.push_back({red, ov, buf});
    }
    fwd = std::move(next);
  }
  return Status::kOk;
}

// ---------------------------------------------------------------------------------------
// Ring allgather

Status RingAllgather::validate(const RingParams& p, const CollParams& c, std::string* why) {
  return validate_segmented(p, c, /*reduces=*/false, /*blocked=*/true, why);
}

RingAllgather::RingAllgather(const RingParams& p, const CollParams& c,
                             std::vector<uint8_t>* scratch)
    : SegmentedSchedule(p, c, scratch) {
  off_ = block_offsets(c_.block_counts, p_.count, n_);
}

Status RingAllgather::build(uint8_t* scratch) {
  (void)scratch;
  auto* buf = static_cast<uint8_t*>(p_.recvbuf);
  const auto* in = static_cast<const uint8_t*>(p_.sendbuf);
  const int own = p_.rank;
  const size_t own_elems = off_[own + 1] - off_[own];
  if (p_.count == 0) return Status::kOk;
  add_copy(buf + off_[own] * elem_, in + off_[own] * elem_, own_elems, {});
  if (n_ == 1) return Status::kOk;
  const int pred = (pos_ - 1 + n_) % n_, succ = (pos_ + 1) % n_;
  std::vector<int> prev;  // receives of the previous step, per segment (-1: own block)
  for (int s = 0; s < n_ - 1; ++s) {
    const int sb = p_.ring[((pos_ - s) % n_ + n_) % n_];
    const int rb = p_.ring[((pos_ - s - 1) % n_ + n_) % n_];
    const int step = add_step(Phase::kAllgather, s, rb, pred, succ);
    {
      const size_t elems = off_[sb + 1] - off_[sb];
      const size_t k = nsegs(elems, seg_elems_);
      const int var = new_var(single(sb));
      for (size_t g = 0; g < k; ++g) {
        const size_t e = seg_len(elems, g);
        // Step 0 sends the own block from sendbuf (no copy to wait for).
        const uint8_t* src = (s == 0 ? in : buf) + (off_[sb] + g * seg_elems_) * elem_;
        add_send(succ, kAgPhase, 0, static_cast<uint32_t>(sb), static_cast<uint32_t>(g), src, e,
                 var, {s == 0 ? -1 : prev[g]}, step);
      }
    }
    const size_t elems = off_[rb + 1] - off_[rb];
    const size_t k = nsegs(elems, seg_elems_);
    const ContributionSet want = single(rb);
    prev.assign(k, -1);
    for (size_t g = 0; g < k; ++g) {
      const size_t e = seg_len(elems, g);
      prev[g] = add_recv(pred, kAgPhase, 0, static_cast<uint32_t>(rb), static_cast<uint32_t>(g),
                         buf + (off_[rb] + g * seg_elems_) * elem_, e, new_var(), &want, {}, step);
    }
  }
  return Status::kOk;
}

// ---------------------------------------------------------------------------------------
// Chain broadcast

Status ChainBroadcast::validate(const RingParams& p, const CollParams& c, std::string* why) {
  return validate_segmented(p, c, /*reduces=*/false, /*blocked=*/false, why);
}

ChainBroadcast::ChainBroadcast(const RingParams& p, const CollParams& c,
                               std::vector<uint8_t>* scratch)
    : SegmentedSchedule(p, c, scratch) {}

Status ChainBroadcast::build(uint8_t* scratch) {
  (void)scratch;
  if (p_.count == 0) return Status::kOk;
  auto* buf = static_cast<uint8_t*>(p_.recvbuf);
  const auto* in = static_cast<const uint8_t*>(p_.sendbuf);
  const int root_pos =
      static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), c_.root) - p_.ring.begin());
  const int j = (pos_ - root_pos + n_) % n_;  // place in the chain
  const int pred = (pos_ - 1 + n_) % n_, succ = (pos_ + 1) % n_;
  const size_t k = nsegs(p_.count, seg_elems_);
  const int step = j > 0 ? add_step(Phase::kAllgather, 0, 0, pred, j < n_ - 1 ? succ : -1)
                         : add_step(Phase::kAllgather, 0, -1, -1, n_ > 1 ? succ : -1);
  if (j == 0) add_copy(buf, in, p_.count, {});
  const ContributionSet want = single(c_.root);
  const int var = new_var(want);
  for (size_t g = 0; g < k; ++g) {
    const size_t e = std::min(seg_elems_, p_.count - g * seg_elems_);
    const size_t off = g * seg_elems_ * elem_;
    int r = -1;
    if (j > 0) {
      r = add_recv(pred, kBcastPhase, 0, 0, static_cast<uint32_t>(g), buf + off, e, new_var(),
                   &want, {}, step);
    }
    if (j < n_ - 1) {
      add_send(succ, kBcastPhase, 0, 0, static_cast<uint32_t>(g), (j == 0 ? in : buf) + off, e, var,
               {r}, step);
    }
  }
  return Status::kOk;
}

// ---------------------------------------------------------------------------------------
// Chain reduce

Status ChainReduce::validate(const RingParams& p, const CollParams& c, std::string* why) {
  return validate_segmented(p, c, /*reduces=*/true, /*blocked=*/false, why);
}

ChainReduce::ChainReduce(const RingParams& p, const CollParams& c, std::vector<uint8_t>* scratch)
    : SegmentedSchedule(p, c, scratch) {}

size_t ChainReduce::scratch_bytes() const {
  const int root_pos =
      static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), c_.root) - p_.ring.begin());
  const int j = (pos_ - root_pos + n_) % n_;
  return j == 1 || n_ == 1 ? 0 : p_.count * elem_;
}

Status ChainReduce::build(uint8_t* scratch) {
  if (p_.count == 0) return Status::kOk;
  const auto* in = static_cast<const uint8_t*>(p_.sendbuf);
  auto* out = static_cast<uint8_t*>(p_.recvbuf);
  if (n_ == 1) {
    add_copy(out, in, p_.count, {});
    return Status::kOk;
  }
  const int root_pos =
      static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), c_.root) - p_.ring.begin());
  // Chain places 1, 2, ..., n - 1 then the root (place 0).
  const int j = (pos_ - root_pos + n_) % n_;
  const int pred = (pos_ - 1 + n_) % n_, succ = (pos_ + 1) % n_;
  const size_t k = nsegs(p_.count, seg_elems_);
  const ContributionSet full = full_set();
  const int step = add_step(Phase::kReduceScatter, 0, 0, j == 1 ? -1 : pred, j == 0 ? -1 : succ);
  for (size_t g = 0; g < k; ++g) {
    const size_t e = std::min(seg_elems_, p_.count - g * seg_elems_);
    const size_t off = g * seg_elems_ * elem_;
    if (j == 1) {
      add_send(succ, kReducePhase, 0, 0, static_cast<uint32_t>(g), in + off, e, 0, {}, step);
      continue;
    }
    const int rv = new_var();
    const int r = add_recv(pred, kReducePhase, 0, 0, static_cast<uint32_t>(g), scratch + off, e, rv,
                           nullptr, {}, step);
    const int ov = new_var();
    const bool root = j == 0;
    const int red = add_reduce(root ? out + off : scratch + off, scratch + off, in + off, e, rv, 0,
                               ov, root ? &full : nullptr, {r}, step);
    if (!root) {
      add_send(succ, kReducePhase, 0, 0, static_cast<uint32_t>(g), scratch + off, e, ov, {red},
               step);
    }
  }
  return Status::kOk;
}

}  // namespace skipring
