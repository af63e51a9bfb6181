// Recursive-doubling all-reduce state machine (see recursive_doubling.h for the protocol).
#include "collectives/recursive_doubling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/align.h"

namespace skipring {
namespace {

enum TokenKind : uint32_t { kTokRecv = 0, kTokSend = 1, kTokReduce = 2 };

// Round slots are all pre-allocated (every receive posted at start) up to this much scratch.
constexpr size_t kPrepostBytes = size_t{1} << 20;

Token make_token(TokenKind k, int id) { return pack_token(k, static_cast<size_t>(id)); }
TokenKind token_kind(Token t) { return static_cast<TokenKind>(token_kind_of(t)); }
int token_id(Token t) { return static_cast<int>(token_index_of(t)); }

// Unique within one collective for every ordered pair of ranks (a pair meets in at most one
// round, and fold-in and result go in opposite directions).
int tag_for(uint8_t phase, int round) { return (static_cast<int>(phase) << 6) | round; }

}  // namespace

Status RecursiveDoublingAllreduce::validate(const RingParams& p, std::string* why) {
  return validate_common(p, why);
}

RecursiveDoublingAllreduce::RecursiveDoublingAllreduce(const RingParams& p,
                                                       std::vector<uint8_t>* scratch)
    : CoreBase(p.rank, p.seq), p_(p), n_(static_cast<int>(p.ring.size())), scratch_(scratch) {
  pos_ = static_cast<int>(std::find(p_.ring.begin(), p_.ring.end(), p_.rank) - p_.ring.begin());
  elem_ = dtype_size(p_.dtype);
  bytes_ = p_.count * elem_;
  in_place_ = p_.sendbuf == p_.recvbuf;
  hdr_bytes_ = wire_header_bytes(n_);
  fold_in(n_, pos_);
  acc_ = ContributionSet(n_);
  acc_.add(p_.rank);
  msgs_.resize(rounds_ + 2);
  for (auto& m : msgs_) m.set = ContributionSet(n_);
  stats_.seq = p_.seq;
  stats_.bytes = bytes_;
}

int RecursiveDoublingAllreduce::peer_pos(int id) const {
  if (id == 0 || id == rounds_ + 1) return fold_peer_;
  return pos_of_vrank(vrank_ ^ (1 << (id - 1)));
}

uint8_t RecursiveDoublingAllreduce::phase_of(int id) const {
  if (id == 0) return kRdPhaseFold;
  if (id == rounds_ + 1) return kRdPhaseResult;
  return kRdPhaseRound;
}

std::string RecursiveDoublingAllreduce::what(int id) const {
  if (id == 0) return "fold-in";
  if (id == rounds_ + 1) return "result";
  return fmt::format("round {}", id - 1);
}

std::string RecursiveDoublingAllreduce::describe_wait(double now) const {
  (void)now;
  std::string s = fmt::format("recursive-doubling all-reduce #{}", p_.seq);
  std::string waits;
  for (size_t id = 0; id < msgs_.size(); ++id) {
    const Msg& m = msgs_[id];
    if (!m.recv_posted || m.arrived) continue;
    const int i = static_cast<int>(id);
    waits +=
        fmt::format("{}rank {} ({})", waits.empty() ? "" : ", ", p_.ring[peer_pos(i)], what(i));
  }
  if (!waits.empty()) return s + ": waiting for " + waits;
  return s + fmt::format(": {} operation(s) pending (sends or reductions)", pending_);
}

const void* RecursiveDoublingAllreduce::partial(int k) const {
  if (k > 0) return slot_payload(round_slot(k - 1));
  return has_extra_ ? static_cast<const void*>(slot_payload(fold_slot())) : p_.sendbuf;
}

void RecursiveDoublingAllreduce::write_header(uint8_t* hdr, int id,
                                              const ContributionSet& set) const {
  encode_wire_header(hdr, WireExpect{p_.seq, phase_of(id), static_cast<uint32_t>(round_of(id)), 0},
                     set);
}

Status RecursiveDoublingAllreduce::check_header(const uint8_t* hdr, int id, ContributionSet* set) {
  const std::string why = decode_wire_header(
      hdr, n_, WireExpect{p_.seq, phase_of(id), static_cast<uint32_t>(round_of(id)), 0}, set);
  if (!why.empty()) return fail(fmt::format("{}: {}", what(id), why));
  if (set->empty()) return fail(fmt::format("{}: empty contribution set", what(id)));
  return Status::kOk;
}

Status RecursiveDoublingAllreduce::start(double now, ActionList* out) {
  stats_.start = now;
  if (p_.count == 0 || n_ == 1) {
    if (p_.count > 0 && !in_place_) {
      out->push_back(copy_action(p_.recvbuf, p_.sendbuf, bytes_));
    }
    complete_ = true;
    maybe_done(now, out);
    return Status::kOk;
  }

  // Scratch: two header buffers, then the fold-in slot (partners only) and the round slots
  // (all but extras), each slot a header area (header right-aligned, so header and payload
  // are contiguous: one message without staging) plus the payload, 64-byte aligned.
  hdr_area_ = round_up(hdr_bytes_, 64);
  slot_bytes_ = hdr_area_ + round_up(bytes_, 64);
  if (!extra_) {
    nslots_ = static_cast<int>(
        std::min<size_t>(rounds_, std::max<size_t>(2, kPrepostBytes / slot_bytes_)));
  }
  const size_t nslots = nslots_ + (has_extra_ ? 1 : 0);
  const size_t need = 64 + 2 * hdr_area_ + nslots * slot_bytes_;
  if (scratch_->size() < need) scratch_->resize(need);
  uint8_t* base = scratch_->data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  send_hdr_ = base;
  recv_hdr_ = base + hdr_area_;
  slots_base_ = base + 2 * hdr_area_;

  // Step records in execution order.
  auto add_step = [&](Phase phase, int step, int from_pos, int to_pos) {
    StepRecord r;
    r.phase = phase;
    r.step = step;
    r.chunk = from_pos >= 0 ? 0 : -1;
    r.from = from_pos >= 0 ? p_.ring[from_pos] : -1;
    r.to = to_pos >= 0 ? p_.ring[to_pos] : -1;
    stats_.steps.push_back(r);
    return static_cast<int>(stats_.steps.size()) - 1;
  };
  const int result_id = rounds_ + 1;
  if (extra_) {
    msgs_[0].step = add_step(Phase::kReduceScatter, 0, -1, fold_peer_);
    msgs_[result_id].step = add_step(Phase::kAllgather, 0, fold_peer_, -1);
  } else {
    const int base_step = has_extra_ ? 1 : 0;
    if (has_extra_) msgs_[0].step = add_step(Phase::kReduceScatter, 0, fold_peer_, -1);
    for (int k = 0; k < rounds_; ++k) {
      msgs_[k + 1].step =
          add_step(Phase::kReduceScatter, base_step + k, peer_pos(k + 1), peer_pos(k + 1));
    }
    if (has_extra_) msgs_[result_id].step = add_step(Phase::kAllgather, 0, -1, fold_peer_);
  }

  if (extra_) {
    write_header(send_hdr_, 0, acc_);
    post_send(0, send_hdr_, p_.sendbuf, now, out);
    msgs_[result_id].ready = true;
    msgs_[result_id].t_ready = now;
    // In place, recvbuf is the buffer being sent: receive into it only once the send is done.
    if (!in_place_) post_recv(result_id, recv_hdr_, p_.recvbuf, now, out);
  } else {
    if (has_extra_) {
      msgs_[0].ready = true;
      msgs_[0].t_ready = now;
      post_recv(0, slot_header(fold_slot()), slot_payload(fold_slot()), now, out);
    }
    post_round_receives(now, out);
    if (!has_extra_) start_round(0, now, out);
  }
  maybe_done(now, out);
  return Status::kOk;
}

void RecursiveDoublingAllreduce::post_send(int id, uint8_t* hdr, const void* payload, double now,
                                           ActionList* out) {
  Msg& m = msgs_[id];
  m.send_posted = true;
  m.t_send = now;
  out->push_back(message_action(Action::Kind::kSend, make_token(kTokSend, id),
                                p_.ring[peer_pos(id)], tag_for(phase_of(id), round_of(id)), hdr,
                                hdr_bytes_, payload, bytes_));
  ++pending_;
  ++stats_.messages_sent;
}

void RecursiveDoublingAllreduce::post_recv(int id, uint8_t* hdr, void* payload, double now,
                                           ActionList* out) {
  (void)now;
  Msg& m = msgs_[id];
  m.recv_posted = true;
  out->push_back(message_action(Action::Kind::kRecv, make_token(kTokRecv, id),
                                p_.ring[peer_pos(id)], tag_for(phase_of(id), round_of(id)), hdr,
                                hdr_bytes_, payload, bytes_));
  ++pending_;
}

void RecursiveDoublingAllreduce::post_round_receives(double now, ActionList* out) {
  while (next_recv_ < rounds_) {
    const int k = next_recv_;
    if (k >= nslots_) {
      // The slot last held round j = k - nslots_, whose partial round j + 1 reads (reduce)
      // and sends: free once both are finished.
      const Msg& user = msgs_[k - nslots_ + 2];
      if (!user.reduce_done || !user.send_done) break;
    }
    uint8_t* s = round_slot(k);
    post_recv(k + 1, slot_header(s), slot_payload(s), now, out);
    ++next_recv_;
  }
}

void RecursiveDoublingAllreduce::start_round(int k, double now, ActionList* out) {
  Msg& m = msgs_[k + 1];
  m.ready = true;
  m.t_ready = now;
  // Sends from a scratch slot put the header just before the payload (its received header
  // has been parsed already); a send from the user's input has its header apart.
  uint8_t* hdr;
  if (k > 0) {
    hdr = slot_header(round_slot(k - 1));
  } else if (has_extra_) {
    hdr = slot_header(fold_slot());
  } else {
    hdr = send_hdr_;
  }
  write_header(hdr, k + 1, acc_);
  post_send(k + 1, hdr, partial(k), now, out);
}

Status RecursiveDoublingAllreduce::issue_reduce(int id, void* dst, const void* a, const void* b,
                                                double now, ActionList* out) {
  Msg& m = msgs_[id];
  if (m.set.overlaps(acc_)) {
    return fail(fmt::format("{} from rank {}: contribution set {} overlaps accumulated set {}",
                            what(id), p_.ring[peer_pos(id)], m.set.to_string(), acc_.to_string()));
  }
  acc_.merge(m.set);
  if (id == rounds_ && !acc_.full()) {
    return fail(fmt::format("last round would complete with set {}", acc_.to_string()));
  }
  m.reduce_issued = true;
  m.t_reduce = now;
  out->push_back(reduce_action(make_token(kTokReduce, id), dst, a, b, p_.count, p_.dtype, p_.op));
  ++pending_;
  return Status::kOk;
}

Status RecursiveDoublingAllreduce::advance(double now, ActionList* out) {
  if (extra_) return Status::kOk;
  if (has_extra_) {
    const Msg& f = msgs_[0];
    if (!f.arrived) return Status::kOk;
    if (!f.reduce_issued) {
      // The extra sits at the lower position: a = its input, b = ours. In place into the slot.
      void* fold = slot_payload(fold_slot());
      return issue_reduce(0, fold, fold, p_.sendbuf, now, out);
    }
    if (!f.reduce_done) return Status::kOk;
  }
  if (next_reduce_ >= rounds_) return Status::kOk;
  const int k = next_reduce_;
  const Msg& m = msgs_[k + 1];
  if (!m.arrived || (k > 0 && !msgs_[k].reduce_done)) return Status::kOk;
  const bool last = k == rounds_ - 1;
  // recvbuf is written only by the last round; in place without a fold-in, round 0 sent
  // from it, and it must stay untouched until that send completes.
  if (last && in_place_ && !has_extra_ && !msgs_[1].send_done) return Status::kOk;
  void* received = slot_payload(round_slot(k));
  void* dst = last ? p_.recvbuf : received;
  const void* mine = partial(k);
  const bool lower = (vrank_ & (1 << k)) == 0;
  ++next_reduce_;
  return issue_reduce(k + 1, dst, lower ? mine : received, lower ? received : mine, now, out);
}

Status RecursiveDoublingAllreduce::on_recv(Token t, size_t payload_bytes, double now,
                                           ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const int id = token_id(t);
  if (token_kind(t) != kTokRecv || id > rounds_ + 1 || !msgs_[id].recv_posted ||
      msgs_[id].arrived) {
    return fail("completion for an unknown receive");
  }
  Msg& m = msgs_[id];
  if (payload_bytes != bytes_) {
    return fail(fmt::format("{}: {} payload bytes, expected {}", what(id), payload_bytes, bytes_));
  }
  m.arrived = true;
  --pending_;
  ++stats_.messages_received;
  StepRecord& rec = stats_.steps[m.step];
  rec.segments = 1;
  rec.first_arrival = rec.last_arrival = now;
  if (m.ready) rec.wait_s += std::max(0.0, now - m.t_ready);

  const uint8_t* hdr;
  if (id == rounds_ + 1) {
    hdr = recv_hdr_;
  } else if (id == 0) {
    hdr = slot_header(fold_slot());
  } else {
    hdr = slot_header(round_slot(id - 1));
  }
  SKIPRING_RETURN_IF_ERROR(check_header(hdr, id, &m.set));
  if (id == rounds_ + 1) {
    if (!m.set.full()) {
      return fail(fmt::format("result carries incomplete set {}", m.set.to_string()));
    }
    complete_ = true;
  } else {
    SKIPRING_RETURN_IF_ERROR(advance(now, out));
  }
  maybe_done(now, out);
  return Status::kOk;
}

Status RecursiveDoublingAllreduce::on_reduce(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const int id = token_id(t);
  if (token_kind(t) != kTokReduce || id > rounds_ || !msgs_[id].reduce_issued ||
      msgs_[id].reduce_done) {
    return fail("completion for an unknown reduction");
  }
  Msg& m = msgs_[id];
  m.reduce_done = true;
  --pending_;
  stats_.steps[m.step].reduce_s += now - m.t_reduce;
  if (id < rounds_) {
    start_round(id, now, out);  // fold-in done -> round 0; round id-1 done -> round id
  } else {
    // Last round: recvbuf holds the result.
    complete_ = true;
    if (has_extra_) {
      write_header(send_hdr_, rounds_ + 1, acc_);
      post_send(rounds_ + 1, send_hdr_, p_.recvbuf, now, out);
    }
  }
  post_round_receives(now, out);
  SKIPRING_RETURN_IF_ERROR(advance(now, out));
  maybe_done(now, out);
  return Status::kOk;
}

Status RecursiveDoublingAllreduce::on_send(Token t, double now, ActionList* out) {
  if (failed_) return Status::kErrProtocol;
  const int id = token_id(t);
  if (token_kind(t) != kTokSend || id > rounds_ + 1 || !msgs_[id].send_posted ||
      msgs_[id].send_done) {
    return fail("completion for an unknown send");
  }
  Msg& m = msgs_[id];
  m.send_done = true;
  --pending_;
  stats_.steps[m.step].transfer_s += now - m.t_send;
  if (extra_) {
    if (id == 0 && in_place_) post_recv(rounds_ + 1, recv_hdr_, p_.recvbuf, now, out);
  } else if (id >= 1 && id <= rounds_) {
    post_round_receives(now, out);
    SKIPRING_RETURN_IF_ERROR(advance(now, out));
  }
  maybe_done(now, out);
  return Status::kOk;
}

void RecursiveDoublingAllreduce::maybe_done(double now, ActionList* out) {
  if (done_ || failed_ || !complete_ || pending_ != 0) return;
  complete(now, out);
}

}  // namespace skipring
