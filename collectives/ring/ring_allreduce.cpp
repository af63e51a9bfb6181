// RingAllreduce: construction, start, event dispatch, completion.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

RingAllreduce::RingAllreduce(const RingParams& p, std::vector<uint8_t>* scratch)
    : CoreBase(p.rank, p.seq),
      p_(p),
      layout_(static_cast<int>(p.ring.size()), p.count, dtype_size(p.dtype),
              effective_segment_bytes(p), p.lead_in),
      n_(static_cast<int>(p.ring.size())),
      scratch_(scratch) {
  pos_ = pos_of(p_.rank);
  pred_ = p_.ring[(pos_ - 1 + n_) % n_];
  succ_ = p_.ring[(pos_ + 1) % n_];
  hdr_bytes_ = wire_header_bytes(n_);
  in_place_ = p_.sendbuf == p_.recvbuf;
  mode_.direct = p_.skip && p_.direct_allgather && n_ >= 3;
  scratch_set_ = ContributionSet(n_);
  stats_.seq = p_.seq;
  stats_.bytes = p_.count * layout_.elem_size();
  stats_.skip_threshold_s = p_.skip ? p_.skip_threshold_s : 0;
}

int RingAllreduce::pos_of(int rank) const {
  for (int i = 0; i < n_; ++i) {
    if (p_.ring[i] == rank) return i;
  }
  return -1;
}

int ring_data_tag(uint32_t seq, int seg_id, int kind) {
  return kTagKinds * (2 * seg_id + static_cast<int>(seq & 1)) + kind;
}

int RingAllreduce::tag_for(int kind, int seg_id) const {
  return ring_data_tag(p_.seq, seg_id, kind);
}

uint8_t* RingAllreduce::seg_ptr(void* base, int c, int g) const {
  return static_cast<uint8_t*>(base) + layout_.segment_offset(c, g) * layout_.elem_size();
}

const uint8_t* RingAllreduce::input_ptr(int c, int g) const {
  return seg_ptr(const_cast<void*>(p_.sendbuf), c, g);
}

uint8_t* RingAllreduce::recv_slot_base(int slot) const {
  if (slot < p_.depth) return recv_slots_ + slot * slot_bytes_;
  return overflow_slots_[slot - p_.depth].get();
}

uint8_t* RingAllreduce::send_slot_base(int slot) const {
  if (slot < p_.depth) return send_slots_ + slot * slot_bytes_;
  return overflow_send_[slot - p_.depth].get();
}

uint8_t* RingAllreduce::slot_hdr(uint8_t* base, int slot) const {
  return base + slot * slot_bytes_ + hdr_area_ - hdr_bytes_;
}

uint8_t* RingAllreduce::slot_payload(uint8_t* base, int slot) const {
  return base + slot * slot_bytes_ + hdr_area_;
}

void RingAllreduce::write_header(uint8_t* hdr, Phase phase, int chunk, int seg,
                                 const ContributionSet& set, uint8_t flags, uint32_t route) {
  encode_wire_header(hdr,
                     WireExpect{p_.seq, static_cast<uint8_t>(phase), static_cast<uint32_t>(chunk),
                                static_cast<uint32_t>(seg)},
                     set, flags, route);
}

Status RingAllreduce::check_header(const uint8_t* hdr, Phase phase, int chunk, int seg,
                                   ContributionSet* set) {
  const std::string why =
      decode_wire_header(hdr, n_,
                         WireExpect{p_.seq, static_cast<uint8_t>(phase),
                                    static_cast<uint32_t>(chunk), static_cast<uint32_t>(seg)},
                         set);
  return why.empty() ? Status::kOk : fail(why);
}

double RingAllreduce::next_deadline() const {
  double t = std::numeric_limits<double>::infinity();
  if (!p_.skip || done_ || failed_) return t;
  if (first_sends_.deferred) return kAtNextPoll;
  if (mode_.pred == PredState::kSilent) {
    t = std::min(t, t_pred_heard_ + kBypassFactor * p_.skip_threshold_s);
  }
  for (size_t i = wait_cursor_; i < next_post_; ++i) {
    const RecvOp& r = recvs_[i];
    if (r.phase != Phase::kReduceScatter) break;
    if (r.state == OpState::kPosted && !r.skipped && r.chunk != pos_) {
      t = std::min(t, skip_deadline(r));
    }
    if (r.state == OpState::kPosted && r.skipped && mode_.side_channels &&
        !mode_.bypass_requested) {
      t = std::min(t, r.t_posted + kBypassFactor * piece_threshold(r));
    }
  }
  return std::min(t, ag_stall_deadline());
}

