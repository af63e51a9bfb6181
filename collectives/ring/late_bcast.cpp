// Late broadcast (RingParams::late_bcast; docs/skip_ahead.md, "Late broadcast").
//
// Once a rank K bypasses its late successor L for a segment (its piece goes to the owner O
// around L, kRouteBcast), L's input for that segment no longer has to reach O before the
// allgather can start:
//  - O completes the segment without L once every other input is merged (the partial P),
//    allgathers P among the healthy ranks (routed around L) and sends it to L (kTagPartial);
//  - L, once it arrives, sends its input x down one of two binary trees over the healthy
//    ranks (alternating by segment, lb_tree; kTagBcast), and every rank computes P op x
//    itself: the same operands in the same order everywhere, so every rank gets the same bits.
// L's links then carry S each way after its arrival with no owner in the dependency chain.
// (A chain in ring order was tried first: each of its n - 2 hops adds to the tail, SimGrid
// n = 64: 12.9 ms after the arrival against 9.5 ms without the broadcast.)
//
// Why the late rank can send at once: K flags a bypass only when its piece holds every input
// from the chunk's start up to K (lb_path_complete), so at most one rank per segment is
// routed around in this mode, and O's partial lacks exactly L's input. L's input for the
// segment has gone nowhere (it was to go on the ring to its successor, which learns from a
// "bypassed" control with kRouteBcastPass that it comes down the trees instead), so O will go
// partial for L: L sends its input down the trees as soon as it reads K's bypass message, and
// the partial it receives from O meets it in the final reduction.
//
// One race: L skipped K's piece (its input went on, to its successor or to O) before K's
// bypass message came. L then waits for O's decision on kTagPartial: O either merged that
// input (its set became complete: a request, kRouteRequest, tells L so, and L gets the final in
// the allgather) or went partial first (L then sends its input down the trees with
// kRouteComing, and O drops the piece when it comes). Whether a piece is still coming is in
// the input's header, so O knows when its receive for it can go.
//
// Ranks may now be a collective apart while an owner still has a receive from any source
// posted (the late rank's piece that may still come): consecutive collectives use disjoint
// data tags (ring_data_tag).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

bool RingAllreduce::lb_on() const {
  return p_.late_bcast && p_.skip && mode_.side_channels && !mode_.direct;
}

bool RingAllreduce::lb_path_complete(int c, const ContributionSet& set) const {
  // Ring positions c + 1 .. pos_ (the chunk's reduce-scatter starts after its owner).
  const int len = (pos_ - c - 1 + 2 * n_) % n_ + 1;
  if (set.count() != len) return false;
  for (int i = 0; i < len; ++i) {
    if (!set.contains(p_.ring[(c + 1 + i) % n_])) return false;
  }
  return true;
}

void RingAllreduce::lb_tree(int late, int seg_id, int* from, int to[2], int* nto) const {
  // The m = n - 1 healthy ranks, indexed from the late rank's successor (i = 0) in ring order.
  // Tree 0 is the binary heap over i (root i = 0, children 2k + 1, 2k + 2); tree 1 the same
  // over m - 1 - i, so the inner ranks of one are leaves of the other and every rank's uplink
  // carries about one copy of the late rank's input in all. Depth log2(m) instead of a chain's
  // m - 1 hops, each of which adds a segment's time and the link's sharing to the tail.
  const int m = n_ - 1, t = seg_id & 1, pl = pos_of(late);
  auto rank_at = [&](int k) { return p_.ring[(pl + 1 + (t == 0 ? k : m - 1 - k)) % n_]; };
  *nto = 0;
  if (late == p_.rank) {
    *from = -1;
    to[(*nto)++] = rank_at(0);
    return;
  }
  const int i = (pos_ - pl - 1 + n_) % n_;
  const int k = t == 0 ? i : m - 1 - i;
  *from = k == 0 ? late : rank_at((k - 1) / 2);
  for (int c = 2 * k + 1; c <= 2 * k + 2 && c < m; ++c) to[(*nto)++] = rank_at(c);
}

