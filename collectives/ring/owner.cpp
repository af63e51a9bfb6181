// The owner's merge of its chunk's pieces and its receives for to-owner pieces.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

Status RingAllreduce::owner_enqueue(int g, OwnerItem item, double now, ActionList* out) {
  owner_[g].queue.push_back(item);
  return owner_merge(g, now, out);
}

Status RingAllreduce::owner_merge(int g, double now, ActionList* out) {
  OwnerPiece& o = owner_[g];
  if (o.merging || o.queue.empty()) return Status::kOk;
  const OwnerItem item = o.queue.front();
  o.queue.erase(o.queue.begin());
  const uint8_t* hdr;
  const uint8_t* payload;
  if (item.is_ring()) {
    hdr = slot_hdr(recv_slot_base(recvs_[item.index].slot), 0);
    payload = slot_payload(recv_slot_base(recvs_[item.index].slot), 0);
  } else {
    const AuxOp& x = aux_[item.index];
    hdr = slot_hdr(owner_slots_, x.owner_slot);
    payload = slot_payload(owner_slots_, x.owner_slot);
  }
  SKIPRING_RETURN_IF_ERROR(check_header(hdr, Phase::kReduceScatter, pos_, g, &scratch_set_));
  const uint32_t late = wire_route(hdr) & kRouteLateMask;
  if (late != 0) {
    if (late > static_cast<uint32_t>(n_) || static_cast<int>(late - 1) == p_.rank) {
      return fail(
          fmt::format("owner of chunk {} segment {}: bad allgather route {}", pos_, g, late - 1));
    }
    if (late_rank_ < 0) late_rank_ = static_cast<int>(late - 1);
  }
  if (scratch_set_.empty() || scratch_set_.overlaps(o.acc)) {
    return fail(fmt::format("owner of chunk {} segment {}: piece {} overlaps what it holds {}",
                            pos_, g, scratch_set_.to_string(), o.acc.to_string()));
  }
  o.acc.merge(scratch_set_);
  o.merging = true;
  uint8_t* dst = seg_ptr(p_.recvbuf, pos_, g);
  out->push_back(reduce_action(make_token(kTokOwnerReduce, g), dst,
                               o.started ? static_cast<const void*>(dst) : input_ptr(pos_, g),
                               payload, layout_.segment_count(pos_, g), p_.dtype, p_.op));
  o.started = true;
  o.merging_item = item;
  o.merge_t = now;
  ++pending_;
  return Status::kOk;
}

void RingAllreduce::post_to_owner_recvs(double now, ActionList* out) {
  // With skip-ahead on, each incomplete segment of our chunk always has a receive posted for a
  // piece coming straight to us, so such a piece never waits on us (its sender holds a slot).
  if (!p_.skip) return;
  for (size_t g = 0; g < owner_.size(); ++g) {
    OwnerPiece& o = owner_[g];
    if (o.full || o.to_owner_posted) continue;
    const int aux = add_aux(AuxKind::kToOwnerRecv, pos_, static_cast<int>(g));
    aux_[aux].owner_slot = static_cast<int>(g);
    aux_[aux].t = now;
    o.to_owner_posted = true;
    o.to_owner_aux = aux;
    // From any source: whoever delivers it, the slow rank or a rank forwarding a late piece.
    out->push_back(message_action(
        Action::Kind::kRecv, make_token(kTokAux, aux), kAnySource,
        tag_for(kTagToOwner, aux_[aux].seg_id), slot_hdr(owner_slots_, aux_[aux].owner_slot),
        hdr_bytes_, slot_payload(owner_slots_, aux_[aux].owner_slot),
        layout_.segment_count(pos_, static_cast<int>(g)) * layout_.elem_size()));
    ++pending_;
  }
}

Status RingAllreduce::on_owner_merged(int g, double now, ActionList* out) {
  OwnerPiece& o = owner_[g];
  o.merging = false;
  --pending_;
  stats_.steps[n_ - 2].reduce_s += now - o.merge_t;
  if (o.merging_item.is_ring()) {
    free_recv_slots_.push_back(recvs_[o.merging_item.index].slot);
    post_receives(now, out);
  } else {
    o.to_owner_posted = false;  // its slot is free again
  }
  if (o.acc.full()) {
    // Chunk segment complete: its allgather starts now. Nothing more can come straight to
    // us for it (it would overlap), so the standing receive for such pieces is cancelled.
    o.full = true;
    if (o.to_owner_posted) {
      cancel_aux(o.to_owner_aux, out);
      o.to_owner_posted = false;
    }
    stats_.steps[n_ - 2].t_end = now;
    send_own_segment(g, now, out);
    return Status::kOk;
  }
  return owner_merge(g, now, out);
}

Status RingAllreduce::on_to_owner_piece(size_t idx, size_t payload_bytes, double now,
                                        ActionList* out) {
  const AuxOp& op = aux_[idx];
  const size_t expect = layout_.segment_count(op.chunk, op.seg) * layout_.elem_size();
  if (payload_bytes != expect) return fail("to-owner piece of the wrong size");
  ++stats_.messages_received;
  mode_.disturbed = true;
  // to_owner_posted stays set until the merge is done: the slot is still in use.
  return owner_enqueue(op.seg, OwnerItem::to_owner(static_cast<int>(idx)), now, out);
}
}  // namespace skipring
