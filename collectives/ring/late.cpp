// The late rank's paced pieces to the owners.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

void RingAllreduce::pace_piece(int piece, int c, int g, const uint8_t* hdr, const void* payload,
                               double now, ActionList* out) {
  // Being the late rank, every piece we owe an owner (our input alone, or a partial our
  // predecessor sent us before it started bypassing us, plus ours) is paced, chunk by chunk:
  // pieces of a later chunk that are ready earlier (the partials) would otherwise share our
  // link with the current chunk, and chunks would complete together again. With the direct
  // allgather (one host: no link to share) only our input is (skip.cpp: redirect_to_owner):
  // pacing the partials too made the harness's shared-memory model slower (n = 8: 34.0 ->
  // 44.2 us after the arrival). Deadlock-free: the owner keeps a receive posted for every
  // incomplete segment (post_to_owner_recvs), so a paced piece in flight always completes (and
  // frees its send slot, if it holds one).
  aux_[piece].paced = true;
  paced_.push_back(PacedPiece{((pos_ - 1 - c + 2 * n_) % n_) * (layout_.segments(0) + 1) + g, piece,
                              p_.ring[c], hdr, payload});
  std::push_heap(paced_.begin(), paced_.end(), paced_later);
  send_paced(now, out);
}

void RingAllreduce::send_paced(double now, ActionList* out) {
  while (paced_in_flight_ < kPacedInFlight && !paced_.empty()) {
    std::pop_heap(paced_.begin(), paced_.end(), paced_later);
    const PacedPiece p = paced_.back();
    paced_.pop_back();
    const AuxOp& op = aux_[p.aux];
    post_aux_send(p.aux, p.peer, tag_for(kTagToOwner, op.seg_id), p.payload,
                  layout_.segment_count(op.chunk, op.seg) * layout_.elem_size(), now, out, p.hdr);
    ++stats_.messages_sent;
    ++paced_in_flight_;
  }
}

bool RingAllreduce::first_sends_due() {
  // Called on each timer poll while step 0's sends are deferred.
  if (ctrl_.seen != first_sends_.seen_mark) {
    first_sends_.seen_mark = ctrl_.seen;  // notices are still coming in: read them first
    first_sends_.quiet_polls = 0;
    return false;
  }
  return ++first_sends_.quiet_polls >= p_.quiet_polls;
}
}  // namespace skipring
