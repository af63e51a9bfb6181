// Rabenseifner all-reduce schedule (see rabenseifner.h).
#include "collectives/rabenseifner.h"

#include <algorithm>

namespace skipring {

Status RabenseifnerAllreduce::validate(const RingParams& p, std::string* why) {
  // Tags are phase << 6 | round with round <= log2(n).
  if (p.tag_span < 1024) return *why = "tag space too small", Status::kErrArg;
  return validate_common(p, why);
}

size_t RabenseifnerAllreduce::block_offset(size_t count, int p, int b) {
  const size_t q = count / p, r = count % p;
  return static_cast<size_t>(b) * q + std::min<size_t>(b, r);
}

RabenseifnerAllreduce::RabenseifnerAllreduce(const RingParams& p, std::vector<uint8_t>* scratch)
    : ScheduleCore(p, scratch) {
  fold_in(n_, pos_);
}

size_t RabenseifnerAllreduce::scratch_bytes() const {
  if (extra_ || n_ == 1) return 0;
  return (has_extra_ ? 2 : 1) * p_.count * elem_ + 64;
}

Status RabenseifnerAllreduce::build(uint8_t* scratch) {
  const size_t count = p_.count;
  auto* out = static_cast<uint8_t*>(p_.recvbuf);
  const auto* in = static_cast<const uint8_t*>(p_.sendbuf);
  if (count == 0) return Status::kOk;
  if (n_ == 1) {
    add_copy(out, in, count, {});
    return Status::kOk;
  }
  const ContributionSet full = full_set();
  const int L = rounds_;
  if (extra_) {
    const int s0 = add_step(Phase::kReduceScatter, 0, -1, -1, fold_peer_);
    const int s1 = add_step(Phase::kAllgather, 0, 0, fold_peer_, -1);
    const int s = add_send(fold_peer_, kRabPhaseRs, L, L, 0, in, count, 0, {}, s0);
    // In place, recvbuf is what is being sent: receive into it once the send is done.
    add_recv(fold_peer_, kRabPhaseAg, L, L, 0, out, count, new_var(), &full, {in_place_ ? s : -1},
             s1);
    return Status::kOk;
  }
  uint8_t* fold = has_extra_ ? scratch : nullptr;
  uint8_t* tmp = scratch + (has_extra_ ? count * elem_ : 0);
  const uint8_t* cur = in;  // holds the partial of the current range
  int cur_var = 0;
  int last = -1;  // the operation that produced the current partial
  int step_no = 0;
  if (has_extra_) {
    const int st = add_step(Phase::kReduceScatter, step_no++, 0, fold_peer_, -1);
    const int fv = new_var();
    const int r = add_recv(fold_peer_, kRabPhaseRs, L, L, 0, fold, count, fv, nullptr, {}, st);
    const int ov = new_var();
    // a = the extra's input (the lower ring position), b = ours; in place into the slot.
    last = add_reduce(fold, fold, in, count, fv, 0, ov, nullptr, {r}, st);
    cur = fold;
    cur_var = ov;
  }
  auto off = [&](int b) { return block_offset(count, pow2_, b); };
  int lo = 0, hi = pow2_;
  size_t tmp_off = 0;
  std::vector<int> rs_send(L), give_lo(L), give_hi(L);
  for (int k = 0; k < L; ++k) {
    const int mask = 1 << k;
    const int ppos = pos_of_vrank(vrank_ ^ mask);
    const bool lower = (vrank_ & mask) == 0;
    const int mid = lo + (hi - lo) / 2;
    const int klo = lower ? lo : mid, khi = lower ? mid : hi;
    const int glo = lower ? mid : lo, ghi = lower ? hi : mid;
    const size_t keep_off = off(klo), keep_n = off(khi) - off(klo);
    const size_t give_off = off(glo), give_n = off(ghi) - off(glo);
    const int st = add_step(Phase::kReduceScatter, step_no++, -1, ppos, ppos);
    rs_send[k] =
        add_send(ppos, kRabPhaseRs, k, k, 0, cur + give_off * elem_, give_n, cur_var, {last}, st);
    uint8_t* slot = tmp + tmp_off * elem_;
    tmp_off += keep_n;
    const int rv = new_var();
    const int r = add_recv(ppos, kRabPhaseRs, k, k, 0, slot, keep_n, rv, nullptr, {}, st);
    const uint8_t* mine = cur + keep_off * elem_;
    const int ov = new_var();
    // Canonical order: a = the lower virtual rank's partial. The kept half goes straight to
    // recvbuf; in place it overwrites only the half this round does not send.
    last = add_reduce(out + keep_off * elem_, lower ? mine : slot, lower ? slot : mine, keep_n,
                      lower ? cur_var : rv, lower ? rv : cur_var, ov, k == L - 1 ? &full : nullptr,
                      {r, last}, st);
    cur = out;
    cur_var = ov;
    lo = klo;
    hi = khi;
    give_lo[k] = glo;
    give_hi[k] = ghi;
  }
  // Allgather: the range grows back; its data is complete once the last reduction and every
  // allgather receive so far have finished. A piece is received into the region the matching
  // reduce-scatter round sent from: only after that send has completed.
  std::vector<int> have = {last};
  for (int k = L - 1; k >= 0; --k) {
    const int ppos = pos_of_vrank(vrank_ ^ (1 << k));
    const int st = add_step(Phase::kAllgather, L - 1 - k, -1, ppos, ppos);
    add_send(ppos, kRabPhaseAg, k, k, 0, out + off(lo) * elem_, off(hi) - off(lo), cur_var, have,
             st);
    const size_t g_off = off(give_lo[k]), g_n = off(give_hi[k]) - g_off;
    have.push_back(add_recv(ppos, kRabPhaseAg, k, k, 0, out + g_off * elem_, g_n, new_var(), &full,
                            {rs_send[k]}, st));
    lo = std::min(lo, give_lo[k]);
    hi = std::max(hi, give_hi[k]);
  }
  if (has_extra_) {
    const int st = add_step(Phase::kAllgather, L, -1, -1, fold_peer_);
    add_send(fold_peer_, kRabPhaseAg, L, L, 0, out, count, cur_var, have, st);
  }
  return Status::kOk;
}

}  // namespace skipring