int RingAllreduce::lb_new_entry(int c, int g) {
  LbEntry e;
  e.chunk = c;
  e.seg = g;
  e.seg_id = layout_.first_segment(c) + g;
  e.buf.reset(new uint8_t[slot_bytes_]);
  lb_.push_back(std::move(e));
  ++lb_open_;
  return static_cast<int>(lb_.size()) - 1;
}

void RingAllreduce::lb_post_recv(int e, int peer, int tag_kind, double now, ActionList* out) {
  LbEntry& E = lb_[e];
  E.t = now;
  out->push_back(message_action(Action::Kind::kRecv, make_token(kTokLbRecv, e), peer,
                                tag_for(tag_kind, E.seg_id), slot_hdr(E.buf.get(), 0), hdr_bytes_,
                                slot_payload(E.buf.get(), 0),
                                layout_.segment_count(E.chunk, E.seg) * layout_.elem_size()));
  ++pending_;
}

// ---- owner ----------------------------------------------------------------------------------

Status RingAllreduce::lb_owner_decide(int g, double now, ActionList* out) {
  OwnerPiece& o = owner_[g];
  if (o.named.empty() || o.decided) return Status::kOk;
  // One late rank per segment at most (lb_path_complete): two would each wait for a partial
  // lacking only its own input.
  if (o.named.size() > 1) {
    return fail(fmt::format("owner of chunk {} segment {}: ranks {} and {} both routed around",
                            pos_, g, o.named[0], o.named[1]));
  }
  const int late = o.named[0];
  if (o.acc.contains(late)) {
    // Its input came before it learnt the mode (the race): the segment completes as usual.
    lb_send_request(g, now, out);
  } else if (!o.merging && o.queue.empty() && o.acc.count() == n_ - 1) {
    lb_go_partial(g, late, now, out);
  }
  return Status::kOk;
}

void RingAllreduce::lb_send_request(int g, double now, ActionList* out) {
  OwnerPiece& o = owner_[g];
  o.decided = true;
  const size_t bytes = layout_.segment_count(pos_, g) * layout_.elem_size();
  if (!lb_zero_) lb_zero_.reset(new uint8_t[slot_bytes_]());
  const int aux = add_aux(AuxKind::kCtrlSend, pos_, g);
  aux_[aux].hdr.assign(hdr_bytes_, 0);
  write_header(aux_[aux].hdr.data(), Phase::kAllgather, pos_, g, o.acc, 0,
               kRouteRequest | static_cast<uint32_t>(o.named[0] + 1));
  post_aux_send(aux, o.named[0], tag_for(kTagPartial, layout_.first_segment(pos_) + g),
                lb_zero_.get(), bytes, now, out);
  ++stats_.messages_sent;
}

void RingAllreduce::lb_go_partial(int g, int late, double now, ActionList* out) {
  OwnerPiece& o = owner_[g];
  o.partial_for = late;
  o.decided = true;
  ++stats_.bcast_segments;
  const int e = lb_new_entry(pos_, g);
  LbEntry& E = lb_[e];
  E.late = late;
  lb_tree(late, E.seg_id, &E.from, E.to, &E.nto);
  E.send_needed = E.nto > 0;
  seg_[E.seg_id].lb = true;
  // The partial goes around the late rank (as a final segment would) and to it directly.
  uint8_t* hdr = owner_hdrs_ + static_cast<size_t>(g) * hdr_area_;
  write_header(hdr, Phase::kAllgather, pos_, g, o.acc, 0,
               kRouteAround | static_cast<uint32_t>(late + 1));
  const void* seg = seg_ptr(p_.recvbuf, pos_, g);
  const int to = ag_next(pos_, pos_, late);
  if (to >= 0) send_ag(n_ - 2, pos_, g, hdr, seg, p_.ring[to], now, out);
  send_ag(n_ - 2, pos_, g, hdr, seg, late, now, out, kTagPartial);
  lb_post_recv(e, lb_[e].from, kTagBcast, now, out);
  stats_.steps[n_ - 2].t_end = now;
}