Status RingAllreduce::start(double now, ActionList* out) {
  stats_.start = now;
  wait_clock_ = now;
  t_pred_heard_ = now;
  if (p_.count == 0 || n_ == 1) {
    if (p_.count > 0 && !in_place_) {
      out->push_back(copy_action(p_.recvbuf, p_.sendbuf, p_.count * layout_.elem_size()));
    }
    maybe_done(now, out);
    return Status::kOk;
  }
  init_step_records();
  const size_t ag_recvs = build_receive_sequence();
  carve_scratch(ag_recvs);
  open_control_channels(now, out);
  // Reduce-scatter, step 0 (send_first_pieces): sent now or, with skip-ahead on, once the
  // queued notices are read (late.cpp: first_sends_due).
  if (p_.skip) {
    first_sends_.deferred = true;
  } else {
    send_first_pieces(now, out);
  }
  post_receives(now, out);
  post_to_owner_recvs(now, out);
  resolve_rs_recv(now, out);  // a rank with nothing to receive is done with notices at once
  maybe_done(now, out);
  return Status::kOk;
}

void RingAllreduce::init_step_records() {
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
}

size_t RingAllreduce::build_receive_sequence() {
  // The expected receive sequence, in blocks of `depth / 2` segments: block b holds segments
  // [b·k, (b+1)·k) of step 0, then the same segments of step 1, ... of step n-2. A piece of
  // step s then follows the piece of step s-1 it depends on by k receives, so k pieces are in
  // flight on every link (segment-major order, k = 1, made the posted receives a dependency
  // chain: one piece in flight per link, 2.9 L after a late arrival under SimGrid). Deadlock-
  // free with a bounded window as long as k < depth: the piece a rank produces from its
  // receive i is receive i + k of its successor, inside the successor's window. Reduce-scatter
  // pieces come before allgather pieces, which are step-major (chunk by chunk: they need no
  // slots, so nothing bounds how far a chunk runs ahead).
  size_t ag_recvs = 0;
  int max_segs = 0;
  for (int c = 0; c < n_; ++c) max_segs = std::max(max_segs, layout_.segments(c));
  const int block = std::max(1, p_.depth / 2);
  for (int g0 = 0; g0 < max_segs; g0 += block) {
    for (int s = 0; s < n_ - 1; ++s) {
      const int c = (pos_ - 2 - s + 2 * n_) % n_;
      for (int g = g0; g < std::min(g0 + block, layout_.segments(c)); ++g) {
        recvs_.push_back(RecvOp{Phase::kReduceScatter, s, c, g, layout_.first_segment(c) + g});
      }
    }
  }
  rs_unresolved_ = static_cast<int>(recvs_.size());
  for (int s = 0; s < n_ - 1; ++s) {
    const int c = (pos_ - 1 - s + 2 * n_) % n_;
    for (int g = 0; g < layout_.segments(c); ++g) {
      recvs_.push_back(RecvOp{Phase::kAllgather, s, c, g, layout_.first_segment(c) + g});
      ++ag_recvs;
    }
  }
  return ag_recvs;
}

