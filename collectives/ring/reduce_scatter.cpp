// Reduce-scatter: the receive window, ring sends, reductions in receive order.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

void RingAllreduce::send_first_pieces(double now, ActionList* out) {
  first_sends_.deferred = false;
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
  Action a = message_action(
      Action::Kind::kSend, make_token(kTokSend, sends_.size() - 1), peer >= 0 ? peer : succ_,
      tag_for(phase == Phase::kReduceScatter ? kTagRs : kTagAg, s.seg_id), hdr, hdr_bytes_, payload,
      layout_.segment_count(c, g) * layout_.elem_size());
  a.phase = static_cast<int8_t>(phase);
  a.step = static_cast<int16_t>(phase == Phase::kReduceScatter ? record : record - (n_ - 1));
  out->push_back(a);
  ++pending_;
  ++stats_.messages_sent;
}

void RingAllreduce::post_receives(double now, ActionList* out) {
  while (next_post_ < recvs_.size()) {
    RecvOp& r = recvs_[next_post_];
    if (r.state != OpState::kWaiting) {  // an allgather receive posted out of order
      ++next_post_;
      continue;
    }
    if (r.phase == Phase::kAllgather) {
      if (!post_ag_recv(next_post_, now, out)) {
        if (ag_blocked_at_ != next_post_) {
          ag_blocked_at_ = next_post_;
          ag_blocked_since_ = now;
        }
        if (mode_.ag_unwindowed()) post_ag_out_of_order(now, out);
        break;
      }
      ++next_post_;
      continue;
    }
    if (seg_[r.seg_id].pred_bypassed) {
      resolve_bypassed_unposted(now, out);
      continue;
    }
    const int slot = take_recv_slot();
    if (slot < 0) break;
    r.slot = slot;
    out->push_back(message_action(Action::Kind::kRecv, make_token(kTokRecv, next_post_), pred_,
                                  tag_for(kTagRs, r.seg_id), slot_hdr(recv_slot_base(r.slot), 0),
                                  hdr_bytes_, slot_payload(recv_slot_base(r.slot), 0),
                                  layout_.segment_count(r.chunk, r.seg) * layout_.elem_size()));
    StepRecord& rec = step_record(r);
    if (rec.t_start == 0) rec.t_start = now;
    r.state = OpState::kPosted;
    r.t_posted = now;
    ++pending_;
    ++next_post_;
  }
}

bool RingAllreduce::post_ag_recv(size_t i, double now, ActionList* out) {
  RecvOp& r = recvs_[i];
  if (!ag_recv_admitted(r)) return false;
  // With skip-ahead the owner routes each segment (ring, around a late rank, or direct):
  // exactly one message per segment reaches every rank, from whichever rank the route
  // names, and its header says where it goes on.
  out->push_back(message_action(Action::Kind::kRecv, make_token(kTokRecv, i),
                                mode_.side_channels ? kAnySourceOneSender : pred_,
                                tag_for(kTagAg, r.seg_id), r.header, hdr_bytes_,
                                seg_ptr(p_.recvbuf, r.chunk, r.seg),
                                layout_.segment_count(r.chunk, r.seg) * layout_.elem_size()));
  ++ag_posted_;
  ag_moved_ = now;
  StepRecord& rec = step_record(r);
  if (rec.t_start == 0) rec.t_start = now;
  r.state = OpState::kPosted;
  r.t_posted = now;
  ++pending_;
  return true;
}

void RingAllreduce::post_ag_out_of_order(double now, ActionList* out) {
  // Unwindowed allgather receives (skip-ahead on) match by tag from whichever rank the route
  // names, so their order does not matter: one whose segment still holds input an unfinished
  // send reads (in place) must not hold up the others. (A rank whose step-0 pieces to a late
  // successor are parked, its predecessor, could otherwise post no allgather receive until
  // the late rank arrived, and every final segment routed through it waited.)
  for (size_t i = next_post_ + 1; i < recvs_.size(); ++i) {
    if (recvs_[i].state == OpState::kWaiting && recvs_[i].phase == Phase::kAllgather) {
      post_ag_recv(i, now, out);
    }
  }
}

double RingAllreduce::ag_stall_deadline() const {
  if (!mode_.side_channels || mode_.ag_open || next_post_ >= recvs_.size() ||
      ag_blocked_at_ != next_post_) {
    return std::numeric_limits<double>::infinity();
  }
  // Without a straggler the allgather segments come at the ring's pace; none for a threshold
  // while the window is shut, and a later one may be held by its sender (its per-peer queue)
  // for a receive we have not posted.
  return std::max(ag_moved_, ag_blocked_since_) + p_.skip_threshold_s;
}

