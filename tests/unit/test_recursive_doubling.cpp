// Recursive-doubling all-reduce core: under the in-process harness (n = 1..16, tiny and uneven
// counts, every op x type, random delivery orders, eager and rendezvous, back-to-back and
// interleaved with the ring, in place) every rank must end with exactly the bits of the
// algorithm's canonical reduction tree (floats and NaN payloads included); and driven by hand,
// forged headers (overlapping or incomplete contribution sets, stale sequence numbers) must be
// protocol errors and buffers must never be written while a send reads them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <random>

#include "collectives/recursive_doubling.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring_allreduce.h"
#include "tests/unit/core_test_util.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"

namespace skipring {
namespace {

std::unique_ptr<CollectiveCore> make_rd(const RingParams& p, std::vector<uint8_t>* scratch) {
  return std::make_unique<RecursiveDoublingAllreduce>(p, scratch);
}

using testdata::Buffers;
using testdata::is_float;
using testdata::value_at;
using testutil::ring_of;
using testutil::SizeCase;

Buffers make_inputs(const harness::Options& o, uint64_t seed) {
  return testdata::make_inputs(o, seed, /*wide=*/true);
}

// The algorithm's reduction tree computed sequentially, independently of the core: fold-in
// of position 2i into 2i+1 (a = the lower position), then per round the lower half of each
// pair of blocks as a, the upper as b. The core must reproduce these bits on every rank.
std::vector<uint8_t> tree_reference(ROp op, DType t, size_t count, const std::vector<int>& ring,
                                    const std::vector<std::vector<uint8_t>>& by_rank) {
  const int n = static_cast<int>(ring.size());
  int p = 1;
  while (2 * p <= n) p *= 2;
  const int e = n - p;
  std::vector<std::vector<uint8_t>> val(n);
  for (int i = 0; i < n; ++i) val[i] = by_rank[ring[i]];
  for (int i = 0; i < e; ++i) {
    EXPECT_EQ(reduce(op, t, val[2 * i + 1].data(), val[2 * i].data(), val[2 * i + 1].data(), count),
              Status::kOk);
  }
  std::vector<std::vector<uint8_t>> g(p);
  for (int v = 0; v < p; ++v) g[v] = val[v < e ? 2 * v + 1 : v + e];
  for (int bit = 1; bit < p; bit <<= 1) {
    for (int v = 0; v < p; ++v) {
      if (v & bit) continue;
      std::vector<uint8_t> r(g[v].size());
      EXPECT_EQ(reduce(op, t, r.data(), g[v].data(), g[v | bit].data(), count), Status::kOk);
      g[v] = r;
      g[v | bit] = r;
    }
  }
  return g[0];
}

// Messages and step records one rank must report.
struct Expect {
  uint32_t sent, received;
  size_t steps;
};

Expect expected_counts(int n, size_t count, int pos) {
  if (n == 1 || count == 0) return {0, 0, 0};
  int p = 1, rounds = 0;
  while (2 * p <= n) p *= 2, ++rounds;
  const int e = n - p;
  const uint32_t l = static_cast<uint32_t>(rounds);
  if (pos < 2 * e && pos % 2 == 0) return {1, 1, 2};
  if (pos < 2 * e) return {l + 1, l + 1, static_cast<size_t>(rounds + 2)};
  return {l, l, static_cast<size_t>(rounds)};
}

// Runs the harness and checks every invariant; *out (if given) gets the result.
void run_and_check(harness::Options o, harness::Result* out = nullptr) {
  if (!o.make_core) o.make_core = make_rd;
  const Buffers in = make_inputs(o, o.seed * 31 + 7);
  harness::Result local;
  harness::Result& res = out ? *out : local;
  ASSERT_NO_FATAL_FAILURE(testutil::run_clean(o, in, &res));
  const size_t bytes = o.count * dtype_size(o.dtype);
  const std::vector<int> ring = ring_of(o);
  for (int c = 0; c < o.collectives; ++c) {
    const std::vector<uint8_t> tree = tree_reference(o.op, o.dtype, o.count, ring, in[c]);
    // Sequential reference in rank order: exact for integers and order-insensitive ops.
    const std::vector<uint8_t> seq = testutil::rank_order_reduction(o, in[c]);
    for (int r = 0; r < o.n; ++r) {
      ASSERT_EQ(res.outputs[c][r].size(), bytes);
      // Every rank ends with the same bits: those of the canonical tree.
      ASSERT_TRUE(res.outputs[c][r] == tree)
          << "rank " << r << " differs from the reduction tree, collective " << c;
    }
    const bool order_sensitive = is_float(o.dtype) && (o.op == ROp::kSum || o.op == ROp::kProd);
    if (!order_sensitive) {
      EXPECT_TRUE(res.outputs[c][0] == seq)
          << "result differs from the sequential reference, collective " << c;
    } else {
      for (size_t i = 0; i < o.count; ++i) {
        const long double got = value_at(o.dtype, res.outputs[c][0].data(), i);
        const long double want = value_at(o.dtype, seq.data(), i);
        long double scale = 0;  // sum of magnitudes bounds the rounding error of any order
        for (int r = 0; r < o.n; ++r) scale += std::fabs(value_at(o.dtype, in[c][r].data(), i));
        const long double tol = (o.dtype == DType::kFloat ? 1e-6L : 1e-14L) * (1 + scale) * o.n;
        ASSERT_LE(std::fabs(static_cast<double>(got - want)), static_cast<double>(tol))
            << "element " << i;
      }
    }
    uint64_t sent = 0, received = 0;
    for (int pos = 0; pos < o.n; ++pos) {
      const int r = ring[pos];
      const CollectiveStats& st = res.stats[c][r];
      const Expect e = expected_counts(o.n, o.count, pos);
      EXPECT_EQ(st.seq, static_cast<uint64_t>(c));
      EXPECT_EQ(st.skips, 0u);
      EXPECT_EQ(st.messages_sent, e.sent) << "rank " << r;
      EXPECT_EQ(st.messages_received, e.received) << "rank " << r;
      EXPECT_EQ(st.steps.size(), e.steps) << "rank " << r;
      sent += st.messages_sent;
      received += st.messages_received;
    }
    EXPECT_EQ(sent, received) << "every message sent was received exactly once";
  }
}

// ---------------------------------------------------------------------------------------
class RecursiveDoublingSizes : public ::testing::TestWithParam<SizeCase> {};

TEST_P(RecursiveDoublingSizes, ExactRandomOrders) {
  const SizeCase sc = GetParam();
  const double eager[] = {0.0, 1.0, 0.5, 0.5, 0.2, 0.8};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    harness::Options o;
    o.n = sc.n;
    o.count = sc.count;
    o.dtype = seed % 3 == 0 ? DType::kDouble : DType::kInt32;
    o.op = ROp::kSum;
    o.seed = seed + 100 * sc.n + 7 * sc.count;
    o.in_place = seed % 2 == 0;
    o.eager_probability = eager[seed - 1];
    o.collectives = 3;
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_and_check(o);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllRanks, RecursiveDoublingSizes,
                         ::testing::ValuesIn(testutil::size_cases()), testutil::size_case_name);

TEST(RecursiveDoublingOpsTypes, EveryValidPair) {
  const int pairs = testutil::for_each_valid_pair([&](int t, int op, DType dt, ROp rop) {
    for (int n : {3, 5, 6, 8}) {
      for (bool in_place : {false, true}) {
        harness::Options o;
        o.n = n;
        o.count = 37;
        o.dtype = dt;
        o.op = rop;
        o.seed = 1000 + t * 97 + op * 13 + n + (in_place ? 5000 : 0);
        o.in_place = in_place;
        o.collectives = 2;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + rop_name(rop) + " n=" + std::to_string(n) +
                     (in_place ? " in place" : ""));
        run_and_check(o);
        if (::testing::Test::HasFatalFailure()) return false;
      }
    }
    return true;
  });
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_GT(pairs, 80);  // 13 types, about 7 ops each
}

TEST(RecursiveDoublingOpsTypes, InvalidParametersRejected) {
  RingParams p;
  p.ring = {0, 1};
  p.count = 4;
  p.dtype = DType::kFloat;
  p.op = ROp::kBxor;
  int a[4], b[4];
  p.sendbuf = a;
  p.recvbuf = b;
  std::string why;
  EXPECT_EQ(RecursiveDoublingAllreduce::validate(p, &why), Status::kErrOp);
  EXPECT_NE(why.find("float"), std::string::npos);
  p.op = ROp::kSum;
  EXPECT_EQ(RecursiveDoublingAllreduce::validate(p, &why), Status::kOk);
  p.ring = {0, 0};
  EXPECT_EQ(RecursiveDoublingAllreduce::validate(p, &why), Status::kErrArg);
  p.ring = {1, 0};
  p.recvbuf = nullptr;
  EXPECT_EQ(RecursiveDoublingAllreduce::validate(p, &why), Status::kErrBuffer);
  p.count = 0;
  EXPECT_EQ(RecursiveDoublingAllreduce::validate(p, &why), Status::kOk);
}

TEST(RecursiveDoublingRandom, ManySchedules) {
  // Random n, count, op x type, ring order, latencies, eager/rendezvous mix, start skew.
  const auto pairs = testutil::valid_pairs();
  std::mt19937_64 rng(4242);
  for (int i = 0; i < 400; ++i) {
    harness::Options o;
    testutil::random_basics(&o, pairs, rng, 5, 1500, 4);
    o.seed = rng();
    testutil::random_ring(&o, rng);
    testutil::random_start_times(&o, rng);
    SCOPED_TRACE(testutil::schedule_trace(i, o));
    run_and_check(o);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(RecursiveDoublingRandom, EagerOnlyAndRendezvousOnly) {
  for (double eager : {0.0, 1.0}) {
    for (int n : {2, 3, 4, 7, 12, 16}) {
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        harness::Options o;
        o.n = n;
        o.count = 513;
        o.dtype = DType::kFloat;
        o.eager_probability = eager;
        o.in_place = seed % 2 == 1;
        o.collectives = 4;
        o.seed = seed * 11 + n;
        SCOPED_TRACE("eager=" + std::to_string(eager) + " n=" + std::to_string(n));
        run_and_check(o);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Messages large enough that the round slots no longer all fit the pre-post budget, so
// slots are reused once their reduction and send have finished.
TEST(RecursiveDoublingRandom, SlotReuseLargeMessages) {
  for (int n : {8, 13, 16}) {
    for (double eager : {0.0, 1.0}) {
      harness::Options o;
      o.n = n;
      o.count = 200000;  // 800 KB of int32: two slots for three or four rounds
      o.dtype = DType::kInt32;
      o.eager_probability = eager;
      o.in_place = n % 2 == 0;
      o.collectives = 2;
      o.seed = n * 3 + static_cast<uint64_t>(eager);
      o.latency_max = 50e-6;
      SCOPED_TRACE("n=" + std::to_string(n) + " eager=" + std::to_string(eager));
      run_and_check(o);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Back to back with the ring on the same ranks (seq even: recursive doubling, odd: ring), as
// the communicator does when it picks by size: tags and sequence numbers must not clash.
TEST(RecursiveDoublingRandom, InterleavedWithRing) {
  for (int n : {3, 4, 6, 9}) {
    harness::Options o;
    o.n = n;
    o.count = 300;
    o.dtype = DType::kInt64;
    o.collectives = 6;
    o.seed = 77 + n;
    o.segment_bytes = 256;
    o.make_core = [](const RingParams& p, std::vector<uint8_t>* scratch) {
      std::unique_ptr<CollectiveCore> c;
      if (p.seq % 2 == 0) {
        c = std::make_unique<RecursiveDoublingAllreduce>(p, scratch);
      } else {
        c = std::make_unique<RingAllreduce>(p, scratch);
      }
      return c;
    };
    const Buffers in = make_inputs(o, 5);
    const harness::Result res = harness::run(o, in);
    ASSERT_EQ(res.status, Status::kOk) << res.error;
    EXPECT_FALSE(res.leftover_messages);
    for (int c = 0; c < o.collectives; ++c) {
      std::vector<uint8_t> seq = in[c][0];
      for (int r = 1; r < n; ++r) {
        ASSERT_EQ(reduce(o.op, o.dtype, seq.data(), seq.data(), in[c][r].data(), o.count),
                  Status::kOk);
      }
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(res.outputs[c][r], seq) << "n=" << n << " collective " << c << " rank " << r;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Floats: bitwise identical on every rank, also where IEEE arithmetic is not commutative in
// bits (NaN payloads: x86 returns the first operand's payload), which only a canonical
// operand order makes deterministic.
template <typename T, typename Bits>
void nan_payload_case(DType dt, int n, uint64_t seed) {
  harness::Options o;
  o.n = n;
  o.count = 64;
  o.dtype = dt;
  o.op = ROp::kSum;
  o.seed = seed;
  o.in_place = seed % 2 == 0;
  Buffers in(1, std::vector<std::vector<uint8_t>>(n, std::vector<uint8_t>(o.count * sizeof(T))));
  std::mt19937_64 rng(seed);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < o.count; ++i) {
      T v = static_cast<T>(
          std::ldexp(static_cast<double>(rng() % 1000) - 500.0, static_cast<int>(rng() % 60) - 30));
      if ((rng() % 3) == 0) {
        // A quiet NaN whose payload names the rank and element.
        const T q = std::numeric_limits<T>::quiet_NaN();
        Bits b;
        std::memcpy(&b, &q, sizeof(b));
        b |= static_cast<Bits>((r * 131 + i) & 0xffff);
        std::memcpy(&v, &b, sizeof(b));
      }
      std::memcpy(in[0][r].data() + i * sizeof(T), &v, sizeof(T));
    }
  }
  o.make_core = make_rd;
  const harness::Result res = harness::run(o, in);
  ASSERT_EQ(res.status, Status::kOk) << res.error;
  const std::vector<uint8_t> tree = tree_reference(o.op, o.dtype, o.count, ring_of(o), in[0]);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(res.outputs[0][r], tree) << dtype_name(dt) << " n=" << n << " rank " << r;
  }
}

TEST(RecursiveDoublingExactness, NanPayloadsBitwiseIdentical) {
  // Check the premise: on this machine a + b and b + a differ in bits for two NaNs.
  const float qa = std::numeric_limits<float>::quiet_NaN();
  uint32_t ba, bb;
  std::memcpy(&ba, &qa, 4);
  bb = ba | 0x1234;
  ba |= 0x0042;
  float xs[8], ys[8], ab[8], ba_[8];
  for (int i = 0; i < 8; ++i) {
    std::memcpy(&xs[i], &ba, 4);
    std::memcpy(&ys[i], &bb, 4);
  }
  ASSERT_EQ(reduce(ROp::kSum, DType::kFloat, ab, xs, ys, 8), Status::kOk);
  ASSERT_EQ(reduce(ROp::kSum, DType::kFloat, ba_, ys, xs, 8), Status::kOk);
  if (std::memcmp(ab, ba_, sizeof(ab)) == 0) {
    std::cout << "note: NaN addition is commutative in bits here; the test is weaker\n";
  }
  for (int n : {2, 3, 5, 6, 8, 11, 16}) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      nan_payload_case<float, uint32_t>(DType::kFloat, n, seed + n * 10);
      nan_payload_case<double, uint64_t>(DType::kDouble, n, seed + n * 10 + 1);
    }
  }
}

TEST(RecursiveDoublingExactness, FloatsIdenticalAcrossRanksManyOrders) {
  for (int n = 2; n <= 16; ++n) {
    for (DType dt : {DType::kFloat, DType::kDouble, DType::kLongDouble}) {
      for (uint64_t seed = 1; seed <= 4; ++seed) {
        harness::Options o;
        o.n = n;
        o.count = 211;
        o.dtype = dt;
        o.op = seed % 4 == 0 ? ROp::kProd : ROp::kSum;
        o.seed = seed * 1000 + n;
        o.in_place = seed % 2 == 1;
        o.eager_probability = (seed % 3) / 2.0;
        o.latency_max = 1e-6 * (1 + seed * 10);
        SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
        run_and_check(o);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
TEST(RecursiveDoublingStats, StepRecordsAndWait) {
  harness::Options o;
  o.n = 4;
  o.count = 100;
  o.start_time = {0, 0, 0, 1e-3};  // rank 3 arrives 1 ms late
  harness::Result res;
  run_and_check(o, &res);
  ASSERT_EQ(res.status, Status::kOk);
  const CollectiveStats& st = res.stats[0][0];
  ASSERT_EQ(st.steps.size(), 2u);
  EXPECT_EQ(st.steps[0].phase, Phase::kReduceScatter);
  EXPECT_EQ(st.steps[0].from, 1);
  EXPECT_EQ(st.steps[0].to, 1);
  EXPECT_EQ(st.steps[1].from, 2);
  EXPECT_EQ(st.steps[1].step, 1);
  // Rank 2 needs rank 3's data before its round-1 send: rank 0 waits about 1 ms in round 1.
  EXPECT_LT(st.steps[0].wait_s, 0.5e-3);
  EXPECT_GT(st.steps[1].wait_s, 0.9e-3);
  EXPECT_GT(st.wait_s, 0.9e-3);
  // Rank 3 itself hardly waits.
  EXPECT_LT(res.stats[0][3].wait_s, 0.5e-3);
}

TEST(RecursiveDoublingStats, FoldInAndResultSteps) {
  harness::Options o;
  o.n = 6;  // p = 4: positions 0 and 2 fold into 1 and 3
  o.count = 10;
  o.ring = {5, 4, 3, 2, 1, 0};
  harness::Result res;
  run_and_check(o, &res);
  ASSERT_EQ(res.status, Status::kOk);
  const CollectiveStats& extra = res.stats[0][5];  // position 0
  ASSERT_EQ(extra.steps.size(), 2u);
  EXPECT_EQ(extra.steps[0].phase, Phase::kReduceScatter);
  EXPECT_EQ(extra.steps[0].to, 4);
  EXPECT_EQ(extra.steps[0].from, -1);
  EXPECT_EQ(extra.steps[1].phase, Phase::kAllgather);
  EXPECT_EQ(extra.steps[1].from, 4);
  const CollectiveStats& partner = res.stats[0][4];  // position 1, virtual rank 0
  ASSERT_EQ(partner.steps.size(), 4u);
  EXPECT_EQ(partner.steps[0].from, 5);
  EXPECT_EQ(partner.steps[1].from, 2);  // virtual rank 1 = position 3
  EXPECT_EQ(partner.steps[2].from, 1);  // virtual rank 2 = position 4
  EXPECT_EQ(partner.steps[3].phase, Phase::kAllgather);
  EXPECT_EQ(partner.steps[3].to, 5);
}

// ---------------------------------------------------------------------------------------
// Hand-driven cores.

using testutil::find_action;
using testutil::write_hdr;

struct Driven : testutil::DrivenCore<RecursiveDoublingAllreduce> {
  Driven(int rank, std::vector<int> ring, size_t count, bool in_place = false) {
    setup(rank, std::move(ring), count);
    if (in_place) {
      outbuf = in;
      p.sendbuf = p.recvbuf = outbuf.data();
    }
    core = std::make_unique<RecursiveDoublingAllreduce>(p, &scratch);
    start();
  }
};

TEST(RecursiveDoublingProtocol, OverlappingContributionSetIsAnError) {
  Driven d(0, {0, 1, 2, 3}, 3);
  const Action* recv = find_action(d.acts, Action::Kind::kRecv, 1);
  ASSERT_NE(recv, nullptr);
  // Forge the round-0 partner's piece claiming to include rank 0 (us) already.
  write_hdr(recv->header, kRdPhaseRound, 0, {0, 1});
  ActionList more = testutil::expect_recv_error(*d.core, *recv, 1.0, "overlaps");
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr) << "nothing may be summed";
}

TEST(RecursiveDoublingProtocol, EarlyLaterRoundCheckedAgainstEarlierRounds) {
  Driven d(0, {0, 1, 2, 3}, 3);
  const Action* r0 = find_action(d.acts, Action::Kind::kRecv, 1);
  const Action* r1 = find_action(d.acts, Action::Kind::kRecv, 2);
  ASSERT_NE(r0, nullptr);
  ASSERT_NE(r1, nullptr);
  EXPECT_NE(r0->tag, r1->tag);
  // Round 1 arrives first claiming {1, 2}: disjoint from {0} so far, but not from round 0's.
  write_hdr(r1->header, kRdPhaseRound, 1, {1, 2});
  ActionList more;
  ASSERT_EQ(d.core->on_recv(r1->token, r1->payload_bytes, 1.0, &more), Status::kOk);
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr);
  write_hdr(r0->header, kRdPhaseRound, 0, {1});
  more.clear();
  ASSERT_EQ(d.core->on_recv(r0->token, r0->payload_bytes, 2.0, &more), Status::kOk);
  const Action* red = find_action(more, Action::Kind::kReduce);
  ASSERT_NE(red, nullptr);
  ActionList after;
  EXPECT_EQ(d.core->on_reduce(red->token, 3.0, &after), Status::kErrProtocol);
  EXPECT_NE(d.core->error().find("overlaps"), std::string::npos) << d.core->error();
}

TEST(RecursiveDoublingProtocol, FoldInOverlapAndIncompleteResultAreErrors) {
  {
    // n = 3: position 0 folds into position 1.
    Driven d(1, {0, 1, 2}, 2);
    const Action* fold = find_action(d.acts, Action::Kind::kRecv, 0);
    ASSERT_NE(fold, nullptr);
    write_hdr(fold->header, kRdPhaseFold, 0, {0, 1});
    ActionList more = testutil::expect_recv_error(*d.core, *fold, 1.0, "overlaps");
  }
  {
    Driven d(0, {0, 1, 2}, 2);
    ASSERT_TRUE(d.core->extra());
    const Action* res = find_action(d.acts, Action::Kind::kRecv, 1);
    ASSERT_NE(res, nullptr);
    write_hdr(res->header, kRdPhaseResult, 0, {0, 1});  // rank 2 missing
    ActionList more = testutil::expect_recv_error(*d.core, *res, 1.0, "incomplete");
  }
}

TEST(RecursiveDoublingProtocol, StaleSequenceWrongPhaseAndSizeAreErrors) {
  {
    Driven d(0, {0, 1}, 2);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv);
    ASSERT_NE(recv, nullptr);
    write_hdr(recv->header, kRdPhaseRound, 0, {1}, /*seq=*/4);
    ActionList more = testutil::expect_recv_error(*d.core, *recv, 1.0, "collective 4");
  }
  {
    Driven d(0, {0, 1}, 2);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv);
    write_hdr(recv->header, /*ring allgather*/ 1, 0, {1});
    ActionList more;
    EXPECT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kErrProtocol);
  }
  {
    Driven d(0, {0, 1}, 2);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv);
    write_hdr(recv->header, kRdPhaseRound, 0, {1});
    ActionList more;
    EXPECT_EQ(d.core->on_recv(recv->token, 4, 1.0, &more), Status::kErrProtocol);
    EXPECT_NE(d.core->error().find("payload bytes"), std::string::npos) << d.core->error();
  }
}

TEST(RecursiveDoublingProtocol, FirstRoundSendsFromUserBufferCanonicalOrder) {
  for (int rank : {0, 1}) {
    Driven d(rank, {0, 1}, 5);
    const Action* send = find_action(d.acts, Action::Kind::kSend);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv);
    ASSERT_NE(send, nullptr);
    ASSERT_NE(recv, nullptr);
    EXPECT_EQ(send->payload, d.p.sendbuf) << "no copy before the first send";
    EXPECT_EQ(send->payload_bytes, 5 * sizeof(int32_t));
    write_hdr(recv->header, kRdPhaseRound, 0, {1 - rank});
    ActionList more;
    ASSERT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kOk);
    const Action* red = find_action(more, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr) << "not in place: reduce at once, the send reads sendbuf only";
    EXPECT_EQ(red->dst, d.p.recvbuf);
    // a = rank 0's operand on both sides.
    EXPECT_EQ(red->a, rank == 0 ? d.p.sendbuf : recv->payload);
    EXPECT_EQ(red->b, rank == 0 ? recv->payload : d.p.sendbuf);
    ActionList after;
    ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &after), Status::kOk);
    EXPECT_FALSE(d.core->done()) << "the send is still in flight";
    ASSERT_EQ(d.core->on_send(send->token, 3.0, &after), Status::kOk);
    EXPECT_TRUE(d.core->done());
    EXPECT_NE(find_action(after, Action::Kind::kDone), nullptr);
  }
}

TEST(RecursiveDoublingProtocol, InPlaceWaitsForTheSendBeforeWritingRecvbuf) {
  Driven d(0, {0, 1}, 5, /*in_place=*/true);
  const Action* send = find_action(d.acts, Action::Kind::kSend);
  const Action* recv = find_action(d.acts, Action::Kind::kRecv);
  ASSERT_NE(send, nullptr);
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(send->payload, d.p.recvbuf);
  write_hdr(recv->header, kRdPhaseRound, 0, {1});
  ActionList more;
  ASSERT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kOk);
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr)
      << "recvbuf is being sent: no reduction into it yet";
  more.clear();
  ASSERT_EQ(d.core->on_send(send->token, 2.0, &more), Status::kOk);
  const Action* red = find_action(more, Action::Kind::kReduce);
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->dst, d.p.recvbuf);
  EXPECT_EQ(red->a, d.p.recvbuf);
  ActionList after;
  ASSERT_EQ(d.core->on_reduce(red->token, 3.0, &after), Status::kOk);
  EXPECT_TRUE(d.core->done());
}

