// Skip-ahead: the skip rule, notices, redirect acks, bypass, control channels.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

double RingAllreduce::piece_threshold(const RecvOp& r) const {
  return p_.skip_threshold_s * (1.0 + kStepGrace * r.step);
}

double RingAllreduce::skip_deadline(const RecvOp& r) const {
  // Late ourselves (our predecessor bypasses us, so it is running): every ring piece it sent
  // us went before its bypass and is in the transport, queued behind our arrival's backlog.
  // Skipping it would send our input to the owner alone and the piece after it, twice our
  // link's bytes for that segment (measured on 4 emulated hosts: 36 of the late rank's 100
  // pieces after its arrival).
  if (mode_.pred_bypassing) return std::numeric_limits<double>::infinity();
  if (mode_.pred == PredState::kAbsent) return r.t_posted;
  return std::max(r.t_posted, t_pred_heard_) + piece_threshold(r);
}

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
                                  double now, ActionList* out, const uint8_t* hdr) {
  AuxOp& op = aux_[aux];
  op.t = now;
  if (hdr == nullptr && !op.hdr.empty()) hdr = op.hdr.data();
  out->push_back(message_action(Action::Kind::kSend, make_token(kTokAux, aux), peer, tag,
                                const_cast<uint8_t*>(hdr), hdr_bytes_, payload, bytes));
  ++pending_;
}

void RingAllreduce::post_ctrl_recv(int channel, double now, ActionList* out) {
  const int aux = add_aux(AuxKind::kCtrlRecv, -1, -1);
  aux_[aux].channel = channel;
  aux_[aux].hdr.assign(hdr_bytes_, 0);
  aux_[aux].t = now;
  const int peer = channel == kBack ? succ_ : channel == kFwd ? pred_ : p_.ring[(pos_ + 2) % n_];
  out->push_back(message_action(Action::Kind::kRecv, make_token(kTokAux, aux), peer,
                                ctrl_tag(channel), aux_[aux].hdr.data(), hdr_bytes_, nullptr, 0));
  ++pending_;
}

void RingAllreduce::send_ctrl(int channel, uint8_t flags, int c, int g, double now, ActionList* out,
                              const ContributionSet* set) {
  const int aux = add_aux(AuxKind::kCtrlSend, c, g);
  aux_[aux].hdr.assign(hdr_bytes_, 0);
  scratch_set_.clear();
  write_header(aux_[aux].hdr.data(), Phase::kReduceScatter, std::max(c, 0), std::max(g, 0),
               set != nullptr ? *set : scratch_set_, flags);
  const int peer = channel == kBack  ? pred_
                   : channel == kFwd ? succ_
                                     : p_.ring[(pos_ - 2 + 2 * n_) % n_];
  post_aux_send(aux, peer, ctrl_tag(channel), nullptr, 0, now, out);
}

void RingAllreduce::piece_emitted(double now, ActionList* out) {
  // Once every ring piece we pass on has gone, no more bypass messages can follow.
  if (--rs_to_emit_ == 0 && mode_.side_channels && !ctrl_.fwd_done_sent) {
    ctrl_.fwd_done_sent = true;
    send_ctrl(kFwd, kFlagFwdDone, -1, -1, now, out);
  }
}

void RingAllreduce::emit_piece(int record, int c, int g, uint8_t* hdr, const void* payload,
                               int slot, const ContributionSet& set, bool reads_input, double now,
                               ActionList* out) {
  const int seg_id = layout_.first_segment(c) + g;
  switch (seg_[seg_id].on_emit(mode_.bypass_successor && p_.ring[c] != succ_)) {
    case PieceState::kSentRing:
      write_header(hdr, Phase::kReduceScatter, c, g, set);
      post_send(Phase::kReduceScatter, record, c, g, hdr, payload, slot, now, out, reads_input);
      break;
    case PieceState::kSentBypass:
      bypass_to_owner(c, g, hdr, payload, slot, set, reads_input, now, out);
      break;
    default:  // kSentToOwner
      redirect_to_owner(c, g, hdr, payload, slot, set, reads_input, now, out);
      break;
  }
  piece_emitted(now, out);
}

