// The late rank's paced pieces to the owners.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

void RingAllreduce::send_paced(double now, ActionList* out) {
  while (paced_in_flight_ < kPacedInFlight && !paced_.empty()) {
    std::pop_heap(paced_.begin(), paced_.end(), paced_later);
    const PacedPiece p = paced_.back();
    paced_.pop_back();
    const AuxOp& op = aux_[p.aux];
    post_aux_send(p.aux, p.peer, tag_for(kTagExtra, op.seg_id), p.payload,
                  layout_.segment_count(op.chunk, op.seg) * layout_.elem_size(), now, out, p.hdr);
    ++stats_.messages_sent;
    ++paced_in_flight_;
  }
}

}  // namespace skipring