TEST(RecursiveDoublingProtocol, ExtraInPlaceReceivesOnlyAfterItsSend) {
  Driven d(0, {0, 1, 2}, 4, /*in_place=*/true);
  ASSERT_TRUE(d.core->extra());
  EXPECT_EQ(find_action(d.acts, Action::Kind::kRecv), nullptr);
  const Action* send = find_action(d.acts, Action::Kind::kSend, 1);
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->payload, d.p.recvbuf);
  ActionList more;
  ASSERT_EQ(d.core->on_send(send->token, 1.0, &more), Status::kOk);
  const Action* recv = find_action(more, Action::Kind::kRecv, 1);
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(recv->payload, d.p.recvbuf);
  write_hdr(recv->header, kRdPhaseResult, 0, {0, 1, 2});
  ActionList after;
  ASSERT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 2.0, &after), Status::kOk);
  EXPECT_TRUE(d.core->done());
}

TEST(RecursiveDoublingProtocol, LaterRoundsSendHeaderAndPayloadContiguously) {
  // n = 8, rank 0: rounds 1 and 2 send from scratch slots with the header just before the
  // payload (one message without staging), and the last reduction writes recvbuf.
  Driven d(0, {0, 1, 2, 3, 4, 5, 6, 7}, 6);
  ASSERT_EQ(d.core->rounds(), 3);
  const std::vector<std::vector<int>> sets = {{1}, {2, 3}, {4, 5, 6, 7}};
  for (int k = 0; k < 3; ++k) {
    const int peer = 1 << k;
    const Action* recv = find_action(d.acts, Action::Kind::kRecv, peer);
    ASSERT_NE(recv, nullptr) << "every round's receive is posted up front";
    write_hdr(recv->header, kRdPhaseRound, k, sets[k]);
    ActionList more;
    ASSERT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0 + k, &more), Status::kOk)
        << d.core->error();
    const Action* red = find_action(more, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr);
    EXPECT_EQ(red->dst, k == 2 ? d.p.recvbuf : recv->payload);
    ActionList after;
    ASSERT_EQ(d.core->on_reduce(red->token, 1.5 + k, &after), Status::kOk);
    if (k < 2) {
      const Action* send = find_action(after, Action::Kind::kSend, 2 << k);
      ASSERT_NE(send, nullptr);
      EXPECT_EQ(send->payload, recv->payload);
      EXPECT_EQ(static_cast<uint8_t*>(send->header) + send->header_bytes, send->payload);
    }
  }
  EXPECT_FALSE(d.core->done()) << "sends still in flight";
}

