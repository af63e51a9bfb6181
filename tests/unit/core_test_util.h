// Pieces shared by the harness tests of the collective cores (ring, recursive doubling,
// Rabenseifner, tree, hierarchical, ring collectives): the size cases, the valid op x type
// pairs, the ring order of a run, the rank-order reference, a checked harness run and the
// random parts of a schedule. Each helper draws from the generator in the same order the
// tests did inline, so the schedules are unchanged.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/contribution_set.h"
#include "collectives/dtype.h"
#include "collectives/reduce_kernels.h"
#include "collectives/wire_header.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"

namespace skipring {
namespace testutil {

// ---- size cases: n = 1..16 with tiny and uneven counts ----------------------------------
struct SizeCase {
  int n;
  size_t count;
};

// Per n: counts 0, 1, n-1, n, n+1 (and 2n+3 with two_n_plus_3), 1009, deduplicated.
inline std::vector<SizeCase> size_cases(bool two_n_plus_3 = false) {
  std::vector<SizeCase> v;
  for (int n = 1; n <= 16; ++n) {
    std::vector<size_t> counts = {0, 1, size_t(n - 1), size_t(n), size_t(n + 1), 1009};
    if (two_n_plus_3) counts.push_back(2 * size_t(n) + 3);
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (size_t c : counts) v.push_back({n, c});
  }
  return v;
}

inline std::string size_case_name(const ::testing::TestParamInfo<SizeCase>& i) {
  return "n" + std::to_string(i.param.n) + "_count" + std::to_string(i.param.count);
}

// Every (type, op) pair the kernels accept, types outer.
inline std::vector<std::pair<DType, ROp>> valid_pairs() {
  std::vector<std::pair<DType, ROp>> pairs;
  for (int t = 0; t < kNumDTypes; ++t) {
    for (int op = 0; op < kNumROps; ++op) {
      if (op_valid(static_cast<ROp>(op), static_cast<DType>(t))) {
        pairs.push_back({static_cast<DType>(t), static_cast<ROp>(op)});
      }
    }
  }
  return pairs;
}

// Calls body(t, op, dtype, rop) for every valid pair (type index t outer, op index op) until
// body returns false; returns the number of pairs body completed.
template <typename F>
int for_each_valid_pair(F&& body) {
  int pairs = 0;
  for (int t = 0; t < kNumDTypes; ++t) {
    for (int op = 0; op < kNumROps; ++op) {
      const DType dt = static_cast<DType>(t);
      const ROp rop = static_cast<ROp>(op);
      if (!op_valid(rop, dt)) continue;
      if (!body(t, op, dt, rop)) return pairs;
      ++pairs;
    }
  }
  return pairs;
}

// The ring order of a run (identity when o.ring is empty).
inline std::vector<int> ring_of(const harness::Options& o) {
  std::vector<int> ring = o.ring;
  if (ring.empty()) {
    ring.resize(o.n);
    std::iota(ring.begin(), ring.end(), 0);
  }
  return ring;
}

// Sequential reference: the inputs of one collective (in_c[r]) folded in rank order with the
// same kernel. Exact for integers and order-insensitive ops.
inline std::vector<uint8_t> rank_order_reduction(const harness::Options& o,
                                                 const std::vector<std::vector<uint8_t>>& in_c) {
  std::vector<uint8_t> seq = in_c[0];
  for (int r = 1; r < o.n; ++r) {
    EXPECT_EQ(reduce(o.op, o.dtype, seq.data(), seq.data(), in_c[r].data(), o.count), Status::kOk);
  }
  return seq;
}

// Runs the harness into *res: a fatal failure unless it completed, a failure if messages
// were left in flight. Call under ASSERT_NO_FATAL_FAILURE.
inline void run_clean(const harness::Options& o, const testdata::Buffers& in,
                      harness::Result* res) {
  *res = harness::run(o, in);
  ASSERT_EQ(res->status, Status::kOk) << res->error;
  EXPECT_FALSE(res->leftover_messages) << "messages left in flight";
}

// ---- driving a core by hand ----------------------------------------------------------------
// The first action of `kind` (to / from `peer`, with `tag`, when given), or null.
inline const Action* find_action(const ActionList& acts, Action::Kind kind, int peer = -1,
                                 int tag = -1) {
  for (const Action& a : acts) {
    if (a.kind == kind && (peer < 0 || a.peer == peer) && (tag < 0 || a.tag == tag)) return &a;
  }
  return nullptr;
}

// A forged header written field by field: one 64-bit word of contribution set holding
// `ranks` (whatever n is), flags and route 0.
inline void write_hdr(void* dst, uint8_t phase, uint32_t chunk, const std::vector<int>& ranks,
                      uint32_t seq = 0, uint32_t segment = 0) {
  WireHeader h{};
  h.seq = seq;
  h.phase = phase;
  h.set_words = 1;
  h.chunk = chunk;
  h.segment = segment;
  std::memcpy(dst, &h, sizeof(h));
  uint64_t set = 0;
  for (int r : ranks) set |= uint64_t{1} << r;
  std::memcpy(static_cast<uint8_t*>(dst) + sizeof(h), &set, 8);
  seal_wire_header(static_cast<uint8_t*>(dst), sizeof(h) + 8);
}

// A header as the cores encode it, for n ranks, carrying `members`.
inline void forge_header(void* hdr, int n, uint8_t phase, uint32_t chunk, uint32_t seg,
                         const std::vector<int>& members, uint32_t seq = 0) {
  ContributionSet s(n);
  for (int m : members) s.add(m);
  encode_wire_header(static_cast<uint8_t*>(hdr), WireExpect{seq, phase, chunk, seg}, s);
}

// Delivers the forged receive `recv` to `core` at `now`: must be a protocol error whose text
// contains `what`. Returns the actions it appended.
inline ActionList expect_recv_error(CollectiveCore& core, const Action& recv, double now,
                                    const std::string& what) {
  ActionList more;
  EXPECT_EQ(core.on_recv(recv.token, recv.payload_bytes, now, &more), Status::kErrProtocol);
  EXPECT_NE(core.error().find(what), std::string::npos) << core.error();
  return more;
}

// One core driven by hand: int32 buffers, the input filled with rank + 1 and the output with
// -7; the actions of start() in acts.
template <typename Core>
struct DrivenCore {
  RingParams p;
  std::vector<int32_t> in, outbuf;
  std::vector<uint8_t> scratch;
  std::unique_ptr<Core> core;
  ActionList acts;

