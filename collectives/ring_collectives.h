// Collectives other than all-reduce on the same I/O-free engine (collective_core.h): ring
// reduce-scatter, ring allgather, pipelined chain broadcast and pipelined chain reduce. All of
// them, and Rabenseifner's all-reduce (rabenseifner.h), are written as a static per-rank
// schedule: a list of sends, receives, reductions and copies with dependencies, run by
// ScheduleCore. Without skip-ahead, the schedule of every rank is known in advance, so a
// dataflow graph is all a collective needs; the core posts an operation as soon as what it
// depends on has finished.
//
// Conventions shared by the cores here (RingParams as for all-reduce, plus CollParams):
//  - Blocks (reduce-scatter, allgather) are indexed by communicator rank: block r is rank r's
//    block, at element offset sum(block_counts[0..r)). block_counts empty = `count` split
//    evenly (the first count % n blocks one element larger).
//  - sendbuf == recvbuf means in place.
//  - Every message carries a WireHeader with the contribution set of its payload. Reductions
//    merge sets only when they are disjoint; final results and copied blocks must carry the
//    exact expected set. Anything else is a protocol error.
//  - Messages between the same pair of ranks with the same tag are posted in schedule order on
//    both sides (MPI's non-overtaking rule then matches them), so a tag per phase and round is
//    enough even with many segments; headers check (seq, phase, chunk, segment) on arrival.
//  - Canonical operand order (a = the partial from upstream, b = the rank's own input) so that
//    results do not depend on timing: bitwise identical on every rank, run after run.
//
// Costs (alpha-beta, seed 001; S bytes, n ranks, K segments): reduce-scatter and allgather
// (n - 1)(a + S/n b); broadcast and reduce along a chain of n ranks (A = n - 1 receivers) with
// K segments (A - 1 + K)(a + S/K b), i.e. T = t + (A - 1) t / K for t = a + S b (seed 003).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/contribution_set.h"
#include "collectives/ring_allreduce.h"
#include "common/phases.h"
#include "common/status.h"
#include "common/step_stats.h"

namespace skipring {

// WireHeader.phase values: kRsPhase, kAgPhase, kBcastPhase, kReducePhase (common/phases.h).

// What the non-all-reduce collectives need beyond RingParams.
struct CollParams {
  int root = 0;  // communicator rank: broadcast source, reduce destination
  // Reduce-scatter / allgather: elements per block, one per communicator rank, summing to
  // RingParams::count; empty = even split.
  std::vector<size_t> block_counts;
  // Reduce-scatter: when set, the rank's own block goes here (a buffer of its block's size)
  // instead of recvbuf + the block's offset; recvbuf is then unused and must not alias it.
  void* result = nullptr;
};

// Element offsets of the blocks: offsets[r] .. offsets[r + 1] is block r (size n + 1).
std::vector<size_t> block_offsets(const std::vector<size_t>& block_counts, size_t count, int n);

// Runs a per-rank schedule of operations (see the file comment). Subclasses size their
// payload scratch and append operations in build(); everything else is common.
class ScheduleCore : public CoreBase {
 public:
  Status start(double now, ActionList* out) override;
  Status on_recv(Token t, size_t payload_bytes, double now, ActionList* out) override;
  Status on_send(Token t, double now, ActionList* out) override;
  Status on_reduce(Token t, double now, ActionList* out) override;
  std::string describe() const override;

  // Operations in the schedule (after start).
  size_t operations() const { return ops_.size(); }

 protected:
  ScheduleCore(const RingParams& p, std::vector<uint8_t>* scratch);

  // Bytes of payload scratch build() needs (64-byte aligned base).
  virtual size_t scratch_bytes() const = 0;
  // Appends the operations. `scratch` holds scratch_bytes() bytes.
  virtual Status build(uint8_t* scratch) = 0;