void RingAllreduce::carve_scratch(size_t ag_recvs) {
  // Scratch: receive slots, send slots, owner slots for to-owner pieces (header + payload, payload
  // 64-byte aligned), then header-only buffers for the starter's sends, the owner's allgather sends
  // and every allgather receive.
  const int start_chunk = (pos_ - 1 + n_) % n_;
  const size_t hdr_area = round_up(hdr_bytes_, 64);
  hdr_area_ = hdr_area;
  const size_t max_seg = std::min(layout_.segment_elems(), layout_.chunk_count(0));
  slot_bytes_ = hdr_area + round_up(max_seg * layout_.elem_size(), 64);
  const int depth = p_.depth;
  const size_t n_hdrs = layout_.segments(start_chunk) + layout_.segments(pos_) + ag_recvs;
  // Owner: one slot per segment of its chunk for pieces coming straight to it (a bounded pool
  // could deadlock: its senders hold their own slots until it accepts).
  const int owner_slots = p_.skip ? layout_.segments(pos_) : 0;
  const size_t need = 64 + (2 * depth + owner_slots) * slot_bytes_ + n_hdrs * hdr_area;
  if (scratch_->size() < need) scratch_->resize(need);
  uint8_t* base = scratch_->data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  recv_slots_ = base;
  send_slots_ = base + depth * slot_bytes_;
  owner_slots_ = base + 2 * depth * slot_bytes_;
  hdr_pool_ = base + (2 * depth + owner_slots) * slot_bytes_;
  for (int i = depth - 1; i >= 0; --i) {
    free_recv_slots_.push_back(i);
    free_send_slots_.push_back(i);
  }
  // Header pool: our step-0 sends, our chunk's allgather sends, every allgather receive.
  first_hdrs_ = hdr_pool_;
  owner_hdrs_ = first_hdrs_ + layout_.segments(start_chunk) * hdr_area;
  uint8_t* next_hdr = owner_hdrs_ + layout_.segments(pos_) * hdr_area;
  for (auto& r : recvs_) {
    if (r.phase != Phase::kAllgather) continue;
    r.header = next_hdr;
    next_hdr += hdr_area;
  }
  seg_.assign(layout_.total_segments(), SegmentState{});
  owner_.resize(layout_.segments(pos_));
  for (auto& o : owner_) {
    o.acc = ContributionSet(n_);
    o.acc.add(p_.rank);
  }
}

void RingAllreduce::open_control_channels(double now, ActionList* out) {
  // Control channels, open for the whole reduce-scatter so that no control message is ever
  // left unread: from the successor (skip notices) always; with skip-ahead on and at least 3
  // ranks also from the predecessor (bypassed pieces) and from the rank two ahead (bypass
  // requests).
  // Every piece we send in the reduce-scatter: the relayed ones and our step-0 ones (those may
  // be sent after relayed ones: send_first_pieces waits for queued notices). fwd-done follows
  // the last of them, after any "bypassed" message.
  for (const RecvOp& r : recvs_) {
    if (r.phase == Phase::kReduceScatter && r.chunk != pos_) ++rs_to_emit_;
  }
  rs_to_emit_ += layout_.segments((pos_ - 1 + n_) % n_);
  ctrl_.open[kBack] = true;
  post_ctrl_recv(kBack, now, out);
  mode_.side_channels = p_.skip && n_ >= 3;
  if (mode_.side_channels) {
    ctrl_.open[kFwd] = ctrl_.open[kFar] = true;
    post_ctrl_recv(kFwd, now, out);
    post_ctrl_recv(kFar, now, out);
    if (rs_to_emit_ == 0) {
      ctrl_.fwd_done_sent = true;
      send_ctrl(kFwd, kFlagFwdDone, -1, -1, now, out);
    }
  }
}

void RingAllreduce::cancel_op(Token t, ActionList* out) {
  out->push_back(cancel_action(t));
  --pending_;
}

void RingAllreduce::cancel_aux(int aux, ActionList* out) {
  cancel_op(make_token(kTokAux, static_cast<size_t>(aux)), out);
  aux_[aux].cancelled = true;
}