void RingAllreduce::bypass_to_owner(int c, int g, uint8_t* hdr, const void* payload, int slot,
                                    const ContributionSet& set, bool reads_input, double now,
                                    ActionList* out) {
  // Our successor is late (the rank after it asked): the piece goes straight to the owner
  // and the successor learns it has only its own input to send for (c, g).
  // The route word names the late rank: the owner routes its allgather around it.
  write_header(hdr, Phase::kReduceScatter, c, g, set, kFlagToOwner,
               static_cast<uint32_t>(succ_ + 1));
  const int piece = add_aux(AuxKind::kToOwnerSend, c, g);
  aux_[piece].send_slot = slot;
  aux_[piece].reads_input = reads_input;
  post_aux_send(piece, p_.ring[c], tag_for(kTagToOwner, aux_[piece].seg_id), payload,
                layout_.segment_count(c, g) * layout_.elem_size(), now, out, hdr);
  ++stats_.messages_sent;
  send_ctrl(kFwd, kFlagBypassed, c, g, now, out, &set);
}

void RingAllreduce::redirect_to_owner(int c, int g, uint8_t* hdr, const void* payload, int slot,
                                      const ContributionSet& set, bool reads_input, double now,
                                      ActionList* out) {
  // The successor skipped us for this piece: it goes straight to the chunk's owner, and the
  // successor's ring receive is answered by an ack carrying the set we delivered. Being the
  // late rank, we name ourselves in the route word: the owner routes its allgather around us
  // (its chunk may have reached us before our predecessor started bypassing us).
  const int seg_id = layout_.first_segment(c) + g;
  write_header(hdr, Phase::kReduceScatter, c, g, set, kFlagToOwner,
               mode_.self_late ? static_cast<uint32_t>(p_.rank + 1) : 0);
  const int piece = add_aux(AuxKind::kToOwnerSend, c, g);
  aux_[piece].send_slot = slot;
  // An own-input piece sent to the owner: the input is read until that send completes.
  aux_[piece].reads_input = reads_input;
  if (mode_.self_late && (reads_input || !mode_.direct)) {
    pace_piece(piece, c, g, hdr, payload, now, out);
  } else {
    post_aux_send(piece, p_.ring[c], tag_for(kTagToOwner, seg_id), payload,
                  layout_.segment_count(c, g) * layout_.elem_size(), now, out, hdr);
    ++stats_.messages_sent;
  }
  const int ack = add_aux(AuxKind::kAckSend, c, g);
  aux_[ack].hdr.assign(hdr_bytes_, 0);
  write_header(aux_[ack].hdr.data(), Phase::kReduceScatter, c, g, set, kFlagAck);
  post_aux_send(ack, succ_, tag_for(kTagAck, seg_id), nullptr, 0, now, out);
}

void RingAllreduce::forward_own(size_t idx, double now, ActionList* out) {
  const RecvOp& r = recvs_[idx];
  ContributionSet mine(n_);
  mine.add(p_.rank);
  const int hdr_aux = add_aux(AuxKind::kCtrlSend, -1, -1);  // header storage only
  aux_[hdr_aux].hdr.assign(hdr_bytes_, 0);
  aux_[hdr_aux].done = true;
  emit_piece(r.step, r.chunk, r.seg, aux_[hdr_aux].hdr.data(), input_ptr(r.chunk, r.seg), -1, mine,
             /*reads_input=*/true, now, out);
}

Status RingAllreduce::skip_piece(size_t idx, double now, ActionList* out) {
  RecvOp& r = recvs_[idx];
  r.skipped = true;
  if (mode_.pred == PredState::kHeard) mode_.pred = PredState::kSilent;
  mode_.disturbed = true;
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
  out->push_back(message_action(Action::Kind::kRecv, make_token(kTokAux, ack), pred_,
                                tag_for(kTagAck, aux_[ack].seg_id), aux_[ack].hdr.data(),
                                hdr_bytes_, nullptr, 0));
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
  // (Never our own chunk: a rank bypasses its successor only for chunks the successor passes
  // on, emit_piece.)
  if (!r.skipped && r.chunk != pos_) forward_own(idx, now, out);
  advance_wait_cursor();
  post_receives(now, out);
  resolve_rs_recv(now, out);
  (void)start_reduces(now, out);  // the cursor may have waited on this piece
}