  // --- schedule builder (positions are ring positions; deps < 0 are ignored) ---
  using Deps = std::vector<int>;
  // A new contribution-set variable, empty or holding `init`. Variable 0 is {this rank}.
  int new_var();
  int new_var(const ContributionSet& init);
  int add_step(Phase phase, int step, int chunk, int from_pos, int to_pos);
  int add_send(int peer_pos, uint8_t phase, int round, uint32_t chunk, uint32_t segment,
               const void* payload, size_t elems, int set_var, const Deps& deps, int step = -1);
  // expect: the exact set the message must carry (nullptr: any non-empty set).
  int add_recv(int peer_pos, uint8_t phase, int round, uint32_t chunk, uint32_t segment,
               void* payload, size_t elems, int out_var, const ContributionSet* expect,
               const Deps& deps, int step = -1);
  // dst = a op b; the sets of a and b must be disjoint; out = their union (== *expect if given).
  int add_reduce(void* dst, const void* a, const void* b, size_t elems, int var_a, int var_b,
                 int out_var, const ContributionSet* expect, const Deps& deps, int step = -1);
  int add_copy(void* dst, const void* src, size_t elems, const Deps& deps);
  bool op_finished(int id) const { return ops_[static_cast<size_t>(id)].finished; }

  ContributionSet full_set() const;
  ContributionSet single(int rank) const;

  RingParams p_;
  int n_;
  int pos_;
  size_t elem_;
  bool in_place_;

 private:
  enum class Kind : uint8_t { kSend, kRecv, kReduce, kCopy };
  struct Op {
    Kind kind;
    int peer = -1;  // communicator rank
    int tag = 0;
    uint8_t phase = 0;
    uint32_t chunk = 0, segment = 0;
    void* dst = nullptr;      // recv payload, reduce / copy destination
    const void* a = nullptr;  // send payload, reduce a, copy source
    const void* b = nullptr;
    size_t elems = 0;
    int var_a = -1, var_b = -1, out_var = -1;
    bool has_expect = false;
    ContributionSet expect;
    int step = -1;
    int unmet = 0;          // deps not finished + channel predecessor not posted
    int channel_next = -1;  // next op on the same (kind, peer, tag) channel
    std::vector<int> dependents;
    bool issued = false, finished = false;
    double t_issue = 0;
  };

  int add_op(Op op, const Deps& deps);
  // The next index of a message on the channel (send or receive, peer, phase): its tag's low
  // bits in the segmented schedules (ring_collectives.cpp, tag_for).
  int channel_index(bool send, int peer_pos, uint8_t phase);
  int tag_bits_ = 6;  // low tag bits per phase (ring_collectives.cpp, low_tag_bits)
  uint8_t* header_of(int id) { return hdrs_.data() + static_cast<size_t>(id) * hdr_bytes_; }
  Status issue(int id, double now, ActionList* out);
  Status finish(int id, double now, ActionList* out);
  Status run_ready(double now, ActionList* out);
  void maybe_done(double now, ActionList* out);
  std::string what(const Op& op) const;

  std::vector<uint8_t>* scratch_;
  size_t hdr_bytes_;
  std::vector<uint8_t> hdrs_;
  std::vector<Op> ops_;
  std::vector<ContributionSet> vars_;
  std::vector<int> ready_;
  std::vector<std::pair<uint64_t, int>> channels_;
  std::map<uint64_t, int> channel_count_;
  int pending_ = 0;  // ops not finished
  bool started_ = false;
};

// The four collectives below: their CollParams and blocks moved in segments of segment_bytes.
class SegmentedSchedule : public ScheduleCore {
 protected:
  SegmentedSchedule(const RingParams& p, const CollParams& c, std::vector<uint8_t>* scratch);
  // The checks in order: the layout (with the op when `reduces`), then the block counts
  // (`blocked`) or the root, then a segment of at least one element.
  static Status validate_segmented(const RingParams& p, const CollParams& c, bool reduces,
                                   bool blocked, std::string* why);
  // Elements of segment g of a block of `elems` elements.
  size_t seg_len(size_t elems, size_t g) const {
    return std::min(seg_elems_, elems - std::min(elems, g * seg_elems_));
  }