Status RingAllreduce::on_recv(Token t, size_t payload_bytes, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (token_kind(t) == kTokAux) {
    if (token_index(t) >= aux_.size()) return fail("completion for an unknown message");
    return on_aux(token_index(t), payload_bytes, now, out);
  }
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokRecv || idx >= recvs_.size() || recvs_[idx].state != OpState::kPosted) {
    if (idx < recvs_.size() && recvs_[idx].state == OpState::kFinished) return Status::kOk;
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
  if (r.phase == Phase::kReduceScatter) {
    r.t_ready = std::max(r.t_posted, t_pred_heard_);
    // Timed only once the predecessor has been heard from in this collective: until then a
    // wait is the ranks' arrival skew (a late predecessor's whole delay), not a step time,
    // and a rank late at every call would raise T until it is never skipped.
    r.timed = mode_.pred_heard_once;
    if (!mode_.pred_heard_once) t_pred_first_ = now;
    mode_.pred_heard_once = true;
    t_pred_heard_ = now;
    mode_.pred = PredState::kHeard;
  }
  --pending_;
  ++stats_.messages_received;
  StepRecord& rec = step_record(r);
  if (rec.segments++ == 0) rec.first_arrival = now;
  rec.last_arrival = now;
  advance_wait_cursor();
  if (r.phase == Phase::kReduceScatter) {
    SKIPRING_RETURN_IF_ERROR(on_ring_piece(idx, now, out));
  } else {
    SKIPRING_RETURN_IF_ERROR(on_ag_segment(idx, now, out));
  }
  post_to_owner_recvs(now, out);
  finish_event(now, out);
  return Status::kOk;
}

StepRecord& RingAllreduce::step_record(const RecvOp& r) {
  return stats_.steps[(r.phase == Phase::kAllgather ? n_ - 1 : 0) + r.step];
}

