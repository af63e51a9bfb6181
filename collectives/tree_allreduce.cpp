// Multi-spanning-tree all-reduce state machine (see tree_allreduce.h for the protocol).
#include "collectives/tree_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/wire_header.h"
#include "common/align.h"

namespace skipring {
namespace {

constexpr int kMaxTrees = 64;

}  // namespace

Status TreeAllreduce::validate(const RingParams& p, const MultiTreePlan& plan, std::string* why) {
  SKIPRING_RETURN_IF_ERROR(validate_common(p, why));
  if (p.depth < 1) return *why = "pipeline depth < 1", Status::kErrArg;
  if (p.tag_span < 1024) return *why = "tag space too small", Status::kErrArg;
  if (plan.trees.size() > static_cast<size_t>(kMaxTrees)) {
    return *why = fmt::format("more than {} trees", kMaxTrees), Status::kErrArg;
  }
  return validate_plan(plan, static_cast<int>(p.ring.size()), why);
}

std::vector<size_t> TreeAllreduce::split_counts(const MultiTreePlan& plan, size_t count) {
  const size_t k = plan.fractions.size();
  std::vector<size_t> counts(k, 0);
  double cum = 0;
  size_t prev = 0;
  for (size_t t = 0; t < k; ++t) {
    cum += plan.fractions[t];
    size_t end =
        t + 1 == k ? count : static_cast<size_t>(std::llround(cum * static_cast<double>(count)));
    end = std::min(count, std::max(prev, end));
    counts[t] = end - prev;
    prev = end;
  }
  return counts;
}

size_t TreeAllreduce::segment_elems(const RingParams& p, const std::vector<size_t>& tree_counts) {
  const size_t elem = dtype_size(p.dtype);
  size_t seg = std::max<size_t>(1, p.segment_bytes / elem);
  const size_t max_segments = static_cast<size_t>(std::max(1, (p.tag_span - 8) / 2));
  while (true) {
    size_t total = 0;
    for (size_t c : tree_counts) total += (c + seg - 1) / seg;
    if (total <= max_segments) return seg;
    seg *= 2;
  }
}

TreeAllreduce::TreeAllreduce(const RingParams& p, const MultiTreePlan& plan,
                             std::vector<uint8_t>* scratch)
    : CoreBase(p.rank, p.seq), p_(p), n_(static_cast<int>(p.ring.size())), scratch_(scratch) {
  elem_ = dtype_size(p_.dtype);
  in_place_ = p_.sendbuf == p_.recvbuf;
  hdr_bytes_ = wire_header_bytes(n_);
  full_set_ = ContributionSet(n_);
  for (int r = 0; r < n_; ++r) full_set_.add(r);
  const std::vector<size_t> counts = split_counts(plan, p_.count);
  seg_elems_ = segment_elems(p_, counts);
  size_t offset = 0;
  int gseg = 0;
  trees_.resize(plan.trees.size());
  for (size_t ti = 0; ti < plan.trees.size(); ++ti) {
    Tree& t = trees_[ti];
    t.parent = plan.trees[ti].parent[p_.rank];
    t.children = tree_children(plan.trees[ti], p_.rank);
    t.offset = offset;
    t.count = counts[ti];
    offset += t.count;
    t.nseg = static_cast<int>((t.count + seg_elems_ - 1) / seg_elems_);
    t.first_gseg = gseg;
    gseg += t.nseg;
    t.window = std::min(p_.depth, t.nseg);
    t.segs.resize(t.nseg);
    t.acc.assign(t.window, ContributionSet(n_));
    t.child_set.assign(static_cast<size_t>(t.window) * t.children.size(), ContributionSet(n_));
    t.child_arrived.assign(static_cast<size_t>(t.window) * t.children.size(), 0);
  }
  stats_.seq = p_.seq;
  stats_.bytes = p_.count * elem_;
}

size_t TreeAllreduce::seg_count(const Tree& t, int g) const {
  return std::min(seg_elems_, t.count - static_cast<size_t>(g) * seg_elems_);
}

uint8_t* TreeAllreduce::recv_at(const Tree& t, int g) const {
  return static_cast<uint8_t*>(p_.recvbuf) + seg_offset(t, g) * elem_;
}

const uint8_t* TreeAllreduce::send_at(const Tree& t, int g) const {
  return static_cast<const uint8_t*>(p_.sendbuf) + seg_offset(t, g) * elem_;
}

uint8_t* TreeAllreduce::child_slot(const Tree& t, int g, int i) const {
  const size_t w = static_cast<size_t>(g % t.window);
  return t.child_slots + (w * t.children.size() + i) * slot_bytes_;
}

Token TreeAllreduce::new_op(OpKind kind, int tree, int seg, int child, double now) {
  Token tok;
  if (!free_ops_.empty()) {
    tok = free_ops_.back();
    free_ops_.pop_back();
  } else {
    tok = static_cast<Token>(ops_.size());
    ops_.push_back({});
  }
  ops_[tok] = OpRef{kind, tree, seg, child, now, true};
  ++pending_;
  return tok;
}

void TreeAllreduce::push(Action::Kind kind, Token tok, int peer, int tag, void* hdr, void* payload,
                         size_t bytes, ActionList* out) {
  out->push_back(message_action(kind, tok, peer, tag, hdr, hdr_bytes_, payload, bytes));
  if (kind == Action::Kind::kSend) ++stats_.messages_sent;
}

Status TreeAllreduce::start(double now, ActionList* out) {
  stats_.start = now;
  if (p_.count == 0 || n_ == 1) {
    if (p_.count > 0 && !in_place_) {
      out->push_back(copy_action(p_.recvbuf, p_.sendbuf, p_.count * elem_));
    }
    maybe_done(now, out);
    return Status::kOk;
  }
  // Scratch per tree: window x children receive slots (header right-aligned before the
  // payload), then window up-send headers and window broadcast headers; 64-byte aligned.
  hdr_area_ = round_up(hdr_bytes_, 64);
  slot_bytes_ = hdr_area_ + round_up(seg_elems_ * elem_, 64);
  size_t need = 64;
  for (const Tree& t : trees_) {
    need += static_cast<size_t>(t.window) * (t.children.size() * slot_bytes_ + 2 * hdr_area_);
  }
  if (scratch_->size() < need) scratch_->resize(need);
  uint8_t* base = scratch_->data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  for (size_t ti = 0; ti < trees_.size(); ++ti) {
    Tree& t = trees_[ti];
    t.child_slots = base;
    base += static_cast<size_t>(t.window) * t.children.size() * slot_bytes_;
    t.up_hdrs = base;
    base += static_cast<size_t>(t.window) * hdr_area_;
    t.down_hdrs = base;
    base += static_cast<size_t>(t.window) * hdr_area_;
    if (t.nseg == 0) continue;
    auto add_step = [&](Phase ph, int from, int to) {
      StepRecord r;
      r.phase = ph;
      r.step = static_cast<int>(ti);
      r.chunk = static_cast<int>(ti);
      r.from = from;
      r.to = to;
      r.t_start = now;
      stats_.steps.push_back(r);
      return static_cast<int>(stats_.steps.size()) - 1;
    };
    t.rs_step = add_step(Phase::kReduceScatter, t.children.empty() ? -1 : t.children[0], t.parent);
    t.bc_step = add_step(Phase::kAllgather, t.parent, t.children.empty() ? -1 : t.children[0]);
  }
  for (size_t ti = 0; ti < trees_.size(); ++ti) {
    admit_reduce(static_cast<int>(ti), now, out);
    admit_bcast(static_cast<int>(ti), now, out);
  }
  maybe_done(now, out);
  return Status::kOk;
}

void TreeAllreduce::admit_reduce(int ti, double now, ActionList* out) {
  Tree& t = trees_[ti];
  const int nc = static_cast<int>(t.children.size());
  while (t.radmit < t.nseg && t.radmit < t.rlow + t.window) {
    const int g = t.radmit++;
    const int w = g % t.window;
    t.acc[w] = ContributionSet(n_);
    t.acc[w].add(p_.rank);
    const size_t bytes = seg_count(t, g) * elem_;
    for (int i = 0; i < nc; ++i) {
      t.child_arrived[w * nc + i] = 0;
      uint8_t* s = child_slot(t, g, i);
      const Token tok = new_op(OpKind::kUpRecv, ti, g, i, now);
      push(Action::Kind::kRecv, tok, t.children[i], tag_of(t, g, false), slot_header(s),
           slot_payload(s), bytes, out);
    }
    if (nc == 0) {
      t.segs[g].partial_ready = true;  // a leaf's partial is its input
      post_up_send(ti, g, now, out);
    }
  }
}

void TreeAllreduce::post_up_send(int ti, int g, double now, ActionList* out) {
  Tree& t = trees_[ti];
  Seg& s = t.segs[g];
  uint8_t* hdr = t.up_hdrs + static_cast<size_t>(g % t.window) * hdr_area_;
  encode_wire_header(
      hdr,
      WireExpect{p_.seq, kTreePhaseReduce, static_cast<uint32_t>(ti), static_cast<uint32_t>(g)},
      t.acc[g % t.window]);
  const void* payload = t.children.empty() ? static_cast<const void*>(send_at(t, g))
                                           : static_cast<const void*>(recv_at(t, g));
  s.up_posted = true;
  const Token tok = new_op(OpKind::kUpSend, ti, g, -1, now);
  push(Action::Kind::kSend, tok, t.parent, tag_of(t, g, false), hdr, const_cast<void*>(payload),
       seg_count(t, g) * elem_, out);
}

void TreeAllreduce::admit_bcast(int ti, double now, ActionList* out) {
  Tree& t = trees_[ti];
  const int end = std::min(t.nseg, t.blow + t.window);
  const bool root = t.parent < 0;
  for (int g = t.blow; g < end; ++g) {
    Seg& s = t.segs[g];
    if (s.down_posted) continue;
    uint8_t* hdr = t.down_hdrs + static_cast<size_t>(g % t.window) * hdr_area_;
    if (root) {
      if (!s.partial_ready) continue;
      encode_wire_header(
          hdr,
          WireExpect{p_.seq, kTreePhaseBcast, static_cast<uint32_t>(ti), static_cast<uint32_t>(g)},
          full_set_);
      s.down_posted = true;
      post_down_sends(ti, g, now, out);
    } else {
      // recvbuf's segment is free once our partial, sent from it, has gone (a leaf not in
      // place sends from sendbuf).
      const bool free = (t.children.empty() && !in_place_) || s.up_done;
      if (!free) continue;
      s.down_posted = true;
      const Token tok = new_op(OpKind::kDownRecv, ti, g, -1, now);
      push(Action::Kind::kRecv, tok, t.parent, tag_of(t, g, true), hdr, recv_at(t, g),
           seg_count(t, g) * elem_, out);
    }
  }
}

void TreeAllreduce::post_down_sends(int ti, int g, double now, ActionList* out) {
  Tree& t = trees_[ti];
  uint8_t* hdr = t.down_hdrs + static_cast<size_t>(g % t.window) * hdr_area_;
  for (int i = 0; i < static_cast<int>(t.children.size()); ++i) {
    const Token tok = new_op(OpKind::kDownSend, ti, g, i, now);
    push(Action::Kind::kSend, tok, t.children[i], tag_of(t, g, true), hdr, recv_at(t, g),
         seg_count(t, g) * elem_, out);
  }
}

Status TreeAllreduce::try_reduce(int ti, int g, double now, ActionList* out) {
  Tree& t = trees_[ti];
  Seg& s = t.segs[g];
  const int nc = static_cast<int>(t.children.size());
  if (s.reducing || s.partial_ready || s.next_child >= nc) return Status::kOk;
  const int w = g % t.window;
  const int i = s.next_child;
  if (!t.child_arrived[w * nc + i]) return Status::kOk;
  const ContributionSet& got = t.child_set[w * nc + i];
  if (got.overlaps(t.acc[w])) {
    return fail(fmt::format("tree {} segment {}: partial from rank {} has set {} overlapping {}",
                            ti, g, t.children[i], got.to_string(), t.acc[w].to_string()));
  }
  t.acc[w].merge(got);
  if (t.parent < 0 && i == nc - 1 && !t.acc[w].full()) {
    return fail(fmt::format("tree {} segment {}: root would complete with set {}", ti, g,
                            t.acc[w].to_string()));
  }
  s.reducing = true;
  const Token token = new_op(OpKind::kReduce, ti, g, i, now);
  const void* a =
      i == 0 ? static_cast<const void*>(send_at(t, g)) : static_cast<const void*>(recv_at(t, g));
  out->push_back(reduce_action(token, recv_at(t, g), a, slot_payload(child_slot(t, g, i)),
                               seg_count(t, g), p_.dtype, p_.op));
  return Status::kOk;
}

void TreeAllreduce::retire(int ti, double now, ActionList* out) {
  Tree& t = trees_[ti];
  const bool root = t.parent < 0;
  const int nc = static_cast<int>(t.children.size());
  bool moved = false;
  while (t.rlow < t.radmit && t.segs[t.rlow].partial_ready && (root || t.segs[t.rlow].up_done)) {
    ++t.rlow;
    moved = true;
  }
  if (moved) admit_reduce(ti, now, out);
  while (t.blow < t.nseg) {
    const Seg& s = t.segs[t.blow];
    const bool have = root ? s.down_posted : s.down_arrived;
    if (!have || s.down_sends_done < nc) break;
    ++t.blow;
  }
  admit_bcast(ti, now, out);
}

bool TreeAllreduce::take_op(Token tok, OpKind a, OpKind b, OpRef* op) {
  if (tok >= ops_.size() || !ops_[tok].live || (ops_[tok].kind != a && ops_[tok].kind != b)) {
    return false;
  }
  *op = ops_[tok];
  ops_[tok].live = false;
  free_ops_.push_back(tok);
  --pending_;
  return true;
}

Status TreeAllreduce::on_recv(Token tok, size_t payload_bytes, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  OpRef op;
  if (!take_op(tok, OpKind::kUpRecv, OpKind::kDownRecv, &op)) {
    return fail("completion for an unknown receive");
  }
  ++stats_.messages_received;
  Tree& t = trees_[op.tree];
  const int g = op.seg;
  const size_t want = seg_count(t, g) * elem_;
  const bool up = op.kind == OpKind::kUpRecv;
  if (payload_bytes != want) {
    return fail(fmt::format("tree {} segment {} {}: {} payload bytes, expected {}", op.tree, g,
                            up ? "partial" : "broadcast", payload_bytes, want));
  }
  StepRecord& rec = stats_.steps[up ? t.rs_step : t.bc_step];
  if (rec.segments == 0) rec.first_arrival = now;
  ++rec.segments;
  rec.last_arrival = now;
  rec.wait_s += now - op.t_posted;
  const WireExpect id{p_.seq, up ? kTreePhaseReduce : kTreePhaseBcast,
                      static_cast<uint32_t>(op.tree), static_cast<uint32_t>(g)};
  ContributionSet set;
  if (up) {
    const int nc = static_cast<int>(t.children.size());
    const int w = g % t.window;
    const std::string why =
        decode_wire_header(slot_header(child_slot(t, g, op.child)), n_, id, &set);
    if (!why.empty()) return fail(fmt::format("tree {} segment {} partial: {}", op.tree, g, why));
    if (set.empty()) return fail(fmt::format("tree {} segment {}: empty set", op.tree, g));
    t.child_set[w * nc + op.child] = set;
    t.child_arrived[w * nc + op.child] = 1;
    SKIPRING_RETURN_IF_ERROR(try_reduce(op.tree, g, now, out));
  } else {
    const uint8_t* hdr = t.down_hdrs + static_cast<size_t>(g % t.window) * hdr_area_;
    const std::string why = decode_wire_header(hdr, n_, id, &set);
    if (!why.empty()) return fail(fmt::format("tree {} segment {} broadcast: {}", op.tree, g, why));
    if (!set.full()) {
      return fail(fmt::format("tree {} segment {}: broadcast carries incomplete set {}", op.tree, g,
                              set.to_string()));
    }
    t.segs[g].down_arrived = true;
    post_down_sends(op.tree, g, now, out);
    retire(op.tree, now, out);
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status TreeAllreduce::on_send(Token tok, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  OpRef op;
  if (!take_op(tok, OpKind::kUpSend, OpKind::kDownSend, &op)) {
    return fail("completion for an unknown send");
  }
  Tree& t = trees_[op.tree];
  Seg& s = t.segs[op.seg];
  if (op.kind == OpKind::kUpSend) {
    s.up_done = true;
    stats_.steps[t.rs_step].transfer_s += now - op.t_posted;
  } else {
    ++s.down_sends_done;
    stats_.steps[t.bc_step].transfer_s += now - op.t_posted;
  }
  retire(op.tree, now, out);
  maybe_done(now, out);
  return Status::kOk;
}

Status TreeAllreduce::on_reduce(Token tok, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  OpRef op;
  if (!take_op(tok, OpKind::kReduce, OpKind::kReduce, &op)) {
    return fail("completion for an unknown reduction");
  }
  Tree& t = trees_[op.tree];
  Seg& s = t.segs[op.seg];
  stats_.steps[t.rs_step].reduce_s += now - op.t_posted;
  s.reducing = false;
  ++s.next_child;
  if (s.next_child == static_cast<int>(t.children.size())) {
    s.partial_ready = true;
    if (t.parent >= 0) post_up_send(op.tree, op.seg, now, out);
    retire(op.tree, now, out);
  } else {
    SKIPRING_RETURN_IF_ERROR(try_reduce(op.tree, op.seg, now, out));
  }
  maybe_done(now, out);
  return Status::kOk;
}

void TreeAllreduce::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || pending_ != 0) return;
  for (const Tree& t : trees_) {
    if (p_.count > 0 && n_ > 1 && (t.rlow < t.nseg || t.blow < t.nseg)) return;
  }
  for (StepRecord& r : stats_.steps) r.t_end = now;
  complete(now, out);
}

std::string TreeAllreduce::describe() const {
  std::string s =
      fmt::format("tree all-reduce rank {} seq {} pending {}:", p_.rank, p_.seq, pending_);
  for (size_t ti = 0; ti < trees_.size(); ++ti) {
    const Tree& t = trees_[ti];
    s += fmt::format(
        " [tree {} parent {} children {} segs {} reduce-retired {} admitted {} "
        "bcast-retired {}]",
        ti, t.parent, t.children.size(), t.nseg, t.rlow, t.radmit, t.blow);
  }
  return s;
}

}  // namespace skipring