void RingAllreduce::resolve_rs_recv(double now, ActionList* out) {
  // Once every ring piece has arrived or been acknowledged we will send no more notices.
  if (rs_unresolved_ == 0 && !ctrl_.rs_done_sent) {
    ctrl_.rs_done_sent = true;
    send_ctrl(kBack, kFlagRsDone, -1, -1, now, out);
    if (mode_.side_channels) send_ctrl(kFar, kFlagFarDone, -1, -1, now, out);
  }
}

Status RingAllreduce::on_aux(size_t idx, size_t payload_bytes, double now, ActionList* out) {
  AuxOp& op = aux_[idx];
  if (op.done || op.cancelled) return Status::kOk;  // completion of a cancelled receive
  op.done = true;
  --pending_;
  switch (op.kind) {
    case AuxKind::kCtrlRecv:
      SKIPRING_RETURN_IF_ERROR(on_control(idx, now, out));
      break;
    case AuxKind::kAckRecv:
      SKIPRING_RETURN_IF_ERROR(on_ack(idx, now, out));
      break;
    case AuxKind::kToOwnerRecv:
      SKIPRING_RETURN_IF_ERROR(on_to_owner_piece(idx, payload_bytes, now, out));
      break;
    case AuxKind::kToOwnerSend:
      SKIPRING_RETURN_IF_ERROR(on_to_owner_sent(idx, now, out));
      break;
    case AuxKind::kCtrlSend:
    case AuxKind::kAckSend:
      break;
  }
  post_to_owner_recvs(now, out);
  finish_event(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_control(size_t idx, double now, ActionList* out) {
  WireHeader h;
  const std::string why = decode_wire_control(aux_[idx].hdr.data(), n_, p_.seq, &h);
  if (!why.empty()) return fail(why);
  ++ctrl_.seen;
  // Copied: the handlers below may add aux ops and move aux_ in memory.
  const int channel = aux_[idx].channel;
  if (h.flags & (kFlagRsDone | kFlagFwdDone | kFlagFarDone)) {
    ctrl_.open[channel] = false;
    return Status::kOk;
  }
  mode_.disturbed = true;
  if (channel == kFar) {
    if (!(h.flags & kFlagBypassReq)) return fail("malformed bypass request");
    SKIPRING_RETURN_IF_ERROR(on_bypass_request(now, out));
  } else {
    if (h.chunk >= static_cast<uint32_t>(n_) ||
        h.segment >= static_cast<uint32_t>(layout_.segments(h.chunk))) {
      return fail("malformed control message");
    }
    const int seg_id = layout_.first_segment(h.chunk) + h.segment;
    if (channel == kBack) {
      if (!(h.flags & kFlagNotice)) return fail("malformed notice");
      on_notice(seg_id);
    } else {
      if (!(h.flags & kFlagBypassed)) return fail("malformed bypass");
      SKIPRING_RETURN_IF_ERROR(on_bypassed(seg_id, now, out));
    }
  }
  post_ctrl_recv(channel, now, out);
  return Status::kOk;
}

Status RingAllreduce::on_bypass_request(double now, ActionList* out) {
  // The rank after our successor asks: our successor is late, its pieces go to the owners.
  mode_.bypass_successor = true;
  if (late_rank_ < 0) late_rank_ = succ_;
  return start_reduces(now, out);  // may have been waiting for a send slot
}

void RingAllreduce::on_notice(int seg_id) {
  // Our successor skipped us for this segment.
  mode_.self_late = true;
  // Not yet sent: it will go straight to the owner. Already sent: the successor gets it on its
  // ring receive and forwards it itself.
  seg_[seg_id].on_notice();
}

Status RingAllreduce::on_bypassed(int seg_id, double now, ActionList* out) {
  // Our predecessor sent its piece for this segment straight to the owner.
  if (!seg_[seg_id].on_pred_bypassed()) return fail("malformed bypass");
  mode_.self_late = true;
  mode_.pred_bypassing = true;
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
  return Status::kOk;
}

Status RingAllreduce::on_ack(size_t idx, double now, ActionList* out) {
  // The predecessor delivered its piece to the owner: our ring receive will never match.
  mode_.disturbed = true;
  size_t ri = recvs_.size();
  for (size_t i = 0; i < recvs_.size(); ++i) {
    if (recvs_[i].ack_aux == static_cast<int>(idx)) ri = i;
  }
  if (ri == recvs_.size()) return fail("redirect ack without a skipped piece");
  const AuxOp& op = aux_[idx];
  SKIPRING_RETURN_IF_ERROR(
      check_header(op.hdr.data(), Phase::kReduceScatter, op.chunk, op.seg, &scratch_set_));
  RecvOp& r = recvs_[ri];
  cancel_op(make_token(kTokRecv, ri), out);  // the ring receive
  r.state = OpState::kFinished;
  r.t_arrived = now;
  free_recv_slots_.push_back(r.slot);
  --rs_unresolved_;
  advance_wait_cursor();
  post_receives(now, out);
  resolve_rs_recv(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_to_owner_sent(size_t idx, double now, ActionList* out) {
  // Copies: send_paced and post_receives may add aux ops and move aux_ in memory.
  const AuxOp& op = aux_[idx];
  const int recv_slot = op.recv_slot, send_slot = op.send_slot, seg_id = op.seg_id;
  const bool reads_input = op.reads_input;
  if (op.paced) {
    --paced_in_flight_;
    send_paced(now, out);
  }
  if (send_slot >= 0) free_send_slots_.push_back(send_slot);
  if (recv_slot >= 0) {
    free_recv_slots_.push_back(recv_slot);
  } else if (reads_input) {
    seg_[seg_id].on_input_released();
  }
  post_receives(now, out);
  return start_reduces(now, out);
}

void RingAllreduce::forward_late_piece(size_t idx, uint8_t* hdr, double now, ActionList* out) {
  // A late piece: we already forwarded our own contribution. It goes straight to the owner as
  // it is (its set is in scratch_set_); the ack we were also waiting for will never come.
  RecvOp& r = recvs_[idx];
  r.state = OpState::kFinished;
  ++stats_.late_pieces;
  step_record(r).late_pieces += 1;
  cancel_aux(r.ack_aux, out);
  write_header(hdr, Phase::kReduceScatter, r.chunk, r.seg, scratch_set_, kFlagToOwner);
  const int piece = add_aux(AuxKind::kToOwnerSend, r.chunk, r.seg);
  aux_[piece].recv_slot = r.slot;
  post_aux_send(piece, p_.ring[r.chunk], tag_for(kTagToOwner, r.seg_id),
                slot_payload(recv_slot_base(r.slot), 0),
                layout_.segment_count(r.chunk, r.seg) * layout_.elem_size(), now, out, hdr);
  ++stats_.messages_sent;
}
Status RingAllreduce::check_skips(double now, ActionList* out) {
  if (mode_.pred == PredState::kSilent &&
      t_pred_heard_ + kBypassFactor * p_.skip_threshold_s <= now) {
    mode_.pred = PredState::kAbsent;
  }
  for (size_t i = wait_cursor_; i < next_post_; ++i) {
    RecvOp& r = recvs_[i];
    if (r.phase != Phase::kReduceScatter) break;
    if (r.state == OpState::kPosted && r.skipped && mode_.side_channels &&
        !mode_.bypass_requested && r.t_posted + kBypassFactor * piece_threshold(r) <= now) {
      // Still nothing long after the skip: the predecessor is absent or very slow. Ask the
      // rank before it to stop feeding it and send its pieces straight to their owners.
      mode_.bypass_requested = true;
      ++stats_.bypass_requests;
      send_ctrl(kFar, kFlagBypassReq, -1, -1, now, out);
    }
    if (r.state != OpState::kPosted || r.skipped || r.chunk == pos_) continue;
    if (skip_deadline(r) > now) continue;
    if (seg_[r.seg_id].sent()) continue;  // cannot happen for ring pieces; defensive
    SKIPRING_RETURN_IF_ERROR(skip_piece(i, now, out));
  }
  return Status::kOk;
}
void RingAllreduce::resolve_bypassed_unposted(double now, ActionList* out) {
  // The next receive to post is a ring piece the predecessor already sent to the owner: it is
  // never posted, and only our own input goes on.
  RecvOp& r = recvs_[next_post_];
  r.state = OpState::kFinished;
  r.t_posted = r.t_arrived = now;
  ++next_post_;
  --rs_unresolved_;
  if (r.chunk != pos_) forward_own(next_post_ - 1, now, out);
  advance_wait_cursor();
  resolve_rs_recv(now, out);
}
}  // namespace skipring