Status RingAllreduce::on_reduce(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const size_t idx = token_index(t);
  if (token_kind(t) == kTokOwnerReduce) {
    if (idx >= owner_.size() || !owner_[idx].merging) return fail("unknown owner reduction");
    SKIPRING_RETURN_IF_ERROR(on_owner_merged(static_cast<int>(idx), now, out));
  } else {
    if (token_kind(t) != kTokReduce || idx >= recvs_.size() ||
        recvs_[idx].state != OpState::kReducing) {
      return fail("completion for an unknown reduction");
    }
    SKIPRING_RETURN_IF_ERROR(on_piece_reduced(idx, now, out));
  }
  post_to_owner_recvs(now, out);
  finish_event(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_send(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (token_kind(t) == kTokAux) {
    if (token_index(t) >= aux_.size()) return fail("completion for an unknown message");
    return on_aux(token_index(t), 0, now, out);
  }
  const size_t idx = token_index(t);
  if (token_kind(t) != kTokSend || idx >= sends_.size() || sends_[idx].done) {
    return fail("completion for an unknown send");
  }
  SendOp& s = sends_[idx];
  s.done = true;
  --pending_;
  stats_.steps[s.step].transfer_s += now - s.t_posted;
  const SendOp sent = s;  // pump_ag appends to sends_
  if (sent.ag_peer >= 0) {
    --ag_in_flight_[sent.ag_peer];
    pump_ag(sent.ag_peer, now, out);
  }
  if (sent.slot >= 0) {
    free_send_slots_.push_back(sent.slot);
    SKIPRING_RETURN_IF_ERROR(start_reduces(now, out));
  } else if (sent.reads_input) {
    // A send that read our input directly: only now may allgather overwrite it.
    seg_[sent.seg_id].on_input_released();
    post_receives(now, out);
  }
  finish_event(now, out);
  return Status::kOk;
}

Status RingAllreduce::on_time(double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  if (!p_.skip) return Status::kOk;
  if (first_sends_.deferred) {
    if (!first_sends_due()) return Status::kOk;
    send_first_pieces(now, out);
  }
  SKIPRING_RETURN_IF_ERROR(check_skips(now, out));
  post_receives(now, out);                            // each skip lends the receive window a slot
  SKIPRING_RETURN_IF_ERROR(start_reduces(now, out));  // skipped pieces no longer hold up later ones
  finish_event(now, out);
  return Status::kOk;
}

std::string RingAllreduce::describe() const {
  std::string unsent;
  for (size_t i = 0; i < recvs_.size(); ++i) {
    const RecvOp& r = recvs_[i];
    if (r.state == OpState::kFinished) continue;
    unsent +=
        fmt::format(" {}{}:c{}g{}s{}{}", r.phase == Phase::kReduceScatter ? "RS" : "AG",
                    static_cast<int>(r.state), r.chunk, r.seg, r.step, r.skipped ? "skipped" : "");
    if (unsent.size() > 300) break;
  }
  for (const SendOp& sd : sends_) {
    if (!sd.done) unsent += fmt::format(" SEND:seg{}slot{}", sd.seg_id, sd.slot);
  }
  static const char* kAuxNames[] = {"ctrlR", "ctrlS", "ackR", "ackS", "ownerS", "ownerR"};
  for (const AuxOp& a : aux_) {
    if (!a.done && !a.cancelled) {
      unsent +=
          fmt::format(" {}:seg{}ch{}", kAuxNames[static_cast<int>(a.kind)], a.seg_id, a.channel);
    }
  }
  int owner_open = 0;
  for (const auto& o : owner_) owner_open += o.full ? 0 : 1;
  return fmt::format(
      "rank {} pending={} next_post={}/{} rs_unresolved={} rs_to_emit={} open={}{}{} "
      "bypass={} owner_open={} free_recv={} free_send={} reduce_cursor={} awaiting={} |{}",
      p_.rank, pending_, next_post_, recvs_.size(), rs_unresolved_, rs_to_emit_, ctrl_.open[0],
      ctrl_.open[1], ctrl_.open[2], mode_.bypass_successor, owner_open, free_recv_slots_.size(),
      free_send_slots_.size(), reduce_cursor_, awaiting_reduce_, unsent);
}

namespace {
std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (const int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}
}  // namespace

std::string RingAllreduce::describe_wait(double now) const {
  std::string s = fmt::format("all-reduce #{} (ring position {} of {})", p_.seq, pos_, n_);
  if (done_ || recvs_.empty()) return s + ": not waiting for any rank";
  std::vector<std::string> parts;
  // Reduce-scatter: ring pieces from the predecessor not arrived yet.
  int rs_missing = 0, rs_skipped = 0;
  const RecvOp* first = nullptr;
  for (const RecvOp& r : recvs_) {
    if (r.phase != Phase::kReduceScatter) continue;
    if (r.state != OpState::kWaiting && r.state != OpState::kPosted) continue;
    if (seg_[r.seg_id].pred_bypassed) continue;  // it went to the owner instead
    if (first == nullptr) first = &r;
    ++(r.skipped ? rs_skipped : rs_missing);
  }
  if (first != nullptr) {
    std::string p = fmt::format(
        "reduce-scatter step {}: waiting for rank {} (predecessor): {} ring piece(s) from chunk "
        "{} segment {} on not arrived",
        first->step, pred_, rs_missing + rs_skipped, first->chunk, first->seg);
    if (rs_skipped > 0) p += fmt::format(", {} of them skipped", rs_skipped);
    if (!mode_.pred_heard_once && !mode_.pred_bypassing) {
      p += fmt::format("; rank {} has not entered all-reduce #{} for {:.1f} s", pred_, p_.seq,
                       now - stats_.start);
    } else {
      p += fmt::format("; nothing from rank {} for {:.1f} s", pred_, now - t_pred_heard_);
    }
    if (mode_.pred == PredState::kAbsent) p += " (skip-ahead: absent)";
    parts.push_back(p);
  }
  // Our chunk: the inputs not merged yet (a piece held up behind a missing rank lacks the
  // inputs of the ranks before it too).
  std::vector<int> lacking;
  int open = 0;
  for (const ring::OwnerPiece& o : owner_) {
    if (o.full) continue;
    ++open;
    for (int r = 0; r < n_; ++r) {
      if (r != p_.rank && !o.acc.contains(r) &&
          std::find(lacking.begin(), lacking.end(), r) == lacking.end()) {
        lacking.push_back(r);
      }
    }
  }
  if (open > 0) {
    std::sort(lacking.begin(), lacking.end());
    parts.push_back(fmt::format("our chunk {}: {} segment(s) still lack the inputs of rank(s) {}",
                                pos_, open, join_ints(lacking)));
  }
  // Allgather: final segments not arrived, by owner.
  int ag_missing = 0, ag_step = -1;
  std::vector<int> owners;
  for (const RecvOp& r : recvs_) {
    if (r.phase != Phase::kAllgather || r.state >= OpState::kArrived) continue;
    if (ag_missing++ == 0) ag_step = r.step;
    const int owner = p_.ring[r.chunk];
    if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
  }
  if (ag_missing > 0) {
    std::sort(owners.begin(), owners.end());
    parts.push_back(fmt::format(
        "allgather step {}: {} final segment(s) not arrived, of the chunks of rank(s) {}", ag_step,
        ag_missing, join_ints(owners)));
  }
  if (parts.empty()) {
    parts.push_back(fmt::format("{} operation(s) pending (sends or control messages)", pending_));
  }
  for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? ": " : "; ") + parts[i];
  return s;
}

void RingAllreduce::finish_event(double now, ActionList* out) {
  sync_ag_window(now, out);
  maybe_done(now, out);
}

void RingAllreduce::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || pending_ != 0 || !paced_.empty() || ag_waiting_ != 0 ||
      next_post_ != recvs_.size() || awaiting_reduce_ != 0 || ctrl_.any_open()) {
    return;
  }
  for (const auto& o : owner_) {
    if (!o.full) return;
  }
  record_piece_waits();
  complete(now, out);
}

