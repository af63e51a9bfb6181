// Recursive-doubling all-reduce for small messages, as an I/O-free state machine driven like
// the ring (collective_core.h): log2(p) + 2 sequential steps instead of the ring's 2(n-1).
//
// Numbering: ranks are ring positions (position i is communicator rank ring[i]). With p the
// largest power of two <= n and e = n - p, the positions 0, 2, ..., 2e-2 are "extra": each
// sends its whole input to its right neighbour (the fold-in) and later receives the final
// result from it. The other p positions take virtual ranks v = pos / 2 (pos < 2e, odd) or
// v = pos - e, and run log2(p) exchange rounds: in round k, v swaps its current partial with
// v ^ 2^k and both reduce the two. Neighbouring ring positions are paired first, so the early
// rounds (and the fold-in) stay close in the ring order.
//
// Exactness: every reduction has a canonical operand order, a = the operand from the lower
// ring position, b = the higher (fold-in: a = the extra's input, b = the partner's; round k:
// a = the partial of the side with bit k of v clear). Both sides of an exchange run the same
// kernel on the same operands in the same order, so all p ranks hold the same bits after
// every round, for floats and NaN payloads too, and the extra ranks receive a copy.
//
// Every message carries a WireHeader (ring_allreduce.h) with the contribution set of what its
// payload sums; phase is kRdPhase*, chunk the round index. A received set is merged only when
// disjoint from the rank's accumulated set (checked when the reduction is issued, in round
// order, so an early message of a later round is checked against everything before it); the
// final result must carry the full set. Anything else is a protocol error.
//
// Buffers, no copies: round 0 sends straight from the user's input (or from the fold-in
// slot); round k receives into scratch slot k and reduces into that same slot (dst == b),
// which round k + 1 then sends from; only the last round reduces into recvbuf, after the
// round-0 send from recvbuf (in place) has completed. Receives for all rounds are posted up
// front while the slots fit in a fixed budget, otherwise slots are reused once both the
// reduction and the send reading them have finished. Scratch: (rounds + 1) slots of
// header + payload at most.
//
// Stats (one StepRecord per step, in execution order): the fold-in (kReduceScatter, step 0,
// from the extra on the partner, to the partner on the extra), each exchange round
// (kReduceScatter, from == to == the round's partner, step numbered after the fold-in), and
// the result delivery (kAllgather, step 0). chunk is 0 for steps that receive the (whole)
// buffer, -1 otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/contribution_set.h"
#include "collectives/ring_allreduce.h"
#include "common/phases.h"
#include "common/status.h"
#include "common/step_stats.h"

namespace skipring {

// The fold-in numbering shared by recursive doubling and Rabenseifner (see above): p the
// largest power of two <= n, e = n - p extras at the even positions below 2e, virtual ranks for
// the others. A base of the cores that use it; fold_in() fills it in for (n, pos).
class FoldInLayout {
 public:
  // log2 of the largest power of two <= n.
  int rounds() const { return rounds_; }
  // True when this rank only folds its input in and receives the result.
  bool extra() const { return extra_; }

 protected:
  void fold_in(int n, int pos) {
    while (2 * pow2_ <= n) {
      pow2_ *= 2;
      ++rounds_;
    }
    extras_ = n - pow2_;
    if (pos < 2 * extras_) {
      if (pos % 2 == 0) {
        extra_ = true;
        fold_peer_ = pos + 1;
      } else {
        has_extra_ = true;
        fold_peer_ = pos - 1;
        vrank_ = pos / 2;
      }
    } else {
      vrank_ = pos - extras_;
    }
  }
  int pos_of_vrank(int v) const { return v < extras_ ? 2 * v + 1 : v + extras_; }

