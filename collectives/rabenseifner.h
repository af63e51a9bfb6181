// Rabenseifner's all-reduce for any number of ranks: reduce-scatter by recursive halving, then
// allgather by recursive doubling, 2 log2(p) steps moving 2 (p - 1) / p of the buffer (the
// ring's bandwidth in log2 p instead of n - 1 steps). Runs on ScheduleCore
// (ring_collectives.h).
//
// Numbering as in recursive doubling (recursive_doubling.h): p = the largest power of two
// <= n, e = n - p; ring positions 0, 2, ..., 2e - 2 are "extra": each sends its whole input to
// its right neighbour first (fold-in: a = the extra's input, b = the partner's) and receives
// the result from it at the end. The other p positions take virtual ranks v (pos / 2 for
// pos < 2e, else pos - e). The buffer is cut in p blocks (even split of count: the first
// count % p one element larger; empty blocks when count < p).
//
// Reduce-scatter round k = 0 .. L-1 (L = log2 p): partner v ^ 2^k (neighbours first, where the
// messages are largest). Both hold the same range of blocks; the side with bit k clear keeps the
// lower half, the other the upper half; each sends the half it gives away and reduces the half
// it keeps with a = the lower virtual rank's partial, b = the higher's. After L rounds v holds
// block bitreverse_L(v), reduced once, in a canonical order. Allgather rounds k = L-1 .. 0
// exchange the ranges back, copied straight into recvbuf: every rank ends with the same bits.
//
// Messages carry WireHeaders (phase kRabPhaseRs / kRabPhaseAg, chunk = round, tag
// phase << 6 | round; the fold-in and the result use round L); reductions check that their
// operands' contribution sets are disjoint, the last reduce-scatter round must complete the full
// set and every allgather piece must carry it.
//
// Buffers: the kept half is reduced straight into recvbuf (round 0 reads the input: sendbuf, or
// the fold-in slot); received halves land in scratch slots (all posted up front, count elements
// in total); allgather pieces are received into recvbuf once the reduce-scatter send that read
// that region has completed. Scratch: count elements (+ count for the fold-in slot).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/recursive_doubling.h"
#include "collectives/ring_collectives.h"
#include "common/phases.h"

namespace skipring {

// WireHeader.phase values: kRabPhaseRs / kRabPhaseAg (common/phases.h).

class RabenseifnerAllreduce final : public ScheduleCore, public FoldInLayout {
 public:
  static Status validate(const RingParams& p, std::string* why);
  RabenseifnerAllreduce(const RingParams& p, std::vector<uint8_t>* scratch);

  // Element offset of block b of p blocks over count elements.
  static size_t block_offset(size_t count, int p, int b);

 private:
  size_t scratch_bytes() const override;
  Status build(uint8_t* scratch) override;
};

}  // namespace skipring
