// Rabenseifner all-reduce core (recursive halving + recursive doubling, any n): under the
// in-process harness (n = 1..16, tiny and uneven counts, every op x type, random delivery
// orders, eager and rendezvous, back-to-back, in place) every rank must end with exactly the
// bits of the algorithm's reduction order, computed here sequentially; driven by hand, forged
// contribution sets (overlapping, incomplete) must be protocol errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "collectives/rabenseifner.h"
#include "collectives/recursive_doubling.h"
#include "collectives/reduce_kernels.h"
#include "collectives/wire_header.h"
#include "tests/unit/core_test_util.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"

namespace skipring {
namespace {

using testdata::Buffers;
using testdata::is_float;
using testdata::value_at;
using testutil::ring_of;
using testutil::SizeCase;

std::unique_ptr<CollectiveCore> make_rab(const RingParams& p, std::vector<uint8_t>* scratch) {
  return std::make_unique<RabenseifnerAllreduce>(p, scratch);
}

// The algorithm's reduction order, sequentially: fold-in (a = the extra), then per halving
// round k the pair (v, v | 2^k) reduces its common range, a = the lower virtual rank's
// partial; the lower one keeps the lower half. Block b's result is taken from its keeper.
std::vector<uint8_t> reference(ROp op, DType t, size_t count, const std::vector<int>& ring,
                               const std::vector<std::vector<uint8_t>>& by_rank) {
  const int n = static_cast<int>(ring.size());
  const size_t es = dtype_size(t);
  int p = 1, L = 0;
  while (2 * p <= n) p *= 2, ++L;
  const int e = n - p;
  std::vector<std::vector<uint8_t>> val(n);
  for (int i = 0; i < n; ++i) val[i] = by_rank[ring[i]];
  for (int i = 0; i < e; ++i) {
    EXPECT_EQ(reduce(op, t, val[2 * i + 1].data(), val[2 * i].data(), val[2 * i + 1].data(), count),
              Status::kOk);
  }
  std::vector<std::vector<uint8_t>> g(p);
  for (int v = 0; v < p; ++v) g[v] = val[v < e ? 2 * v + 1 : v + e];
  auto off = [&](int b) { return RabenseifnerAllreduce::block_offset(count, p, b); };
  std::vector<int> lo(p, 0), hi(p, p);
  for (int k = 0; k < L; ++k) {
    const int m = 1 << k;
    for (int v = 0; v < p; ++v) {
      if (v & m) continue;
      const int w = v | m;
      EXPECT_EQ(lo[v], lo[w]);
      const int mid = lo[v] + (hi[v] - lo[v]) / 2;
      // Lower half kept by v, upper half by w; a = v's partial in both.
      const size_t l0 = off(lo[v]), l1 = off(mid), h1 = off(hi[v]);
      EXPECT_EQ(reduce(op, t, g[v].data() + l0 * es, g[v].data() + l0 * es, g[w].data() + l0 * es,
                       l1 - l0),
                Status::kOk);
      EXPECT_EQ(reduce(op, t, g[w].data() + l1 * es, g[v].data() + l1 * es, g[w].data() + l1 * es,
                       h1 - l1),
                Status::kOk);
      hi[v] = mid;
      lo[w] = mid;
      hi[w] = mid + (mid - lo[v]);
    }
  }
  std::vector<uint8_t> res(count * es);
  for (int v = 0; v < p; ++v) {
    EXPECT_EQ(hi[v] - lo[v], 1);
    const size_t bytes = (off(hi[v]) - off(lo[v])) * es;
    if (bytes > 0) {  // res.data() is null for count 0
      std::memcpy(res.data() + off(lo[v]) * es, g[v].data() + off(lo[v]) * es, bytes);
    }
  }
  return res;
}

uint32_t expected_messages(int n, size_t count, int pos) {
  if (n == 1 || count == 0) return 0;
  int p = 1, L = 0;
  while (2 * p <= n) p *= 2, ++L;
  const int e = n - p;
  if (pos < 2 * e && pos % 2 == 0) return 1;
  if (pos < 2 * e) return 2 * L + 1;
  return 2 * L;
}

void run_and_check(harness::Options o) {
  o.make_core = make_rab;
  const Buffers in = testdata::make_inputs(o, o.seed * 31 + 7, /*wide=*/true);
  harness::Result res;
  ASSERT_NO_FATAL_FAILURE(testutil::run_clean(o, in, &res));
  const size_t bytes = o.count * dtype_size(o.dtype);
  const std::vector<int> ring = ring_of(o);
  for (int c = 0; c < o.collectives; ++c) {
    const std::vector<uint8_t> want = reference(o.op, o.dtype, o.count, ring, in[c]);
    for (int r = 0; r < o.n; ++r) {
      ASSERT_EQ(res.outputs[c][r].size(), bytes);
      ASSERT_TRUE(res.outputs[c][r] == want)
          << "rank " << r << " differs from the reduction order, collective " << c;
    }
    const bool order_sensitive = is_float(o.dtype) && (o.op == ROp::kSum || o.op == ROp::kProd);
    if (!order_sensitive && o.n > 0) {
      const std::vector<uint8_t> seq = testutil::rank_order_reduction(o, in[c]);
      EXPECT_TRUE(res.outputs[c][0] == seq) << "differs from the rank-order reduction";
    }
    uint64_t sent = 0, received = 0;
    for (int pos = 0; pos < o.n; ++pos) {
      const CollectiveStats& st = res.stats[c][ring[pos]];
      EXPECT_EQ(st.seq, static_cast<uint64_t>(c));
      EXPECT_EQ(st.messages_sent, expected_messages(o.n, o.count, pos)) << "position " << pos;
      EXPECT_EQ(st.messages_received, expected_messages(o.n, o.count, pos)) << "position " << pos;
      sent += st.messages_sent;
      received += st.messages_received;
    }
    EXPECT_EQ(sent, received);
  }
}

class RabenseifnerSizes : public ::testing::TestWithParam<SizeCase> {};

TEST_P(RabenseifnerSizes, ExactRandomOrders) {
  const SizeCase sc = GetParam();
  const double eager[] = {0.0, 1.0, 0.5, 0.3};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    harness::Options o;
    o.n = sc.n;
    o.count = sc.count;
    o.dtype = seed % 2 == 0 ? DType::kDouble : DType::kInt32;
    o.seed = seed + 100 * sc.n + 7 * sc.count;
    o.in_place = seed >= 3;
    o.eager_probability = eager[seed - 1];
    o.collectives = 3;
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_and_check(o);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllRanks, RabenseifnerSizes,
                         ::testing::ValuesIn(testutil::size_cases(/*two_n_plus_3=*/true)),
                         testutil::size_case_name);

TEST(RabenseifnerOpsTypes, EveryValidPair) {
  const int pairs = testutil::for_each_valid_pair([&](int t, int op, DType dt, ROp rop) {
    for (int n : {3, 6, 8}) {
      harness::Options o;
      o.n = n;
      o.count = 37;
      o.dtype = dt;
      o.op = rop;
      o.seed = 2000 + t * 97 + op * 13 + n;
      o.in_place = n == 6;
      o.collectives = 2;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + rop_name(rop) + " n=" + std::to_string(n));
      run_and_check(o);
      if (::testing::Test::HasFatalFailure()) return false;
    }
    return true;
  });
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_GT(pairs, 80);
}

TEST(RabenseifnerRandom, ManySchedules) {
  const auto pairs = testutil::valid_pairs();
  std::mt19937_64 rng(777);
  for (int i = 0; i < 150; ++i) {
    harness::Options o;
    testutil::random_basics(&o, pairs, rng, 20, 3000, 3);
    o.seed = rng();
    testutil::random_ring(&o, rng);
    testutil::random_start_times(&o, rng);
    o.links = rng() % 4 == 0;
    SCOPED_TRACE(testutil::schedule_trace(i, o));
    run_and_check(o);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(RabenseifnerRandom, LargeMessages) {
  for (int n : {5, 8, 13}) {
    harness::Options o;
    o.n = n;
    o.count = 100000;
    o.dtype = DType::kFloat;
    o.in_place = n != 8;
    o.collectives = 2;
    o.seed = n;
    o.eager_probability = 0.3;
    SCOPED_TRACE("n=" + std::to_string(n));
    run_and_check(o);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(RabenseifnerExactness, NanPayloadsFollowTheCanonicalOrder) {
  // Adding two NaNs returns one operand's payload on many machines: results then show the
  // operand order bit for bit, so every rank must match the reference's a/b order exactly.
  // Where NaN addition is commutative in bits this is weaker; the hand-driven tests below check
  // the operand order directly.
  for (int n : {2, 3, 5, 6, 8, 11, 16}) {
    for (bool in_place : {false, true}) {
      harness::Options o;
      o.n = n;
      o.count = 3 * n + 1;
      o.dtype = DType::kDouble;
      o.op = ROp::kSum;
      o.in_place = in_place;
      o.seed = 500 + n;
      o.make_core = make_rab;
      Buffers in(1, std::vector<std::vector<uint8_t>>(n, std::vector<uint8_t>(o.count * 8)));
      std::mt19937_64 rng(n);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < o.count; ++i) {
          uint64_t bits = 0x7ff8000000000000ull | (rng() & 0xfffffffffull) | (uint64_t(r) << 40);
          if (rng() % 4 == 0) {
            const double v = static_cast<double>(r) + 0.5;
            std::memcpy(&bits, &v, 8);
          }
          std::memcpy(in[0][r].data() + i * 8, &bits, 8);
        }
      }
      const harness::Result res = harness::run(o, in);
      ASSERT_EQ(res.status, Status::kOk) << res.error;
      const std::vector<uint8_t> want = reference(o.op, o.dtype, o.count, ring_of(o), in[0]);
      for (int r = 0; r < n; ++r) {
        EXPECT_TRUE(res.outputs[0][r] == want) << "n=" << n << " rank " << r;
      }
    }
  }
}

TEST(RabenseifnerCost, MovesLessDataThanRecursiveDoubling) {
  // Full-duplex links, 1 GB/s, S = 1 MiB: recursive doubling sends the whole buffer in each of
  // log2 p rounds; Rabenseifner 2 (p - 1) / p of it in all (plus the fold-in and the result for
  // n != p, once each).
  for (int n : {8, 6}) {
    harness::Options o;
    o.n = n;
    o.count = 1 << 18;
    o.dtype = DType::kFloat;
    o.links = true;
    o.latency_min = o.latency_max = 1e-6;
    o.eager_probability = 0;
    const Buffers in = testdata::make_inputs(o, 3);
    o.make_core = make_rab;
    const harness::Result rab = harness::run(o, in);
    o.make_core = [](const RingParams& p, std::vector<uint8_t>* s) {
      return std::unique_ptr<CollectiveCore>(new RecursiveDoublingAllreduce(p, s));
    };
    const harness::Result rd = harness::run(o, in);
    ASSERT_EQ(rab.status, Status::kOk) << rab.error;
    ASSERT_EQ(rd.status, Status::kOk) << rd.error;
    const double S = o.count * 4 / 1e9;
    const double model = (n == 8 ? 0.0 : 2 * S) + 2 * S * 3 / 4;  // p = 4 for n = 6
    const double model8 = 2 * S * 7 / 8;
    const double want = n == 8 ? model8 : model;
    EXPECT_LT(rab.end_time, 1.15 * want + 50e-6) << "n=" << n;
    EXPECT_LT(rab.end_time, 0.8 * rd.end_time) << "n=" << n;
    std::printf("n=%d rabenseifner %.3f ms (model %.3f), recursive doubling %.3f ms\n", n,
                rab.end_time * 1e3, want * 1e3, rd.end_time * 1e3);
  }
}

// ---------------------------------------------------------------------------------------
// Hand-driven cores.

using testutil::find_action;
using testutil::write_hdr;

struct Driven : testutil::DrivenCore<RabenseifnerAllreduce> {
  Driven(int rank, std::vector<int> ring, size_t count) {
    setup(rank, std::move(ring), count);
    core = std::make_unique<RabenseifnerAllreduce>(p, &scratch);
    start();
  }
};

TEST(RabenseifnerProtocol, OverlappingContributionSetIsAnError) {
  Driven d(0, {0, 1, 2, 3}, 8);
  const Action* recv = find_action(d.acts, Action::Kind::kRecv, 1);
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(recv->payload_bytes, 4 * sizeof(int32_t)) << "round 0 exchanges half the buffer";
  write_hdr(recv->header, kRabPhaseRs, 0, {0, 1});  // claims to include us already
  ActionList more = testutil::expect_recv_error(*d.core, *recv, 1.0, "overlaps");
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr) << "nothing may be summed";
}

TEST(RabenseifnerProtocol, LaterRoundOverlapAndIncompleteAllgatherAreErrors) {
  {
    Driven d(0, {0, 1, 2, 3}, 8);
    const Action* r0 = find_action(d.acts, Action::Kind::kRecv, 1);
    const Action* r1 = find_action(d.acts, Action::Kind::kRecv, 2);
    ASSERT_NE(r0, nullptr);
    ASSERT_NE(r1, nullptr);
    write_hdr(r0->header, kRabPhaseRs, 0, {1});
    ActionList a0;
    ASSERT_EQ(d.core->on_recv(r0->token, r0->payload_bytes, 1.0, &a0), Status::kOk);
    const Action* red = find_action(a0, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr);
    EXPECT_EQ(red->a, d.p.sendbuf) << "a = the lower virtual rank's partial";
    ActionList a1;
    ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &a1), Status::kOk);
    write_hdr(r1->header, kRabPhaseRs, 1, {1, 2});  // rank 1 summed twice
    ActionList a2 = testutil::expect_recv_error(*d.core, *r1, 3.0, "overlaps");
  }
  {
    // n = 2: one round each way; the allgather piece must carry the full set.
    Driven d(1, {0, 1}, 4);
    const Action* rs = find_action(d.acts, Action::Kind::kRecv, 0);
    ASSERT_NE(rs, nullptr);
    write_hdr(rs->header, kRabPhaseRs, 0, {0});
    ActionList a0;
    ASSERT_EQ(d.core->on_recv(rs->token, rs->payload_bytes, 1.0, &a0), Status::kOk);
    const Action* red = find_action(a0, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr);
    EXPECT_EQ(red->b, static_cast<const uint8_t*>(d.p.sendbuf) + 8)
        << "upper half, own partial as b";
    ActionList a1;
    ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &a1), Status::kOk);
    const Action* send0 = find_action(d.acts, Action::Kind::kSend, 0);
    ASSERT_NE(send0, nullptr);
    ActionList a2;
    ASSERT_EQ(d.core->on_send(send0->token, 3.0, &a2), Status::kOk);
    const Action* ag = find_action(a2, Action::Kind::kRecv, 0);
    ASSERT_NE(ag, nullptr) << "the allgather receive waits for the send of that region";
    write_hdr(ag->header, kRabPhaseAg, 0, {0});
    ActionList a3 = testutil::expect_recv_error(*d.core, *ag, 4.0, "expected");
  }
}

TEST(RabenseifnerProtocol, FoldInOverlapIsAnError) {
  Driven d(1, {0, 1, 2}, 4);  // position 0 folds into position 1
  ASSERT_FALSE(d.core->extra());
  const Action* fold = find_action(d.acts, Action::Kind::kRecv, 0);
  ASSERT_NE(fold, nullptr);
  write_hdr(fold->header, kRabPhaseRs, 1, {0, 1});
  ActionList more = testutil::expect_recv_error(*d.core, *fold, 1.0, "overlaps");
}

TEST(RabenseifnerProtocol, ExtraReceivesTheFullResult) {
  Driven d(0, {0, 1, 2}, 4);
  ASSERT_TRUE(d.core->extra());
  const Action* recv = find_action(d.acts, Action::Kind::kRecv, 1);
  ASSERT_NE(recv, nullptr);
  write_hdr(recv->header, kRabPhaseAg, 1, {0, 1});
  ActionList more;
  EXPECT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kErrProtocol);
}

}  // namespace
}  // namespace skipring
