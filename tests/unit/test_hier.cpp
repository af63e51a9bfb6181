// Hierarchical all-reduce core (local reduce-scatter, inter-host skip-ahead ring, local
// allgather) under the in-process harness: every host assignment shape (n = 1..16, H = 1..n,
// equal, unequal and random host sizes, shuffled ring orders), every op x type, in place,
// back-to-back collectives, random delivery orders, eager and rendezvous, a straggler with
// skip-ahead on. Every rank must end with exactly the bits of the algorithm's canonical
// reduction order (computed here sequentially, independently of the core), and nothing may be
// left in flight. Driven by hand, forged headers must be protocol errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>

#include "collectives/hier_allreduce.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring_allreduce.h"
#include "collectives/wire_header.h"
#include "tests/unit/core_test_util.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"

namespace skipring {
namespace {

using testdata::Buffers;
using testutil::ring_of;

// `groups`: hier's local order per host (empty: rank order).
void use_hier(harness::Options* o, const std::vector<int>& host_of,
              const std::vector<std::vector<int>>& groups = {}) {
  o->make_core = [host_of, groups](const RingParams& p, std::vector<uint8_t>* scratch) {
    return std::unique_ptr<CollectiveCore>(new HierAllreduce(p, host_of, scratch, groups));
  };
}

// Host maps: contiguous (ranks split in H runs), round-robin, random (dense ids).
enum class Shape { kContiguous, kRoundRobin, kRandom };
std::vector<int> host_map(int n, int hosts, Shape shape, std::mt19937_64& rng) {
  std::vector<int> h(n);
  for (int r = 0; r < n; ++r) {
    if (shape == Shape::kContiguous) h[r] = static_cast<int>(static_cast<long>(r) * hosts / n);
    if (shape == Shape::kRoundRobin) h[r] = r % hosts;
    if (shape == Shape::kRandom) h[r] = r < hosts ? r : static_cast<int>(rng() % hosts);
  }
  if (shape == Shape::kRandom) std::shuffle(h.begin(), h.end(), rng);
  return h;
}

// The algorithm's reduction order, computed sequentially: per block, each host folds its
// ranks' inputs in rank order (or in the local order `local_order` gives); then the ring over the
// hosts (in order of first appearance in the ring) reduces chunk c of the block starting at
// position c + 1, each position computing own op received, the owner c last.
std::vector<uint8_t> hier_reference(const harness::Options& o, const std::vector<int>& host_of,
                                    const std::vector<std::vector<uint8_t>>& by_rank,
                                    const std::vector<std::vector<int>>& local_order = {}) {
  const int n = o.n;
  const size_t elem = dtype_size(o.dtype);
  int hosts = 0;
  for (int h : host_of) hosts = std::max(hosts, h + 1);
  std::vector<std::vector<int>> groups(hosts);
  for (int r = 0; r < n; ++r) groups[host_of[r]].push_back(r);
  if (!local_order.empty()) groups = local_order;
  std::vector<int> order;
  for (int r : ring_of(o)) {
    if (std::find(order.begin(), order.end(), host_of[r]) == order.end()) {
      order.push_back(host_of[r]);
    }
  }
  int b = n;
  for (const auto& g : groups) b = std::min<int>(b, static_cast<int>(g.size()));
  const RingLayout blocks(b, o.count, elem, elem);
  std::vector<uint8_t> out(o.count * elem);
  for (int k = 0; k < b; ++k) {
    const size_t off = blocks.chunk_offset(k) * elem, cnt = blocks.chunk_count(k);
    if (cnt == 0) continue;
    std::vector<std::vector<uint8_t>> local(hosts);
    for (int h = 0; h < hosts; ++h) {
      local[h].assign(by_rank[groups[h][0]].begin() + off,
                      by_rank[groups[h][0]].begin() + off + cnt * elem);
      for (size_t i = 1; i < groups[h].size(); ++i) {
        EXPECT_EQ(reduce(o.op, o.dtype, local[h].data(), local[h].data(),
                         by_rank[groups[h][i]].data() + off, cnt),
                  Status::kOk);
      }
    }
    if (hosts == 1) {
      std::memcpy(out.data() + off, local[0].data(), cnt * elem);
      continue;
    }
    const RingLayout chunks(hosts, cnt, elem, elem);
    for (int c = 0; c < hosts; ++c) {
      const size_t coff = chunks.chunk_offset(c) * elem, ccnt = chunks.chunk_count(c);
      if (ccnt == 0) continue;
      std::vector<uint8_t> v(local[order[(c + 1) % hosts]].begin() + coff,
                             local[order[(c + 1) % hosts]].begin() + coff + ccnt * elem);
      for (int s = 2; s <= hosts; ++s) {
        const auto& x = local[order[(c + s) % hosts]];
        EXPECT_EQ(reduce(o.op, o.dtype, v.data(), x.data() + coff, v.data(), ccnt), Status::kOk);
      }
      std::memcpy(out.data() + off + coff, v.data(), ccnt * elem);
    }
  }
  return out;
}

// Runs the harness and checks every invariant; *out (if given) gets the result.
void run_and_check(harness::Options o, const std::vector<int>& host_of,
                   harness::Result* out = nullptr,
                   const std::vector<std::vector<int>>& local_order = {}) {
  use_hier(&o, host_of, local_order);
  const Buffers in = testdata::make_inputs(o, o.seed * 31 + 7, /*wide=*/true);
  harness::Result local;
  harness::Result& res = out ? *out : local;
  ASSERT_NO_FATAL_FAILURE(testutil::run_clean(o, in, &res));
  const size_t bytes = o.count * dtype_size(o.dtype);
  for (int c = 0; c < o.collectives; ++c) {
    const std::vector<uint8_t> seq = testutil::rank_order_reduction(o, in[c]);
    const bool exact_any_order = !testdata::is_float(o.dtype) && o.op != ROp::kProd;
    const std::vector<uint8_t> ref =
        o.skip && exact_any_order ? seq : hier_reference(o, host_of, in[c], local_order);
    if (exact_any_order) {
      EXPECT_TRUE(ref == seq) << "integer result differs from the exact value";
    }
    uint64_t sent = 0, received = 0;
    for (int r = 0; r < o.n; ++r) {
      ASSERT_EQ(res.outputs[c][r].size(), bytes);
      ASSERT_TRUE(res.outputs[c][r] == ref)
          << "rank " << r << " differs from the reference, collective " << c;
      const CollectiveStats& st = res.stats[c][r];
      EXPECT_EQ(st.seq, static_cast<uint64_t>(c));
      if (!o.skip) {
        EXPECT_EQ(st.skips, 0u);
      }
      sent += st.messages_sent;
      received += st.messages_received;
    }
    EXPECT_EQ(sent, received) << "every message sent was received exactly once";
  }
}

std::string map_name(const std::vector<int>& h) {
  std::string s;
  for (int x : h) s += std::to_string(x);
  return s;
}

// ---------------------------------------------------------------------------------------
TEST(HierShapes, EveryHostCountAndShape) {
  std::mt19937_64 rng(77);
  int runs = 0;
  for (int n = 1; n <= 16; ++n) {
    for (int hosts = 1; hosts <= n; ++hosts) {
      for (Shape shape : {Shape::kContiguous, Shape::kRoundRobin, Shape::kRandom}) {
        const std::vector<int> host_of = host_map(n, hosts, shape, rng);
        harness::Options o;
        o.n = n;
        const size_t counts[] = {0, 1, size_t(n) + 1, 97, 300};
        o.count = counts[(n + hosts + static_cast<int>(shape)) % 5];
        o.dtype = (hosts + static_cast<int>(shape)) % 2 ? DType::kDouble : DType::kInt32;
        o.seed = 1000 * n + 10 * hosts + static_cast<int>(shape);
        o.in_place = (n + hosts) % 2 == 0;
        o.eager_probability = (runs % 3) / 2.0;
        o.segment_bytes = 32;
        o.collectives = 2;
        SCOPED_TRACE("n=" + std::to_string(n) + " hosts " + map_name(host_of) +
                     " count=" + std::to_string(o.count));
        run_and_check(o, host_of);
        if (::testing::Test::HasFatalFailure()) return;
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 3 * 136);
}

TEST(HierShapes, DegenerateCases) {
  // n = 1; one host (local phases only); one rank per host (ring only).
  for (bool in_place : {false, true}) {
    for (size_t count : {0, 1, 5, 200}) {
      harness::Options o;
      o.in_place = in_place;
      o.count = count;
      o.collectives = 3;
      o.n = 1;
      run_and_check(o, {0});
      o.n = 6;
      harness::Result res;
      run_and_check(o, {0, 0, 0, 0, 0, 0}, &res);
      if (count > 0) {
        for (const StepRecord& s : res.stats[0][0].steps) {
          EXPECT_EQ(s.step, 0) << "H = 1: local steps only";
        }
      }
      run_and_check(o, {0, 1, 2, 3, 4, 5}, &res);
      // Ring only: exactly the plain ring's messages, nothing local.
      harness::Options plain = o;
      const harness::Result ring = harness::run(plain, testdata::make_inputs(o, 1));
      ASSERT_EQ(ring.status, Status::kOk) << ring.error;
      for (int r = 0; r < o.n; ++r) {
        EXPECT_EQ(res.stats[0][r].messages_sent, ring.stats[0][r].messages_sent) << "rank " << r;
        EXPECT_EQ(res.stats[0][r].steps.size(), ring.stats[0][r].steps.size()) << "rank " << r;
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(HierShapes, UnequalHostsBlockCountIsSmallestHost) {
  std::vector<uint8_t> scratch;
  RingParams p;
  p.ring = {0, 1, 2, 3, 4, 5, 6};
  p.count = 10;
  int buf[10] = {};
  p.sendbuf = p.recvbuf = buf;
  const std::vector<int> host_of = {0, 0, 0, 1, 1, 2, 2};  // sizes 3, 2, 2
  p.rank = 2;
  HierAllreduce a(p, host_of, &scratch);
  EXPECT_EQ(a.hosts(), 3);
  EXPECT_EQ(a.blocks(), 2);
  EXPECT_EQ(a.local_index(), 2) << "local index >= blocks: owns nothing";
  p.rank = 4;
  HierAllreduce b(p, host_of, &scratch);
  EXPECT_EQ(b.local_index(), 1);
  harness::Options o;
  o.n = 7;
  o.count = 1001;
  o.segment_bytes = 128;
  o.collectives = 3;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    o.seed = seed;
    o.in_place = seed % 2;
    o.eager_probability = (seed % 3) / 2.0;
    o.dtype = seed % 2 ? DType::kFloat : DType::kInt64;
    run_and_check(o, host_of);
    run_and_check(o, {2, 1, 0, 1, 0, 2, 0});
    run_and_check(o, {0, 1, 1, 1, 1, 1, 1});  // sizes 1 and 6: one block, one ring
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(HierOpsTypes, EveryValidPair) {
  const std::vector<std::vector<int>> maps = {
      {0, 0, 1, 1, 2, 2}, {0, 1, 1, 0, 2, 1, 2}, {0, 1, 2, 3, 4}, {0, 0, 0, 0}};
  const int pairs = testutil::for_each_valid_pair([&](int t, int op, DType dt, ROp rop) {
    for (size_t mi = 0; mi < maps.size(); ++mi) {
      for (bool in_place : {false, true}) {
        harness::Options o;
        o.n = static_cast<int>(maps[mi].size());
        o.count = 37;
        o.dtype = dt;
        o.op = rop;
        o.segment_bytes = std::max<size_t>(16, dtype_size(dt));  // 32-byte complex long double
        o.seed = 1000 + t * 97 + op * 13 + mi + (in_place ? 5000 : 0);
        o.in_place = in_place;
        o.collectives = 2;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + rop_name(rop) + " hosts " +
                     map_name(maps[mi]) + (in_place ? " in place" : ""));
        run_and_check(o, maps[mi]);
        if (::testing::Test::HasFatalFailure()) return false;
      }
    }
    return true;
  });
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_GT(pairs, 80);
}

TEST(HierRandom, ManySchedules) {
  // Random n, host map, count, op x type, ring order, latencies, eager mix, start skew.
  const auto pairs = testutil::valid_pairs();
  std::mt19937_64 rng(5151);
  for (int i = 0; i < 200; ++i) {
    harness::Options o;
    o.n = 1 + static_cast<int>(rng() % 16);
    const int hosts = 1 + static_cast<int>(rng() % o.n);
    const std::vector<int> host_of = host_map(o.n, hosts, static_cast<Shape>(rng() % 3), rng);
    o.count = rng() % 4 == 0 ? rng() % 5 : rng() % 1500;
    testutil::random_pair(&o, pairs, rng);
    o.segment_bytes = std::max<size_t>(16 << (rng() % 7), dtype_size(o.dtype));
    o.depth = 1 + static_cast<int>(rng() % 4);
    testutil::random_delivery(&o, rng);
    o.links = rng() % 2;
    o.in_place = rng() & 1;
    o.collectives = 1 + static_cast<int>(rng() % 4);
    o.seed = rng();
    testutil::random_ring(&o, rng);
    testutil::random_start_times(&o, rng);
    SCOPED_TRACE("schedule " + std::to_string(i) + " n=" + std::to_string(o.n) + " hosts " +
                 map_name(host_of) + " count=" + std::to_string(o.count) + " " +
                 dtype_name(o.dtype) + " " + rop_name(o.op));
    run_and_check(o, host_of);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(HierRandom, EagerOnlyRendezvousOnlyLargeMessages) {
  for (double eager : {0.0, 1.0}) {
    for (const std::vector<int>& host_of :
         {std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}, std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1, 2},
          std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3}}) {
      harness::Options o;
      o.n = static_cast<int>(host_of.size());
      o.count = 20000;
      o.dtype = DType::kFloat;
      o.segment_bytes = 4096;
      o.eager_probability = eager;
      o.in_place = eager == 0.0;
      o.links = true;
      o.collectives = 2;
      o.seed = static_cast<uint64_t>(o.n * 7 + eager);
      SCOPED_TRACE("eager=" + std::to_string(eager) + " hosts " + map_name(host_of));
      run_and_check(o, host_of);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(HierRandom, SmallTagSpaceGrowsSegments) {
  harness::Options o;
  o.n = 6;
  o.count = 30000;
  o.segment_bytes = 4;
  o.tag_span = 2048;
  o.collectives = 2;
  std::vector<uint8_t> scratch;
  RingParams p;
  p.ring = {0, 1, 2, 3, 4, 5};
  p.count = o.count;
  p.dtype = o.dtype;
  p.segment_bytes = 4;
  p.tag_span = 2048;
  std::vector<int32_t> buf(o.count);
  p.sendbuf = p.recvbuf = buf.data();
  HierAllreduce h(p, {0, 0, 0, 1, 1, 1}, &scratch);
  // 10000 elements per block in at most 512 segments per local phase.
  EXPECT_GE(h.segment_bytes(), 4 * ((10001 + 511) / 512));
  ActionList acts;
  ASSERT_EQ(h.start(0.0, &acts), Status::kOk);
  int messages = 0;
  for (const Action& a : acts) {
    if (a.kind != Action::Kind::kSend && a.kind != Action::Kind::kRecv) continue;
    ++messages;
    EXPECT_GE(a.tag, 1024) << "local phases stay above the ring's half";
    EXPECT_LT(a.tag, 2048);
  }
  EXPECT_GT(messages, 0);
  run_and_check(o, {0, 0, 0, 1, 1, 1});
}

TEST(HierExactness, NanPayloadsFollowTheCanonicalOperandOrder) {
  // NaN + NaN keeps one operand's payload, so the bits show which operand was a and which b:
  // every rank must end with exactly the reference's bits, element by element. (Where the
  // kernel's NaN addition is commutative in bits, as on some x86 builds, this checks less.)
  for (const std::vector<int>& host_of :
       {std::vector<int>{0, 0, 0, 1, 1, 1}, std::vector<int>{0, 1, 0, 1, 2, 2, 2},
        std::vector<int>{0, 0, 0, 0, 0}, std::vector<int>{0, 1, 2, 3}}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      harness::Options o;
      o.n = static_cast<int>(host_of.size());
      o.count = 64;
      o.dtype = DType::kFloat;
      o.segment_bytes = 32;
      o.seed = seed;
      o.in_place = seed % 2;
      Buffers in(1, std::vector<std::vector<uint8_t>>(o.n, std::vector<uint8_t>(o.count * 4)));
      std::mt19937_64 rng(seed);
      for (int r = 0; r < o.n; ++r) {
        for (size_t i = 0; i < o.count; ++i) {
          const uint32_t bits = 0x7fc00000u | static_cast<uint32_t>(rng() % 0x3fffff);
          std::memcpy(in[0][r].data() + 4 * i, &bits, 4);
        }
      }
      use_hier(&o, host_of);
      const harness::Result res = harness::run(o, in);
      ASSERT_EQ(res.status, Status::kOk) << res.error;
      const std::vector<uint8_t> ref = hier_reference(o, host_of, in[0]);
      for (int r = 0; r < o.n; ++r) {
        EXPECT_TRUE(res.outputs[0][r] == ref) << "hosts " << map_name(host_of) << " rank " << r;
      }
    }
  }
}

TEST(HierInterleaved, AlternatesWithTheFlatRing) {
  // Even collectives hierarchical, odd ones the flat ring on the whole communicator: no message
  // of one collective may be matched by a receive of the other. Integer ops: exact values.
  std::mt19937_64 rng(99);
  uint32_t hier_skips = 0;
  for (int i = 0; i < 80; ++i) {
    harness::Options o;
    o.n = 2 + static_cast<int>(rng() % 11);
    const int hosts = 1 + static_cast<int>(rng() % o.n);
    const std::vector<int> host_of = host_map(o.n, hosts, static_cast<Shape>(rng() % 3), rng);
    o.count = rng() % 600;
    o.dtype = rng() % 2 ? DType::kInt32 : DType::kInt64;
    const ROp ops[] = {ROp::kSum, ROp::kMin, ROp::kMax};
    o.op = ops[rng() % 3];
    o.segment_bytes = 16 << (rng() % 5);
    o.eager_probability = (rng() % 3) / 2.0;
    o.in_place = rng() & 1;
    o.collectives = 6;
    o.gap_max = 0;
    o.seed = rng();
    if (i % 2) {
      // Skip-ahead on, with one rank late into some collectives.
      o.skip = true;
      o.skip_threshold_s = 5e-6;
      const int slow = static_cast<int>(rng() % o.n);
      o.step_delay = [slow](int rank, int coll, Phase, int step) {
        return rank == slow && coll % 3 == 1 && step <= 1 ? 1e-4 : 0;
      };
    }
    o.make_core = [host_of](const RingParams& p, std::vector<uint8_t>* scratch) {
      if (p.seq % 2 == 1) return std::unique_ptr<CollectiveCore>(new RingAllreduce(p, scratch));
      return std::unique_ptr<CollectiveCore>(new HierAllreduce(p, host_of, scratch));
    };
    const Buffers in = testdata::make_inputs(o, o.seed, false);
    const harness::Result res = harness::run(o, in);
    SCOPED_TRACE("case " + std::to_string(i) + " hosts " + map_name(host_of));
    ASSERT_EQ(res.status, Status::kOk) << res.error;
    EXPECT_FALSE(res.leftover_messages);
    for (int c = 0; c < o.collectives; ++c) {
      std::vector<uint8_t> want = in[c][0];
      for (int r = 1; r < o.n; ++r) {
        ASSERT_EQ(reduce(o.op, o.dtype, want.data(), want.data(), in[c][r].data(), o.count),
                  Status::kOk);
      }
      for (int r = 0; r < o.n; ++r) {
        ASSERT_TRUE(res.outputs[c][r] == want) << "collective " << c << " rank " << r;
        if (c % 2 == 0) hier_skips += res.stats[c][r].skips;
      }
    }
  }
  EXPECT_GT(hier_skips, 0u) << "no hierarchical collective ever skipped";
}

// ---------------------------------------------------------------------------------------
TEST(HierStraggler, SlowRingStepWithSkipAheadStaysExact) {
  // One rank is very slow in the inter-host ring (its first reduce-scatter step, numbered 1
  // by the hierarchical core): with skip-ahead on, the other hosts route around it; results
  // stay exact and identical on every rank.
  uint32_t skips = 0;
  for (int slow : {0, 3, 5}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      harness::Options o;
      o.n = 8;
      o.count = 4000;
      o.dtype = DType::kInt32;
      o.segment_bytes = 1024;
      o.skip = true;
      o.skip_threshold_s = 20e-6;
      o.collectives = 3;
      o.seed = seed * 17 + slow;
      o.in_place = seed % 2;
      o.step_delay = [slow](int rank, int coll, Phase ph, int step) {
        return rank == slow && coll == 1 && ph == Phase::kReduceScatter && step == 1 ? 2e-3 : 0;
      };
      const std::vector<int> host_of = {0, 1, 2, 3, 0, 1, 2, 3};  // 4 hosts of 2
      harness::Result res;
      SCOPED_TRACE("slow " + std::to_string(slow) + " seed " + std::to_string(seed));
      run_and_check(o, host_of, &res);
      if (::testing::Test::HasFatalFailure()) return;
      for (int r = 0; r < o.n; ++r) skips += res.stats[1][r].skips;
    }
  }
  EXPECT_GT(skips, 0u) << "the straggler was never skipped";
}

TEST(HierStraggler, LateRankAndLocalDelayStayExact) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    harness::Options o;
    o.n = 9;
    o.count = 999;
    o.dtype = DType::kInt64;
    o.skip = true;
    o.collectives = 2;
    o.seed = seed;
    o.start_time.assign(o.n, 0);
    o.start_time[seed % o.n] = 1e-3;
    o.step_delay = [seed](int rank, int, Phase ph, int step) {
      return rank == static_cast<int>(seed) && step == 0 && ph == Phase::kReduceScatter ? 3e-4 : 0;
    };
    run_and_check(o, {0, 0, 0, 1, 1, 1, 2, 2, 2});
    run_and_check(o, {0, 1, 1, 2, 2, 2, 0, 1, 2});
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(HierStats, StepRecordsAndMessageCounts) {
  harness::Options o;
  o.n = 6;
  o.count = 600;
  o.segment_bytes = 1 << 20;  // one segment per block, one per ring chunk
  const std::vector<int> host_of = {0, 0, 0, 1, 1, 1};
  harness::Result res;
  run_and_check(o, host_of, &res);
  ASSERT_EQ(res.status, Status::kOk);
  // Rank 4: host 1, local index 1. Phase 1: sends 2 blocks, receives 2 pieces; ring with
  // rank 1 (2 hosts): 1 + 1 messages each way; phase 3: sends 2, receives 2.
  const CollectiveStats& st = res.stats[0][4];
  EXPECT_EQ(st.messages_sent, 6u);
  EXPECT_EQ(st.messages_received, 6u);
  int local_rs = 0, ring = 0, local_ag = 0;
  for (const StepRecord& s : st.steps) {
    if (s.phase == Phase::kReduceScatter && s.step == 0) {
      ++local_rs;
      EXPECT_TRUE(s.from == 3 || s.from == 5 || s.to == 3 || s.to == 5);
    } else if (s.phase == Phase::kAllgather && s.step == 1) {
      ++local_ag;
      EXPECT_TRUE(s.from == 3 || s.from == 5 || s.to == 3 || s.to == 5);
    } else {
      ++ring;
      EXPECT_TRUE(s.from == 1 || s.from == -1) << "ring peers are communicator ranks";
    }
  }
  EXPECT_EQ(local_rs, 4);
  EXPECT_EQ(local_ag, 4);
  EXPECT_GE(ring, 2);
}

// ---------------------------------------------------------------------------------------
// Driving one core by hand.
using testutil::find_action;
using testutil::forge_header;

struct Driven {
  std::vector<int32_t> in, outbuf;
  std::vector<uint8_t> scratch;
  RingParams p;
  std::unique_ptr<HierAllreduce> core;
  ActionList acts;
  Driven(int rank, std::vector<int> host_of, size_t count) : in(count, 1), outbuf(count, 0) {
    p.rank = rank;
    p.ring.resize(host_of.size());
    std::iota(p.ring.begin(), p.ring.end(), 0);
    p.count = count;
    p.dtype = DType::kInt32;
    p.sendbuf = in.data();
    p.recvbuf = outbuf.data();
    core = std::make_unique<HierAllreduce>(p, std::move(host_of), &scratch);
    EXPECT_EQ(core->start(0.0, &acts), Status::kOk);
  }
};

TEST(HierProtocol, OverlappingContributionSetIsAnError) {
  // One host of 3: rank 0 owns block 0 and folds pieces of ranks 1 and 2.
  Driven d(0, {0, 0, 0}, 6);
  const Action* from1 = find_action(d.acts, Action::Kind::kRecv, 1);
  ASSERT_NE(from1, nullptr);
  forge_header(from1->header, 3, kHierPhaseLocalRs, 0, 0, {0, 1});  // claims rank 0's input too
  ActionList more = testutil::expect_recv_error(*d.core, *from1, 1.0, "overlapping");
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr) << "nothing may be summed";
}

TEST(HierProtocol, EarlyLaterPieceCheckedInFoldOrder) {
  // Rank 2's piece arrives first claiming {1, 2}: disjoint from nothing folded yet, but it
  // overlaps rank 1's piece, folded before it.
  Driven d(0, {0, 0, 0}, 6);
  const Action* from1 = find_action(d.acts, Action::Kind::kRecv, 1);
  const Action* from2 = find_action(d.acts, Action::Kind::kRecv, 2);
  ASSERT_NE(from1, nullptr);
  ASSERT_NE(from2, nullptr);
  forge_header(from2->header, 3, kHierPhaseLocalRs, 0, 0, {1, 2});
  ActionList more;
  ASSERT_EQ(d.core->on_recv(from2->token, from2->payload_bytes, 1.0, &more), Status::kOk);
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr) << "rank 1's piece comes first";
  forge_header(from1->header, 3, kHierPhaseLocalRs, 0, 0, {1});
  more.clear();
  ASSERT_EQ(d.core->on_recv(from1->token, from1->payload_bytes, 2.0, &more), Status::kOk);
  const Action* red = find_action(more, Action::Kind::kReduce);
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->a, d.p.sendbuf) << "canonical order: rank 0's input is operand a";
  EXPECT_EQ(red->b, from1->payload);
  ActionList after;
  EXPECT_EQ(d.core->on_reduce(red->token, 3.0, &after), Status::kErrProtocol);
  EXPECT_NE(d.core->error().find("overlapping"), std::string::npos) << d.core->error();
}

TEST(HierProtocol, ForeignOrIncompleteSetsAndStaleHeadersAreErrors) {
  {
    // Two hosts {0, 1}, {2, 3}: rank 1 claiming rank 2's input is disjoint but wrong.
    Driven d(0, {0, 0, 1, 1}, 4);
    const Action* from1 = find_action(d.acts, Action::Kind::kRecv, 1, -1);
    ASSERT_NE(from1, nullptr);
    ASSERT_EQ(from1->tag, (1 << 28) / 2);
    forge_header(from1->header, 4, kHierPhaseLocalRs, 0, 0, {2});
    ActionList more = testutil::expect_recv_error(*d.core, *from1, 1.0, "expected");
  }
  {
    // Allgather of block 1 from rank 1 must carry every rank.
    Driven d(0, {0, 0, 1, 1}, 4);
    const Action* ag = nullptr;
    for (const Action& a : d.acts) {
      if (a.kind == Action::Kind::kRecv && a.peer == 1 && a.tag != (1 << 28) / 2) ag = &a;
    }
    ASSERT_NE(ag, nullptr);
    forge_header(ag->header, 4, kHierPhaseLocalAg, 1, 0, {0, 1, 2});
    ActionList more = testutil::expect_recv_error(*d.core, *ag, 1.0, "incomplete");
  }
  {
    Driven d(0, {0, 0, 0}, 6);
    const Action* from1 = find_action(d.acts, Action::Kind::kRecv, 1);
    forge_header(from1->header, 3, kHierPhaseLocalRs, 0, 0, {1}, /*seq=*/7);
    ActionList more;
    EXPECT_EQ(d.core->on_recv(from1->token, from1->payload_bytes, 1.0, &more),
              Status::kErrProtocol);
  }
  {
    Driven d(0, {0, 0, 0}, 6);
    const Action* from1 = find_action(d.acts, Action::Kind::kRecv, 1);
    forge_header(from1->header, 3, /*ring*/ 0, 0, 0, {1});
    ActionList more;
    EXPECT_EQ(d.core->on_recv(from1->token, from1->payload_bytes, 1.0, &more),
              Status::kErrProtocol);
  }
}

TEST(HierProtocol, InvalidHostMapsRejected) {
  RingParams p;
  p.ring = {0, 1, 2};
  p.count = 4;
  int a[4], b[4];
  p.sendbuf = a;
  p.recvbuf = b;
  std::string why;
  EXPECT_EQ(HierAllreduce::validate(p, {0, 0, 1}, &why), Status::kOk);
  EXPECT_EQ(HierAllreduce::validate(p, {0, 0}, &why), Status::kErrArg);
  EXPECT_EQ(HierAllreduce::validate(p, {0, 2, 2}, &why), Status::kErrArg) << "host 1 empty";
  EXPECT_EQ(HierAllreduce::validate(p, {0, -1, 1}, &why), Status::kErrArg);
  p.tag_span = 1024;
  EXPECT_EQ(HierAllreduce::validate(p, {0, 0, 1}, &why), Status::kErrArg);
  std::vector<uint8_t> scratch;
  HierAllreduce bad(p, {0, 0, 1}, &scratch);
  ActionList acts;
  EXPECT_NE(bad.start(0.0, &acts), Status::kOk);
  EXPECT_FALSE(bad.error().empty());
}

TEST(HierProtocol, RingTokensAndTagsKeptApart) {
  // Every rank a host of its own plus one shared host: the ring's actions are forwarded with
  // communicator-rank peers, tags below tag_span / 2, and tokens (NestedCore's, whatever the
  // ring's own numbers) distinct from each other and from hier's own outstanding ones.
  Driven d(2, {0, 1, 2, 2}, 8);  // rank 2 owns block 0 of host 2 (blocks = 1)
  ASSERT_EQ(d.core->blocks(), 1);
  const Action* from3 = find_action(d.acts, Action::Kind::kRecv, 3);
  ASSERT_NE(from3, nullptr);
  std::set<Token> own;  // hier's own operations still outstanding after the ring starts
  for (const Action& a : d.acts) {
    if (a.kind == Action::Kind::kSend || a.kind == Action::Kind::kRecv) own.insert(a.token);
  }
  own.erase(from3->token);
  forge_header(from3->header, 4, kHierPhaseLocalRs, 0, 0, {3});
  ActionList more;
  ASSERT_EQ(d.core->on_recv(from3->token, from3->payload_bytes, 1.0, &more), Status::kOk);
  const Action* red = find_action(more, Action::Kind::kReduce);
  ASSERT_NE(red, nullptr);
  ActionList ring;
  ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &ring), Status::kOk);
  int sends = 0;
  for (const Action& a : ring) {
    if (a.kind == Action::Kind::kSend || a.kind == Action::Kind::kRecv) {
      EXPECT_TRUE(a.peer == 0 || a.peer == 1) << "ring peers: ranks of the other hosts";
      EXPECT_LT(a.tag, (1 << 28) / 2);
      EXPECT_TRUE(own.insert(a.token).second) << "token " << a.token << " used twice";
      sends += a.kind == Action::Kind::kSend;
    }
  }
  EXPECT_GT(sends, 0) << "the ring started once the block was reduced locally";
  EXPECT_FALSE(d.core->done());
}

TEST(HierProtocol, LocalAllgatherStartsDuringTheRingsAllgather) {
  // Hosts {0, 1} and {2, 3}; rank 0 owns block 0 (4 elements) and runs the ring with rank 2
  // (ring position 0 owns ring chunk 0). Once the ring's allgather has delivered chunk 1 and
  // sent chunk 0, block 0 is final: phase 3 sends it to rank 1 although the ring's send is
  // still in flight.
  Driven d(0, {0, 0, 1, 1}, 8);
  const int ag_tag = (1 << 28) / 2 + (1 << 28) / 4;
  const Action* from1 = find_action(d.acts, Action::Kind::kRecv, 1, (1 << 28) / 2);
  ASSERT_NE(from1, nullptr);
  forge_header(from1->header, 4, kHierPhaseLocalRs, 0, 0, {1});
  ActionList a1;
  ASSERT_EQ(d.core->on_recv(from1->token, from1->payload_bytes, 1.0, &a1), Status::kOk);
  const Action* fold = find_action(a1, Action::Kind::kReduce);
  ASSERT_NE(fold, nullptr);
  ActionList ring;
  ASSERT_EQ(d.core->on_reduce(fold->token, 2.0, &ring), Status::kOk);
  // Ring tags (ring_data_tag): kind 0 reduce-scatter, 1 allgather; segment id = chunk.
  const uint32_t seq = d.p.seq;
  const Action* rs_send = find_action(ring, Action::Kind::kSend, 2, ring_data_tag(seq, 1, 0));
  const Action* rs_recv = find_action(ring, Action::Kind::kRecv, 2, ring_data_tag(seq, 0, 0));
  ASSERT_NE(rs_send, nullptr) << "the ring started once block 0 was folded";
  ASSERT_NE(rs_recv, nullptr);
  ActionList after_send;
  ASSERT_EQ(d.core->on_send(rs_send->token, 3.0, &after_send), Status::kOk);
  const int ag1 = ring_data_tag(seq, 1, 1);
  const Action* ag_recv = find_action(after_send, Action::Kind::kRecv, 2, ag1);
  if (ag_recv == nullptr) ag_recv = find_action(ring, Action::Kind::kRecv, 2, ag1);
  ASSERT_NE(ag_recv, nullptr);
  forge_header(rs_recv->header, 2, /*ring reduce-scatter*/ 0, 0, 0, {1});
  ActionList a2;
  ASSERT_EQ(d.core->on_recv(rs_recv->token, rs_recv->payload_bytes, 4.0, &a2), Status::kOk)
      << d.core->error();
  const Action* merge = find_action(a2, Action::Kind::kReduce);
  ASSERT_NE(merge, nullptr);
  ActionList a3;
  ASSERT_EQ(d.core->on_reduce(merge->token, 5.0, &a3), Status::kOk);
  const Action* ring_ag_send = find_action(a3, Action::Kind::kSend, 2, ring_data_tag(seq, 0, 1));
  ASSERT_NE(ring_ag_send, nullptr);
  EXPECT_EQ(find_action(a3, Action::Kind::kSend, 1), nullptr) << "half of block 0 is final";
  forge_header(ag_recv->header, 2, /*ring allgather*/ 1, 1, 0, {0, 1});
  ActionList a4;
  ASSERT_EQ(d.core->on_recv(ag_recv->token, ag_recv->payload_bytes, 6.0, &a4), Status::kOk);
  const Action* local_ag = find_action(a4, Action::Kind::kSend, 1, ag_tag);
  ASSERT_NE(local_ag, nullptr) << "phase 3 did not start during the ring's allgather";
  EXPECT_EQ(local_ag->payload, d.p.recvbuf);
  EXPECT_EQ(local_ag->payload_bytes, 4 * sizeof(int32_t));
  EXPECT_FALSE(d.core->done());
  ActionList a5;
  ASSERT_EQ(d.core->on_send(ring_ag_send->token, 7.0, &a5), Status::kOk);
  EXPECT_EQ(find_action(a5, Action::Kind::kSend, 1), nullptr) << "block 0 sent once";
}

// ---------------------------------------------------------------------------------------
// A local order (Topology::hier_groups: GPU-NIC leaders first) decides who owns blocks, and so
// who talks between hosts; every rank still ends with the same bits, the reference's for that
// order, and integer sums stay exact.
TEST(HierLeaders, LocalOrderPicksTheInterHostRanks) {
  // Sizes 1 and 3: one block, so each host has exactly one inter-host rank; rank 3 leads.
  const std::vector<int> host_of = {0, 1, 1, 1};
  const std::vector<std::vector<int>> order = {{0}, {3, 1, 2}};
  std::vector<uint8_t> scratch;
  RingParams p;
  p.ring = {0, 1, 2, 3};
  p.count = 8;
  int buf[8] = {};
  p.sendbuf = p.recvbuf = buf;
  p.rank = 3;
  HierAllreduce lead(p, host_of, &scratch, order);
  EXPECT_EQ(lead.local_index(), 0);
  p.rank = 1;
  HierAllreduce other(p, host_of, &scratch, order);
  EXPECT_EQ(other.local_index(), 1);
  HierAllreduce plain(p, host_of, &scratch);
  EXPECT_EQ(plain.local_index(), 0) << "without an order rank 1 leads (rank order)";

  harness::Options o;
  o.n = 4;
  o.count = 333;
  o.segment_bytes = 64;
  o.collectives = 2;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    o.seed = seed;
    o.in_place = seed % 2;
    o.eager_probability = (seed % 3) / 2.0;
    o.dtype = seed % 2 ? DType::kFloat : DType::kInt64;
    harness::Result res;
    run_and_check(o, host_of, &res, order);
    if (::testing::Test::HasFatalFailure()) return;
    // Rank 0's only inter-host peer is the leader, rank 3.
    std::set<int> peers;
    for (const StepRecord& st : res.stats[0][0].steps) {
      if (st.from >= 0) peers.insert(st.from);
      if (st.to >= 0) peers.insert(st.to);
    }
    peers.erase(0);
    EXPECT_EQ(peers, (std::set<int>{3})) << "seed " << seed;
  }
}

TEST(HierLeaders, UnequalHostsAndBadOrders) {
  // Sizes 3 and 4 (3 blocks): host 1's order {6, 3, 4, 5} leaves rank 5 without a block.
  const std::vector<int> host_of = {0, 0, 0, 1, 1, 1, 1};
  const std::vector<std::vector<int>> order = {{2, 0, 1}, {6, 3, 4, 5}};
  harness::Options o;
  o.n = 7;
  o.count = 1001;
  o.segment_bytes = 128;
  o.collectives = 2;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    o.seed = seed;
    o.dtype = seed % 2 ? DType::kDouble : DType::kInt32;
    harness::Result res;
    run_and_check(o, host_of, &res, order);
    if (::testing::Test::HasFatalFailure()) return;
    for (const StepRecord& st : res.stats[0][5].steps) {
      for (int peer : {st.from, st.to}) {
        if (peer >= 0) {
          EXPECT_EQ(host_of[peer], 1) << "rank 5 owns no block: no inter-host peer";
        }
      }
    }
  }
  RingParams p;
  p.ring = {0, 1, 2, 3, 4, 5, 6};
  std::string why;
  EXPECT_EQ(HierAllreduce::validate(p, host_of, &why, {{0, 1, 2}, {3, 4, 5}}), Status::kErrArg);
  EXPECT_NE(why.find("permutation"), std::string::npos) << why;
  EXPECT_EQ(HierAllreduce::validate(p, host_of, &why, {{0, 1, 2}}), Status::kErrArg);
  EXPECT_EQ(HierAllreduce::validate(p, host_of, &why, {{0, 1, 3}, {2, 4, 5, 6}}), Status::kErrArg);
  EXPECT_EQ(HierAllreduce::validate(p, host_of, &why, order), Status::kOk) << why;
}

// ---------------------------------------------------------------------------------------
TEST(HierCost, FormulaAndDegenerateCases) {
  HierCostParams c;
  c.alpha_intra = 1e-6;
  c.beta_intra = 1e-10;
  c.alpha_inter = 5e-6;
  c.beta_inter = 1e-9;
  c.gamma = 0;
  EXPECT_EQ(hier_cost(0, {4, 4}, c), 0);
  EXPECT_EQ(hier_cost(1e6, {1}, c), 0);
  const double s = 1e6;
  // 2 hosts of 4: local 2 * (3 alpha + 3/4 S beta_intra), ring 2 alpha + S beta_inter.
  const double want =
      2 * (3 * c.alpha_intra + 0.75 * s * c.beta_intra) + 2 * c.alpha_inter + s * c.beta_inter;
  EXPECT_NEAR(hier_cost(s, {4, 4}, c), want, 1e-12);
  // One host: local phases only. One rank per host: the ring's 2(H-1)(alpha + S/H beta).
  EXPECT_NEAR(hier_cost(s, {8}, c), 2 * (7 * c.alpha_intra + 7.0 / 8 * s * c.beta_intra), 1e-12);
  EXPECT_NEAR(hier_cost(s, {1, 1, 1, 1}, c), 6 * c.alpha_inter + 1.5 * s * c.beta_inter, 1e-12);
  // An extra rank on one host makes its ranks send whole buffers: never cheaper.
  EXPECT_GT(hier_cost(s, {5, 4}, c), hier_cost(s, {4, 4}, c));
}

}  // namespace
}  // namespace skipring