void RingAllreduce::record_piece_waits() {
  piece_waits_.clear();
  if (mode_.pred_heard_once) stats_.pred_first_s = std::max(0.0, t_pred_first_ - stats_.start);
  // A predecessor whose first piece came more than kLearnSkipped thresholds after we started
  // was late to this collective: its later pieces came in the rhythm of its catch-up (below).
  const double learn_limit = kLearnSkipped * p_.skip_threshold_s;
  if (mode_.pred_heard_once && t_pred_first_ - stats_.start > learn_limit) {
    stats_.pred_behind = true;
    return;
  }
  for (const RecvOp& r : recvs_) {
    // Ring pieces this rank could have skipped but did not: their wait (from when the timer
    // started, see skip_deadline) is the normal step time
    // (the owner's pieces also wait for everything upstream, stragglers included). Pieces
    // the predecessor sent straight to the owner never arrive here: they have no wait (counted
    // as "now" since the clock's epoch, they once set a late rank's threshold to hours).
    // A piece we skipped that came on the ring all the same (a late piece) counts too when
    // it came within kLearnSkipped thresholds: without it the threshold could never rise once
    // it is below the normal time (only the waits it let through were learnt), and across
    // hosts it stayed there: Open MPI's TCP transport completes a window of rendezvous pieces
    // together, so healthy pieces come in bursts 15-27 ms apart against a 10.8 ms threshold
    // (4 emulated hosts at 1 Gbit/s, 64 MiB, no straggler: 114-168 skips per call, 1.36x the
    // plain ring). A rank later than that stays skipped, and so does a late rank's first piece
    // (untimed: its wait is the arrival skew).
    // A skipped piece that came later than that, or a first piece that did (above), means the
    // predecessor really was behind in this collective (late or slow): then nothing of it is
    // learnt, because the pieces it sent after catching up waited for its backlog, not for a
    // normal step (their timers restart at each arrival, so they came within 2 thresholds).
    // Learnt, they raised the threshold of a 50 ms late rank's successor on one host (4 ranks,
    // 64 MiB, CMA) from the 5 ms floor to 17-28 ms within four calls, and a threshold that
    // high skips only a window or two of pieces before the rank comes (8-12 skips per call
    // instead of 128; skip/ring 1.01 over 30 calls).
    if (r.phase != Phase::kReduceScatter || r.chunk == pos_ || !r.timed) continue;
    const double wait = std::max(0.0, r.t_arrived - r.t_ready);
    if (!r.skipped || wait <= learn_limit) {
      piece_waits_.push_back(wait);
    } else {
      piece_waits_.clear();
      stats_.pred_behind = true;
      return;
    }
  }
  // The longest normal wait of this collective: on a shared or oversubscribed machine a
  // healthy predecessor is off its core now and then for a time slice, and a threshold below
  // that skips it every time (the 90th percentile did: hundreds of skips per 64 MiB
  // collective on 4 ranks / 2 cores). The timer takes the median over collectives, so one
  // outlier collective does not count either.
  if (!piece_waits_.empty()) {
    stats_.rs_piece_wait_max = *std::max_element(piece_waits_.begin(), piece_waits_.end());
  }
}

}  // namespace skipring