  // Fills p (rank, ring, count, int32, sendbuf = in, recvbuf = outbuf) and the buffers.
  void setup(int rank, std::vector<int> ring, size_t count) {
    p.rank = rank;
    p.ring = std::move(ring);
    p.count = count;
    p.dtype = DType::kInt32;
    in.assign(count, rank + 1);
    outbuf.assign(count, -7);
    p.sendbuf = in.data();
    p.recvbuf = outbuf.data();
  }
  // Starts the core (must succeed) into acts.
  void start() { EXPECT_EQ(core->start(0.0, &acts), Status::kOk); }
};

// Ranks 0..n-1 in identity order.
inline std::vector<int> identity_ring(int n) {
  std::vector<int> ring(n);
  std::iota(ring.begin(), ring.end(), 0);
  return ring;
}

// ---- random schedule parts ----------------------------------------------------------------
inline void random_pair(harness::Options* o, const std::vector<std::pair<DType, ROp>>& pairs,
                        std::mt19937_64& rng) {
  const auto& pr = pairs[rng() % pairs.size()];
  o->dtype = pr.first;
  o->op = pr.second;
}

// Latencies up to 50 us and an eager probability of 0, 0.5 or 1.
inline void random_delivery(harness::Options* o, std::mt19937_64& rng) {
  o->latency_max = 1e-6 * (1 + rng() % 50);
  o->eager_probability = (rng() % 3) / 2.0;
}

// Identity ring order, shuffled half of the time.
inline void random_ring(harness::Options* o, std::mt19937_64& rng) {
  o->ring.resize(o->n);
  std::iota(o->ring.begin(), o->ring.end(), 0);
  if (rng() & 1) std::shuffle(o->ring.begin(), o->ring.end(), rng);
}

// Start skew: each rank starts at 0..99 us.
inline void random_start_times(harness::Options* o, std::mt19937_64& rng) {
  o->start_time.resize(o->n);
  for (auto& t : o->start_time) t = 1e-6 * (rng() % 100);
}

// n = 1..16; count < small_count one time in four, else < large_count; a valid pair; random
// delivery; in place or not; 1..max_collectives back-to-back collectives.
inline void random_basics(harness::Options* o, const std::vector<std::pair<DType, ROp>>& pairs,
                          std::mt19937_64& rng, size_t small_count, size_t large_count,
                          int max_collectives) {
  o->n = 1 + static_cast<int>(rng() % 16);
  o->count = rng() % 4 == 0 ? rng() % small_count : rng() % large_count;
  random_pair(o, pairs, rng);
  random_delivery(o, rng);
  o->in_place = rng() & 1;
  o->collectives = 1 + static_cast<int>(rng() % max_collectives);
}

inline std::string schedule_trace(int i, const harness::Options& o) {
  return "schedule " + std::to_string(i) + " n=" + std::to_string(o.n) +
         " count=" + std::to_string(o.count) + " " + dtype_name(o.dtype) + " " + rop_name(o.op);
}

}  // namespace testutil
}  // namespace skipring