Status RingAllreduce::lb_drop_late_piece(int g, const OwnerItem& item, double now,
                                         ActionList* out) {
  // scratch_set_ holds the piece's set (owner_merge checked its header).
  // The late rank's piece comes on the ring when we are its successor (an owner never skips
  // its own chunk's pieces), else straight to us.
  OwnerPiece& o = owner_[g];
  if (scratch_set_.count() != 1 || !scratch_set_.contains(o.partial_for) || o.late_seen) {
    return fail(fmt::format(
        "owner of chunk {} segment {}: piece {} after the segment went partial for rank {}", pos_,
        g, scratch_set_.to_string(), o.partial_for));
  }
  o.late_seen = true;
  if (item.is_ring()) {
    free_recv_slots_.push_back(recvs_[item.index].slot);
    if (!o.wants_to_owner() && o.to_owner_posted) {
      cancel_aux(o.to_owner_aux, out);
      o.to_owner_posted = false;
    }
    post_receives(now, out);
  } else {
    o.to_owner_posted = false;  // its slot is free again
  }
  return owner_merge(g, now, out);
}

// ---- healthy ranks --------------------------------------------------------------------------

Status RingAllreduce::lb_on_partial(size_t idx, int late, double now, ActionList* out) {
  RecvOp& r = recvs_[idx];
  --ag_posted_;
  const int e = lb_new_entry(r.chunk, r.seg);
  LbEntry& E = lb_[e];
  E.late = late;
  E.ag_recv = static_cast<int>(idx);
  lb_tree(late, E.seg_id, &E.from, E.to, &E.nto);
  E.send_needed = E.nto > 0;
  seg_[r.seg_id].lb = true;
  forward_ag(idx, now, out);
  lb_post_recv(e, lb_[e].from, kTagBcast, now, out);
  post_receives(now, out);
  return Status::kOk;
}

void RingAllreduce::lb_read_done(int seg_id, double now, ActionList* out) {
  --seg_[seg_id].out_reads;
  for (size_t e = 0; e < lb_.size(); ++e) {
    if (lb_[e].seg_id == seg_id && !lb_[e].late_role && !lb_[e].done) {
      lb_try_final(static_cast<int>(e), now, out);
    }
  }
}

// ---- the late rank --------------------------------------------------------------------------

void RingAllreduce::lb_late_emit(int c, int g, bool race, double now, ActionList* out) {
  const int e = lb_new_entry(c, g);
  lb_[e].late_role = true;
  lb_[e].race = race;
  lb_[e].late = p_.rank;
  if (!race) {
    // The owner will complete the segment without us (we are the one rank routed around for
    // it, and our input has gone nowhere): our input goes down the trees now, the successor
    // learns that it does not come on the ring, and the partial comes from the owner.
    const int sid = lb_[e].seg_id;
    seg_[sid].piece = PieceState::kSentBcast;
    seg_[sid].skip_ag = true;
    ContributionSet mine(n_);
    mine.add(p_.rank);
    send_ctrl(kFwd, kFlagBypassed, c, g, now, out, &mine, kRouteBcastPass);
    piece_emitted(now, out);
    lb_queue_bcast(e, now, out);
  }
  lb_post_recv(e, p_.ring[c], kTagPartial, now, out);
}

void RingAllreduce::lb_queue_bcast(int e, double now, ActionList* out) {
  LbEntry& E = lb_[e];
  ++stats_.bcast_segments;
  lb_tree(p_.rank, E.seg_id, &E.from, E.to, &E.nto);
  E.send_needed = true;
  E.hdr.assign(hdr_bytes_, 0);
  ContributionSet mine(n_);
  mine.add(p_.rank);
  write_header(E.hdr.data(), Phase::kAllgather, E.chunk, E.seg, mine, 0,
               kRouteBcast | (E.race ? kRouteComing : 0u) | static_cast<uint32_t>(p_.rank + 1));
  lb_queue_.push_back(e);
  lb_pump(now, out);
}