TEST(RecursiveDoublingProtocol, SlotReusedOnlyAfterItsSendCompletes) {
  // 800 KB per slot: only two round slots for three rounds. Round 2 reuses round 0's slot,
  // which round 1 sends from: its receive is posted only once that send has completed.
  Driven d(0, {0, 1, 2, 3, 4, 5, 6, 7}, 200000);
  ASSERT_EQ(d.core->rounds(), 3);
  const Action* r0 = find_action(d.acts, Action::Kind::kRecv, 1);
  const Action* r1 = find_action(d.acts, Action::Kind::kRecv, 2);
  ASSERT_NE(r0, nullptr);
  ASSERT_NE(r1, nullptr);
  ASSERT_EQ(find_action(d.acts, Action::Kind::kRecv, 4), nullptr);
  write_hdr(r0->header, kRdPhaseRound, 0, {1});
  ActionList a0;
  ASSERT_EQ(d.core->on_recv(r0->token, r0->payload_bytes, 1.0, &a0), Status::kOk);
  const Action* red0 = find_action(a0, Action::Kind::kReduce);
  ASSERT_NE(red0, nullptr);
  ActionList a1;
  ASSERT_EQ(d.core->on_reduce(red0->token, 2.0, &a1), Status::kOk);
  const Action* send1 = find_action(a1, Action::Kind::kSend, 2);
  ASSERT_NE(send1, nullptr);
  EXPECT_EQ(send1->payload, r0->payload);
  write_hdr(r1->header, kRdPhaseRound, 1, {2, 3});
  ActionList a2;
  ASSERT_EQ(d.core->on_recv(r1->token, r1->payload_bytes, 3.0, &a2), Status::kOk);
  const Action* red1 = find_action(a2, Action::Kind::kReduce);
  ASSERT_NE(red1, nullptr);
  ActionList a3;
  ASSERT_EQ(d.core->on_reduce(red1->token, 4.0, &a3), Status::kOk);
  EXPECT_NE(find_action(a3, Action::Kind::kSend, 4), nullptr);
  EXPECT_EQ(find_action(a3, Action::Kind::kRecv), nullptr) << "slot 0 is still being sent";
  ActionList a4;
  ASSERT_EQ(d.core->on_send(send1->token, 5.0, &a4), Status::kOk);
  const Action* r2 = find_action(a4, Action::Kind::kRecv, 4);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->payload, r0->payload);
}

