// Allgather: routes, forwarding, per-peer send queues, the direct allgather.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

bool RingAllreduce::ag_recv_admitted(const RecvOp& r) const {
  // Allgather lands in the user's buffer: only once our reduce-scatter work on that segment no
  // longer reads it (in place) and within the pipeline depth, except where receives are
  // unwindowed (Mode::ag_unwindowed: skip-ahead on).
  // Direct allgather, once the collective is disturbed: chunks complete at different times (a
  // late rank's pieces reach one owner before another) and segments come from every owner, so
  // each is received as soon as it is sent instead of through a window that would advance at
  // the pace of the slowest chunk. Not on the late rank itself: there the final segments would
  // crowd out the partials it still needs.
  return (ag_posted_ < p_.depth || mode_.ag_unwindowed()) && seg_[r.seg_id].input_released;
}

int RingAllreduce::ag_next(int from, int chunk, int around) const {
  int to = (from + 1) % n_;
  if (p_.ring[to] == around) to = (to + 1) % n_;
  return to == chunk ? -1 : to;
}

void RingAllreduce::forward_ag(size_t idx, double now, ActionList* out) {
  const RecvOp& r = recvs_[idx];
  const uint32_t route = wire_route(r.header);
  // Sent by the owner to every rank (direct allgather): nothing to pass on.
  if (route & kRouteDirect) return;
  const int around = route & kRouteAround ? static_cast<int>(route & kRouteLateMask) - 1 : -1;
  if (around == p_.rank) return;  // the late rank: the owner sent it to us directly
  const int to = ag_next(pos_, r.chunk, around);
  if (to < 0) return;  // the owner has it
  send_ag(n_ - 1 + r.step, r.chunk, r.seg, r.header, seg_ptr(p_.recvbuf, r.chunk, r.seg),
          p_.ring[to], now, out);
}

void RingAllreduce::send_ag(int record, int c, int g, uint8_t* hdr, const void* payload, int peer,
                            double now, ActionList* out) {
  if (!mode_.ag_queued()) {
    post_send(Phase::kAllgather, record, c, g, hdr, payload, -1, now, out, false, peer);
    return;
  }
  if (ag_queue_.empty()) {
    ag_queue_.resize(n_);
    ag_in_flight_.assign(n_, 0);
  }
  ag_queue_[peer].push_back(QueuedSend{record, c, g, hdr, payload});
  ++ag_waiting_;
  pump_ag(peer, now, out);
}

void RingAllreduce::pump_ag(int peer, double now, ActionList* out) {
  std::deque<QueuedSend>& q = ag_queue_[peer];
  while (!q.empty() && ag_in_flight_[peer] < kAgInFlight) {
    const QueuedSend qs = q.front();
    q.pop_front();
    --ag_waiting_;
    ++ag_in_flight_[peer];
    post_send(Phase::kAllgather, qs.record, qs.chunk, qs.seg, qs.hdr, qs.payload, -1, now, out,
              false, peer);
    sends_.back().ag_peer = peer;
  }
}

void RingAllreduce::send_own_segment(int g, double now, ActionList* out) {
  const OwnerPiece& o = owner_[g];
  uint8_t* hdr = owner_hdrs_ + g * hdr_area_;
  const void* seg = seg_ptr(p_.recvbuf, pos_, g);
  if (mode_.goes_direct()) {
    // A straggler or late rank around: the final segment goes to every rank from us (one
    // hop instead of n - 1 forwards, none through a late or descheduled rank). All at once: a
    // window on these sends could deadlock against a receiver's window, which takes segments
    // in another order.
    write_header(hdr, Phase::kAllgather, pos_, g, o.acc, 0, kRouteDirect);
    ++stats_.direct_segments;
    for (int k = 1; k < n_; ++k) {
      post_send(Phase::kAllgather, n_ - 2, pos_, g, hdr, seg, -1, now, out, false,
                p_.ring[(pos_ + k) % n_]);
    }
    return;
  }
  // Around the late rank we know of, which gets the segment from us directly: its link then
  // carries its own pieces and nothing of the others' allgather. The choice is ours alone
  // (receivers take allgather segments from any source and forward as the header says).
  const int around = mode_.side_channels ? late_rank_ : -1;
  write_header(hdr, Phase::kAllgather, pos_, g, o.acc, 0,
               around >= 0 ? kRouteAround | static_cast<uint32_t>(around + 1) : 0);
  const int to = ag_next(pos_, pos_, around);
  if (to >= 0) send_ag(n_ - 2, pos_, g, hdr, seg, p_.ring[to], now, out);
  if (around >= 0) send_ag(n_ - 2, pos_, g, hdr, seg, around, now, out);
}

Status RingAllreduce::on_ag_segment(size_t idx, double now, ActionList* out) {
  RecvOp& r = recvs_[idx];
  SKIPRING_RETURN_IF_ERROR(check_header(r.header, r.phase, r.chunk, r.seg, &scratch_set_));
  ag_moved_ = now;
  // Routed around a rank or sent directly: a straggler is around, segments may come in any
  // order from now on (sync_ag_window opens the window).
  if (wire_route(r.header) & (kRouteAround | kRouteDirect)) mode_.ag_rerouted = true;
  if (!scratch_set_.full()) {
    return fail(fmt::format("allgather of chunk {} carries incomplete set {}", r.chunk,
                            scratch_set_.to_string()));
  }
  const uint32_t route = wire_route(r.header);
  if ((route & kRouteAround) &&
      ((route & kRouteLateMask) == 0 || (route & kRouteLateMask) > static_cast<uint32_t>(n_) ||
       static_cast<int>((route & kRouteLateMask) - 1) == p_.ring[r.chunk])) {
    return fail(
        fmt::format("allgather of chunk {} segment {}: bad route {:#x}", r.chunk, r.seg, route));
  }
  --ag_posted_;
  r.state = OpState::kFinished;
  step_record(r).t_end = now;
  forward_ag(idx, now, out);
  post_receives(now, out);
  return Status::kOk;
}
}  // namespace skipring