  CollParams c_;
  size_t seg_elems_;
};

// Ring reduce-scatter: n - 1 steps; in step s, ring position i sends its partial of block
// ring[i - s - 1] to position i + 1 (segment by segment, each segment forwarded as soon as it
// is reduced) and reduces the piece of block ring[i - s - 2] from position i - 1 with its own
// input. Block ring[c]'s chain runs c + 1, c + 2, ..., c, so its result is
// ((x[c+1] op x[c+2]) op ...) op x[c], in ring positions. The result is the rank's own block,
// in CollParams::result or recvbuf + its offset. In place (sendbuf == recvbuf, no result):
// only the own block of recvbuf is overwritten. Scratch: about (n - 1) / n of the buffer.
class RingReduceScatter final : public SegmentedSchedule {
 public:
  static Status validate(const RingParams& p, const CollParams& c, std::string* why);
  RingReduceScatter(const RingParams& p, const CollParams& c, std::vector<uint8_t>* scratch);

  // Elements at the start of the rank's own block that hold their result already (the last
  // step's reductions finished in segment order so far): the late path (late_chain.h) folds and
  // sends those while the rest of the reduce-scatter runs. Nothing reads them again.
  size_t final_prefix_elems();

 private:
  size_t scratch_bytes() const override;
  Status build(uint8_t* scratch) override;
  std::vector<size_t> off_;
  // The own block's result, segment by segment: the operation that writes it and its elements.
  std::vector<std::pair<int, size_t>> out_ops_;
  size_t out_done_ = 0, out_done_elems_ = 0;
};

// Ring allgather: rank r's block is sendbuf + offset(r) (its other blocks are not read); every
// rank ends with all blocks in recvbuf. n - 1 steps: position i forwards the block of position
// i - s to i + 1, segment by segment, received straight into recvbuf. No scratch.
class RingAllgather final : public SegmentedSchedule {
 public:
  static Status validate(const RingParams& p, const CollParams& c, std::string* why);
  RingAllgather(const RingParams& p, const CollParams& c, std::vector<uint8_t>* scratch);

 private:
  size_t scratch_bytes() const override { return 0; }
  Status build(uint8_t* scratch) override;
  std::vector<size_t> off_;
};

// Pipelined chain broadcast from the root along the ring (root, root + 1, ..., root - 1 in ring
// positions), the buffer cut in K segments of segment_bytes: T = t + (n - 2) t / K (seed 003,
// A = n - 1 receivers).
// The root sends from sendbuf (and copies it to recvbuf when they differ); the others receive
// into recvbuf and forward from it. No scratch.
class ChainBroadcast final : public SegmentedSchedule {
 public:
  static Status validate(const RingParams& p, const CollParams& c, std::string* why);
  ChainBroadcast(const RingParams& p, const CollParams& c, std::vector<uint8_t>* scratch);

 private:
  size_t scratch_bytes() const override { return 0; }
  Status build(uint8_t* scratch) override;
};

// Pipelined chain reduce to the root along the ring: root + 1 sends its input, each next rank
// reduces (a = the partial from upstream, b = its own input) and forwards, the root reduces
// last into recvbuf: ((x[root+1] op x[root+2]) op ...) op x[root] in ring positions, the
// order reduce-scatter uses for the root's block. Only the root's recvbuf is written.
// Scratch: the buffer, on ranks that receive.
class ChainReduce final : public SegmentedSchedule {
 public:
  static Status validate(const RingParams& p, const CollParams& c, std::string* why);
  ChainReduce(const RingParams& p, const CollParams& c, std::vector<uint8_t>* scratch);

 private:
  size_t scratch_bytes() const override;
  Status build(uint8_t* scratch) override;
};

}  // namespace skipring