void RingAllreduce::sync_ag_window(double now, ActionList* out) {
  if (mode_.ag_open || !mode_.side_channels) return;
  const bool straggler = mode_.disturbed || mode_.ag_rerouted;
  if (!straggler && now < ag_stall_deadline()) return;
  mode_.ag_open = true;
  stats_.ag_window_opened = straggler ? 1 : 2;
  post_receives(now, out);
}

int RingAllreduce::take_recv_slot() {
  if (free_recv_slots_.empty() &&
      (overflow_slots_.size() < stats_.skips || mode_.pred == PredState::kAbsent)) {
    // Skipped receives keep their slots until the late rank answers; each skip lends the
    // window one more slot so the ring keeps moving around a late rank. Once the
    // predecessor is absent the window grows on demand: our own chunk's pieces from it
    // cannot be skipped, and each would otherwise hold a slot until it arrives (one per
    // segment: the window closed after `depth` segments and the ranks behind us started
    // skipping us in turn).
    overflow_slots_.emplace_back(new uint8_t[slot_bytes_]);
    free_recv_slots_.push_back(p_.depth + static_cast<int>(overflow_slots_.size()) - 1);
  }
  if (free_recv_slots_.empty()) return -1;
  const int slot = free_recv_slots_.back();
  free_recv_slots_.pop_back();
  return slot;
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
    if (free_send_slots_.empty() && mode_.bypass_successor) {
      // Bypassing a late successor: send slots still hold pieces it has not taken, so the
      // pieces now going to the owners get fresh ones.
      overflow_send_.emplace_back(new uint8_t[slot_bytes_]);
      free_send_slots_.push_back(p_.depth + static_cast<int>(overflow_send_.size()) - 1);
    }
    if (free_send_slots_.empty()) break;
    r.out_slot = free_send_slots_.back();
    free_send_slots_.pop_back();
    const Action a = reduce_action(make_token(kTokReduce, reduce_cursor_),
                                   slot_payload(send_slot_base(r.out_slot), 0),
                                   input_ptr(r.chunk, r.seg), recv_slot_base(r.slot) + hdr_area_,
                                   layout_.segment_count(r.chunk, r.seg), p_.dtype, p_.op);
    r.state = OpState::kReducing;
    r.t_reduce = now;
    ++pending_;
    --awaiting_reduce_;
    ++reduce_cursor_;
    out->push_back(a);
  }
  return Status::kOk;
}

Status RingAllreduce::on_ring_piece(size_t idx, double now, ActionList* out) {
  RecvOp& r = recvs_[idx];
  --rs_unresolved_;
  uint8_t* hdr = slot_hdr(recv_slot_base(r.slot), 0);
  SKIPRING_RETURN_IF_ERROR(check_header(hdr, r.phase, r.chunk, r.seg, &scratch_set_));
  if (scratch_set_.empty() || scratch_set_.contains(p_.rank)) {
    return fail(fmt::format("chunk {} segment {}: contribution set {} overlaps own rank {}",
                            r.chunk, r.seg, scratch_set_.to_string(), p_.rank));
  }
  if (r.skipped) {
    forward_late_piece(idx, hdr, now, out);
  } else if (r.chunk == pos_) {
    r.state = OpState::kFinished;
    SKIPRING_RETURN_IF_ERROR(
        owner_enqueue(r.seg, OwnerItem::ring(static_cast<int>(idx)), now, out));
  } else {
    ++awaiting_reduce_;
    SKIPRING_RETURN_IF_ERROR(start_reduces(now, out));
  }
  resolve_rs_recv(now, out);
  return Status::kOk;
}
Status RingAllreduce::on_piece_reduced(size_t idx, double now, ActionList* out) {
  RecvOp& r = recvs_[idx];
  r.state = OpState::kFinished;
  --pending_;
  StepRecord& rec = stats_.steps[r.step];
  rec.reduce_s += now - r.t_reduce;
  rec.t_end = now;
  seg_[r.seg_id].on_input_released();
  // The outgoing partial sums what came in plus our input.
  SKIPRING_RETURN_IF_ERROR(
      check_header(slot_hdr(recv_slot_base(r.slot), 0), r.phase, r.chunk, r.seg, &scratch_set_));
  scratch_set_.add(p_.rank);
  free_recv_slots_.push_back(r.slot);
  emit_piece(r.step, r.chunk, r.seg, slot_hdr(send_slot_base(r.out_slot), 0),
             slot_payload(send_slot_base(r.out_slot), 0), r.out_slot, scratch_set_, false, now,
             out);
  post_receives(now, out);
  return Status::kOk;
}
}  // namespace skipring