  int pow2_ = 1;
  int rounds_ = 0;
  int extras_ = 0;
  bool extra_ = false;      // this position folds in and receives the result
  bool has_extra_ = false;  // this position is an extra's partner
  int fold_peer_ = -1;      // position of the extra / of the partner
  int vrank_ = -1;
};

// WireHeader.phase values of recursive-doubling messages: kRdPhase* (common/phases.h).

class RecursiveDoublingAllreduce final : public CoreBase, public FoldInLayout {
 public:
  // Checks the parameters that matter here (ring is a permutation containing rank, op valid
  // on dtype, buffers); segment_bytes and depth are ignored.
  static Status validate(const RingParams& p, std::string* why);

  // `scratch` is reused across collectives; resized as needed, must outlive this object.
  RecursiveDoublingAllreduce(const RingParams& p, std::vector<uint8_t>* scratch);

  Status start(double now, ActionList* out) override;
  Status on_recv(Token t, size_t payload_bytes, double now, ActionList* out) override;
  Status on_send(Token t, double now, ActionList* out) override;
  Status on_reduce(Token t, double now, ActionList* out) override;
  // The watchdog's text: the posted receives not arrived, by peer and round.
  std::string describe_wait(double now) const override;

 private:
  // Message ids: 0 = fold-in, 1 + k = exchange round k, rounds_ + 1 = result delivery.
  struct Msg {
    bool recv_posted = false;
    bool arrived = false;
    bool send_posted = false;
    bool send_done = false;
    bool reduce_issued = false;
    bool reduce_done = false;
    bool ready = false;  // our side is ready for the incoming data (for the wait time)
    double t_ready = 0;
    double t_send = 0;
    double t_reduce = 0;
    int step = -1;        // index of the StepRecord
    ContributionSet set;  // what the received payload sums
  };

  int peer_pos(int id) const;
  uint8_t phase_of(int id) const;
  int round_of(int id) const { return id >= 1 && id <= rounds_ ? id - 1 : 0; }
  std::string what(int id) const;
  uint8_t* slot(int i) const { return slots_base_ + static_cast<size_t>(i) * slot_bytes_; }
  uint8_t* slot_header(uint8_t* s) const { return s + hdr_area_ - hdr_bytes_; }
  uint8_t* slot_payload(uint8_t* s) const { return s + hdr_area_; }
  uint8_t* fold_slot() const { return slot(0); }
  uint8_t* round_slot(int k) const { return slot((has_extra_ ? 1 : 0) + k % nslots_); }
  const void* partial(int k) const;
  void write_header(uint8_t* hdr, int id, const ContributionSet& set) const;
  Status check_header(const uint8_t* hdr, int id, ContributionSet* set);
  void post_send(int id, uint8_t* hdr, const void* payload, double now, ActionList* out);
  void post_recv(int id, uint8_t* hdr, void* payload, double now, ActionList* out);
  void post_round_receives(double now, ActionList* out);
  void start_round(int k, double now, ActionList* out);
  Status issue_reduce(int id, void* dst, const void* a, const void* b, double now, ActionList* out);
  Status advance(double now, ActionList* out);
  void maybe_done(double now, ActionList* out);

  RingParams p_;
  int n_;
  int pos_;
  size_t elem_;
  size_t bytes_;
  bool in_place_;
  std::vector<uint8_t>* scratch_;
  size_t hdr_bytes_;
  size_t hdr_area_ = 0;
  size_t slot_bytes_ = 0;
  int nslots_ = 0;               // round slots
  uint8_t* send_hdr_ = nullptr;  // header of a send straight from a user buffer
  uint8_t* recv_hdr_ = nullptr;  // header of the result received straight into recvbuf
  uint8_t* slots_base_ = nullptr;

  std::vector<Msg> msgs_;
  int next_recv_ = 0;    // next exchange round whose receive is not posted
  int next_reduce_ = 0;  // next exchange round whose reduction is not issued
  bool complete_ = false;
  ContributionSet acc_;  // what our current partial sums

  int pending_ = 0;  // receives + sends + reductions not finished
};

}  // namespace skipring