TEST(RecursiveDoublingProtocol, FoldInReducesCanonicallyIntoItsSlot) {
  // n = 3: position 0 (rank 2 here) folds into position 1 (rank 0); a = the extra's input.
  Driven d(0, {2, 0, 1}, 4);
  ASSERT_FALSE(d.core->extra());
  EXPECT_EQ(find_action(d.acts, Action::Kind::kSend), nullptr) << "round 0 waits for the fold";
  const Action* fold = find_action(d.acts, Action::Kind::kRecv, 2);
  ASSERT_NE(fold, nullptr);
  write_hdr(fold->header, kRdPhaseFold, 0, {2});
  ActionList more;
  ASSERT_EQ(d.core->on_recv(fold->token, fold->payload_bytes, 1.0, &more), Status::kOk);
  const Action* red = find_action(more, Action::Kind::kReduce);
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->a, fold->payload);
  EXPECT_EQ(red->b, d.p.sendbuf);
  EXPECT_EQ(red->dst, fold->payload);
  ActionList after;
  ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &after), Status::kOk);
  const Action* send = find_action(after, Action::Kind::kSend, 1);
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->payload, fold->payload);
  EXPECT_EQ(static_cast<uint8_t*>(send->header) + send->header_bytes, send->payload);
  WireHeader h;
  std::memcpy(&h, send->header, sizeof(h));
  uint64_t set;
  std::memcpy(&set, static_cast<uint8_t*>(send->header) + sizeof(h), 8);
  EXPECT_EQ(h.phase, kRdPhaseRound);
  EXPECT_EQ(set, 0b101u) << "the round-0 partial sums ranks 0 and 2";
}

}  // namespace
}  // namespace skipring