Status RingAllreduce::lb_on_decision(int e, double now, ActionList* out) {
  LbEntry& E = lb_[e];
  const uint8_t* hdr = slot_hdr(E.buf.get(), 0);
  SKIPRING_RETURN_IF_ERROR(check_header(hdr, Phase::kAllgather, E.chunk, E.seg, &scratch_set_));
  const uint32_t route = wire_route(hdr);
  if (route & kRouteRequest) {
    // The owner merged our input (it had gone out before we learnt the mode): the final comes
    // in the allgather. Without that race our input went only down the trees.
    if (!E.race || !scratch_set_.contains(p_.rank)) {
      return fail(fmt::format("late rank, chunk {} segment {}: owner merged set {} without us",
                              E.chunk, E.seg, scratch_set_.to_string()));
    }
    lb_finish(e, now, out);
    return Status::kOk;
  }
  if (scratch_set_.count() != n_ - 1 || scratch_set_.contains(p_.rank)) {
    return fail(fmt::format("late rank, chunk {} segment {}: partial with set {}", E.chunk, E.seg,
                            scratch_set_.to_string()));
  }
  if (E.race) {
    // Our allgather receive for the segment can never match now: nobody sends its final.
    for (size_t i = 0; i < recvs_.size(); ++i) {
      RecvOp& r = recvs_[i];
      if (r.phase != Phase::kAllgather || r.seg_id != E.seg_id) continue;
      if (r.state == OpState::kPosted) {
        cancel_op(make_token(kTokRecv, i), out);
        --ag_posted_;
        r.state = OpState::kFinished;
      } else if (r.state == OpState::kWaiting) {
        seg_[E.seg_id].skip_ag = true;
      } else {
        return fail(fmt::format("late rank, chunk {} segment {}: final and partial both came",
                                E.chunk, E.seg));
      }
    }
    lb_queue_bcast(e, now, out);
    post_receives(now, out);
  }
  lb_try_final(e, now, out);
  return Status::kOk;
}

void RingAllreduce::lb_pump(double now, ActionList* out) {
  while (lb_in_flight_ < kLbInFlight && !lb_queue_.empty()) {
    const int e = lb_queue_.front();
    lb_queue_.pop_front();
    LbEntry& E = lb_[e];
    E.sends_left = 1;
    out->push_back(message_action(Action::Kind::kSend, make_token(kTokLbSend, 2 * e), E.to[0],
                                  tag_for(kTagBcast, E.seg_id), E.hdr.data(), hdr_bytes_,
                                  input_ptr(E.chunk, E.seg),
                                  layout_.segment_count(E.chunk, E.seg) * layout_.elem_size()));
    E.t = now;
    ++pending_;
    ++lb_in_flight_;
    ++stats_.messages_sent;
  }
}

// ---- completions ----------------------------------------------------------------------------

Status RingAllreduce::lb_on_recv(size_t token_idx, size_t payload_bytes, double now,
                                 ActionList* out) {
  const size_t e = token_idx;
  if (e >= lb_.size() || lb_[e].done) return fail("completion for an unknown broadcast receive");
  LbEntry& E = lb_[e];
  const size_t expect = layout_.segment_count(E.chunk, E.seg) * layout_.elem_size();
  if (payload_bytes != expect) {
    return fail(fmt::format("chunk {} segment {}: {} payload bytes, expected {}", E.chunk, E.seg,
                            payload_bytes, expect));
  }
  --pending_;
  ++stats_.messages_received;
  E.recv_done = true;
  if (E.late_role) return lb_on_decision(static_cast<int>(e), now, out);
  // The late rank's input, from our ring predecessor.
  const uint8_t* hdr = slot_hdr(E.buf.get(), 0);
  SKIPRING_RETURN_IF_ERROR(check_header(hdr, Phase::kAllgather, E.chunk, E.seg, &scratch_set_));
  const uint32_t route = wire_route(hdr);
  if (scratch_set_.count() != 1 || !scratch_set_.contains(E.late) || !(route & kRouteBcast)) {
    return fail(fmt::format("chunk {} segment {}: broadcast input with set {} from rank {}",
                            E.chunk, E.seg, scratch_set_.to_string(), E.late));
  }
  if (E.chunk == pos_) {
    OwnerPiece& o = owner_[E.seg];
    o.xl_known = true;
    o.coming = (route & kRouteComing) != 0;
    if (!o.wants_to_owner() && o.to_owner_posted) {
      cancel_aux(o.to_owner_aux, out);
      o.to_owner_posted = false;
    }
  }
  E.sends_left = E.nto;
  for (int k = 0; k < E.nto; ++k) {
    out->push_back(message_action(Action::Kind::kSend, make_token(kTokLbSend, 2 * e + k), E.to[k],
                                  tag_for(kTagBcast, E.seg_id), slot_hdr(E.buf.get(), 0),
                                  hdr_bytes_, slot_payload(E.buf.get(), 0), expect));
    ++pending_;
    ++stats_.messages_sent;
  }
  lb_try_final(static_cast<int>(e), now, out);
  return Status::kOk;
}

Status RingAllreduce::lb_on_send(size_t token_idx, double now, ActionList* out) {
  const size_t e = token_idx / 2;
  if (e >= lb_.size() || lb_[e].done || lb_[e].sends_left <= 0) {
    return fail("completion for an unknown broadcast send");
  }
  LbEntry& E = lb_[e];
  --pending_;
  if (--E.sends_left > 0) return Status::kOk;
  E.send_done = true;
  if (E.late_role) {
    --lb_in_flight_;
    lb_pump(now, out);
  }
  lb_try_final(static_cast<int>(e), now, out);
  lb_finish(static_cast<int>(e), now, out);
  return Status::kOk;
}

void RingAllreduce::lb_try_final(int e, double now, ActionList* out) {
  LbEntry& E = lb_[e];
  if (E.reducing || E.reduced || !E.recv_done || (E.late_role && !E.send_needed)) return;
  uint8_t* dst = seg_ptr(p_.recvbuf, E.chunk, E.seg);
  const size_t count = layout_.segment_count(E.chunk, E.seg);
  // The same operands in the same order on every rank: partial, then the late rank's input.
  if (E.late_role) {
    if (!E.send_done) return;  // in place the send reads what we overwrite
    out->push_back(reduce_action(make_token(kTokLbReduce, e), dst, slot_payload(E.buf.get(), 0),
                                 input_ptr(E.chunk, E.seg), count, p_.dtype, p_.op));
  } else {
    if (seg_[E.seg_id].out_reads > 0) return;  // the partial is still being sent
    out->push_back(reduce_action(make_token(kTokLbReduce, e), dst, dst,
                                 slot_payload(E.buf.get(), 0), count, p_.dtype, p_.op));
  }
  E.reducing = true;
  E.t = now;
  ++pending_;
}

Status RingAllreduce::lb_on_reduce(size_t e, double now, ActionList* out) {
  if (e >= lb_.size() || !lb_[e].reducing) return fail("unknown broadcast reduction");
  LbEntry& E = lb_[e];
  E.reducing = false;
  E.reduced = true;
  --pending_;
  stats_.steps[n_ - 2].reduce_s += now - E.t;
  lb_finish(static_cast<int>(e), now, out);
  return Status::kOk;
}

void RingAllreduce::lb_finish(int e, double now, ActionList* out) {
  LbEntry& E = lb_[e];
  if (E.done) return;
  bool complete;
  if (E.late_role) {
    // Partial: our final is computed; request (race: the owner merged our piece): the final
    // comes in the allgather.
    complete = E.reduced || (E.recv_done && !E.send_needed && E.race);
  } else {
    complete = E.reduced && (!E.send_needed || E.send_done);
  }
  if (!complete) return;
  E.done = true;
  E.buf.reset();
  --lb_open_;
  if (E.ag_recv >= 0) {
    RecvOp& r = recvs_[E.ag_recv];
    r.state = OpState::kFinished;
    step_record(r).t_end = now;
  }
  if (!E.late_role && E.chunk == pos_) owner_[E.seg].full = true;
  (void)out;
}

}  // namespace skipring
