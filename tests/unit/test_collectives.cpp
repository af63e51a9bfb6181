// Ring reduce-scatter, ring allgather, chain broadcast and chain reduce (ring_collectives.h)
// under the in-process harness: n = 1..16, tiny and uneven counts, uneven block counts, every
// op x type, random delivery orders and ring orders, eager and rendezvous, back-to-back, in
// place, several segment sizes; results must be bitwise equal to a sequential computation of the
// same reduction order, and identical on every rank. Driven by hand, forged contribution sets
// must be protocol errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "collectives/reduce_kernels.h"
#include "collectives/ring_collectives.h"
#include "collectives/wire_header.h"
#include "tests/unit/core_test_util.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"

namespace skipring {
namespace {

using testdata::Buffers;
using testutil::ring_of;
using testutil::SizeCase;

enum class Coll { kReduceScatter, kAllgather, kBcast, kReduce };
const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kAllgather:
      return "allgather";
    case Coll::kBcast:
      return "bcast";
    case Coll::kReduce:
      return "reduce";
  }
  return "?";
}

struct Case {
  harness::Options o;
  Coll coll = Coll::kReduceScatter;
  CollParams cp;  // root, block_counts
};

// ((x[c+1] op x[c+2]) op ...) op x[c] over elements [b, e), in ring positions.
std::vector<uint8_t> chain(ROp op, DType t, const std::vector<int>& ring, int c,
                           const std::vector<std::vector<uint8_t>>& in, size_t b, size_t e) {
  const int n = static_cast<int>(ring.size());
  const size_t es = dtype_size(t);
  std::vector<uint8_t> acc(in[ring[(c + 1) % n]].begin() + b * es,
                           in[ring[(c + 1) % n]].begin() + e * es);
  for (int j = 2; j <= n; ++j) {
    const uint8_t* x = in[ring[(c + j) % n]].data() + b * es;
    EXPECT_EQ(reduce(op, t, acc.data(), acc.data(), x, e - b), Status::kOk);
  }
  return acc;
}

void run_case(Case cs) {
  harness::Options& o = cs.o;
  const CollParams cp = cs.cp;
  const Coll coll = cs.coll;
  o.make_core = [cp, coll](const RingParams& p,
                           std::vector<uint8_t>* s) -> std::unique_ptr<CollectiveCore> {
    switch (coll) {
      case Coll::kReduceScatter:
        return std::make_unique<RingReduceScatter>(p, cp, s);
      case Coll::kAllgather:
        return std::make_unique<RingAllgather>(p, cp, s);
      case Coll::kBcast:
        return std::make_unique<ChainBroadcast>(p, cp, s);
      case Coll::kReduce:
        return std::make_unique<ChainReduce>(p, cp, s);
    }
    return nullptr;
  };
  const Buffers in = testdata::make_inputs(o, o.seed * 17 + 3, /*wide=*/true);
  harness::Result res;
  ASSERT_NO_FATAL_FAILURE(testutil::run_clean(o, in, &res));
  const std::vector<int> ring = ring_of(o);
  const size_t es = dtype_size(o.dtype);
  const std::vector<size_t> off = block_offsets(cp.block_counts, o.count, o.n);
  const std::vector<uint8_t> poison(o.count * es, 0xA5);
  for (int c = 0; c < o.collectives; ++c) {
    for (int pos = 0; pos < o.n; ++pos) {
      const int r = ring[pos];
      const std::vector<uint8_t>& got = res.outputs[c][r];
      ASSERT_EQ(got.size(), o.count * es);
      // What every element of rank r's recvbuf must hold.
      std::vector<uint8_t> want = o.in_place ? in[c][r] : poison;
      switch (coll) {
        case Coll::kReduceScatter: {
          const std::vector<uint8_t> blk =
              chain(o.op, o.dtype, ring, pos, in[c], off[r], off[r + 1]);
          std::copy(blk.begin(), blk.end(), want.begin() + off[r] * es);
          break;
        }
        case Coll::kAllgather:
          for (int q = 0; q < o.n; ++q) {
            std::copy(in[c][q].begin() + off[q] * es, in[c][q].begin() + off[q + 1] * es,
                      want.begin() + off[q] * es);
          }
          break;
        case Coll::kBcast:
          want = in[c][cp.root];
          break;
        case Coll::kReduce:
          if (r == cp.root) want = chain(o.op, o.dtype, ring, pos, in[c], 0, o.count);
          break;
      }
      ASSERT_TRUE(got == want) << coll_name(coll) << ": rank " << r << " collective " << c;
    }
    uint64_t sent = 0, received = 0;
    for (int r = 0; r < o.n; ++r) {
      EXPECT_EQ(res.stats[c][r].seq, static_cast<uint64_t>(c));
      sent += res.stats[c][r].messages_sent;
      received += res.stats[c][r].messages_received;
    }
    EXPECT_EQ(sent, received);
  }
}

const Coll kAll[] = {Coll::kReduceScatter, Coll::kAllgather, Coll::kBcast, Coll::kReduce};

class CollectiveSizes : public ::testing::TestWithParam<SizeCase> {};

TEST_P(CollectiveSizes, ExactRandomOrders) {
  const SizeCase sc = GetParam();
  for (Coll coll : kAll) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      Case cs;
      cs.coll = coll;
      cs.o.n = sc.n;
      cs.o.count = sc.count;
      cs.o.dtype = seed == 2 ? DType::kDouble : DType::kInt32;
      cs.o.seed = seed + 100 * sc.n + 7 * sc.count + 1000 * static_cast<int>(coll);
      cs.o.in_place = seed == 3;
      cs.o.eager_probability = seed == 1 ? 0.0 : seed == 2 ? 1.0 : 0.5;
      cs.o.segment_bytes = seed == 3 ? 8 : 64;
      cs.o.collectives = 2;
      cs.cp.root = static_cast<int>((seed * 5) % sc.n);
      SCOPED_TRACE(std::string(coll_name(coll)) + " seed " + std::to_string(seed));
      run_case(cs);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllRanks, CollectiveSizes, ::testing::ValuesIn(testutil::size_cases()),
                         testutil::size_case_name);

TEST(CollectiveOpsTypes, ReduceScatterAndReduceEveryValidPair) {
  const int pairs = testutil::for_each_valid_pair([&](int t, int op, DType dt, ROp rop) {
    for (Coll coll : {Coll::kReduceScatter, Coll::kReduce}) {
      for (int n : {3, 5}) {
        Case cs;
        cs.coll = coll;
        cs.o.n = n;
        cs.o.count = 41;
        cs.o.dtype = dt;
        cs.o.op = rop;
        cs.o.seed = 3000 + t * 97 + op * 13 + n;
        cs.o.in_place = n == 5;
        cs.cp.root = n - 2;
        SCOPED_TRACE(std::string(coll_name(coll)) + " " + dtype_name(dt) + " " + rop_name(rop) +
                     " n=" + std::to_string(n));
        run_case(cs);
        if (::testing::Test::HasFatalFailure()) return false;
      }
    }
    return true;
  });
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_GT(pairs, 80);
}

TEST(CollectiveOpsTypes, AllgatherAndBcastEveryType) {
  for (int t = 0; t < kNumDTypes; ++t) {
    for (Coll coll : {Coll::kAllgather, Coll::kBcast}) {
      Case cs;
      cs.coll = coll;
      cs.o.n = 6;
      cs.o.count = 29;
      cs.o.dtype = static_cast<DType>(t);
      for (int op = 0; op < kNumROps; ++op) {
        if (op_valid(static_cast<ROp>(op), cs.o.dtype)) cs.o.op = static_cast<ROp>(op);
      }
      cs.o.seed = 4000 + t;
      cs.cp.root = 4;
      SCOPED_TRACE(std::string(coll_name(coll)) + " " + dtype_name(cs.o.dtype));
      run_case(cs);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(CollectiveRandom, ManySchedules) {
  const auto pairs = testutil::valid_pairs();
  std::mt19937_64 rng(99);
  for (int i = 0; i < 200; ++i) {
    Case cs;
    cs.coll = kAll[rng() % 4];
    harness::Options& o = cs.o;
    testutil::random_basics(&o, pairs, rng, 20, 2000, 3);
    o.segment_bytes = std::max(size_t{16} << (rng() % 6), dtype_size(o.dtype));
    o.seed = rng();
    o.links = rng() % 4 == 0;
    testutil::random_ring(&o, rng);
    testutil::random_start_times(&o, rng);
    cs.cp.root = static_cast<int>(rng() % o.n);
    if (rng() % 3 == 0 && (cs.coll == Coll::kReduceScatter || cs.coll == Coll::kAllgather)) {
      // Uneven blocks, some empty.
      cs.cp.block_counts.assign(o.n, 0);
      size_t sum = 0;
      for (auto& b : cs.cp.block_counts) sum += (b = rng() % 3 == 0 ? 0 : rng() % 200);
      o.count = sum;
    }
    SCOPED_TRACE("schedule " + std::to_string(i) + " " + coll_name(cs.coll) +
                 " n=" + std::to_string(o.n) + " count=" + std::to_string(o.count) + " " +
                 dtype_name(o.dtype) + " " + rop_name(o.op));
    run_case(cs);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(CollectiveRandom, LargeMessagesPipelined) {
  for (Coll coll : kAll) {
    Case cs;
    cs.coll = coll;
    cs.o.n = 7;
    cs.o.count = 60000;
    cs.o.dtype = DType::kFloat;
    cs.o.segment_bytes = 4096;
    cs.o.eager_probability = 0.3;
    cs.o.links = true;
    cs.o.collectives = 2;
    cs.cp.root = 3;
    SCOPED_TRACE(coll_name(coll));
    run_case(cs);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CollectivePipelining, ChainBroadcastTimeMatchesTPlusAMinusOneTOverK) {
  // Links on, latency ~0: t = S / B for the whole buffer; with K segments the last of the
  // A = n - 1 receivers has it after about t + (A - 1) t / K (seed 003), instead of A t.
  const int n = 8;
  const size_t count = 1 << 16;  // 256 KiB of float
  for (size_t seg : {size_t{256} << 10, size_t{16} << 10}) {
    Case cs;
    cs.coll = Coll::kBcast;
    cs.o.n = n;
    cs.o.count = count;
    cs.o.dtype = DType::kFloat;
    cs.o.links = true;
    cs.o.latency_min = cs.o.latency_max = 1e-9;
    cs.o.gap_max = 0;
    cs.o.bytes_per_s = 1e9;
    cs.o.segment_bytes = seg;
    cs.o.eager_probability = 0;
    cs.o.make_core = [](const RingParams& p, std::vector<uint8_t>* s) {
      CollParams c;
      return std::unique_ptr<CollectiveCore>(new ChainBroadcast(p, c, s));
    };
    const Buffers in = testdata::make_inputs(cs.o, 5);
    const harness::Result res = harness::run(cs.o, in);
    ASSERT_EQ(res.status, Status::kOk) << res.error;
    const double t = count * 4 / 1e9;
    const double K = static_cast<double>(count * 4) / seg;
    const double model = t + (n - 2) * t / K;
    EXPECT_LT(res.end_time, 1.1 * model + 20e-6) << "K = " << K;
    EXPECT_GT(res.end_time, 0.9 * model) << "K = " << K;
  }
}

TEST(CollectiveExactness, NanPayloadsFollowTheChainOrder) {
  // Adding two NaNs returns one operand's payload on many machines: the results then show the
  // operand order bit for bit (a = the upstream partial, b = the rank's own input). Where NaN
  // addition is commutative in bits the test is weaker; ReduceOperandOrder checks the order.
  for (Coll coll : {Coll::kReduceScatter, Coll::kReduce}) {
    for (int n : {2, 3, 5, 8}) {
      harness::Options o;
      o.n = n;
      o.count = 4 * n + 3;
      o.dtype = DType::kFloat;
      o.op = ROp::kSum;
      o.seed = 600 + n;
      o.segment_bytes = 8;
      CollParams cp;
      cp.root = n / 2;
      o.make_core = [coll, cp](const RingParams& p,
                               std::vector<uint8_t>* s) -> std::unique_ptr<CollectiveCore> {
        if (coll == Coll::kReduce) return std::make_unique<ChainReduce>(p, cp, s);
        return std::make_unique<RingReduceScatter>(p, cp, s);
      };
      Buffers in(1, std::vector<std::vector<uint8_t>>(n, std::vector<uint8_t>(o.count * 4)));
      std::mt19937_64 rng(n);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < o.count; ++i) {
          const uint32_t bits = 0x7fc00000u | static_cast<uint32_t>(rng() & 0x3fff) |
                                (static_cast<uint32_t>(r) << 16);
          std::memcpy(in[0][r].data() + i * 4, &bits, 4);
        }
      }
      const harness::Result res = harness::run(o, in);
      ASSERT_EQ(res.status, Status::kOk) << res.error;
      const std::vector<size_t> off = block_offsets({}, o.count, n);
      for (int r = 0; r < n; ++r) {
        const uint8_t* got = res.outputs[0][r].data();
        if (coll == Coll::kReduceScatter) {
          const auto want = chain(o.op, o.dtype, ring_of(o), r, in[0], off[r], off[r + 1]);
          EXPECT_EQ(std::memcmp(got + off[r] * 4, want.data(), want.size()), 0) << "rank " << r;
        } else if (r == cp.root) {
          const auto want = chain(o.op, o.dtype, ring_of(o), r, in[0], 0, o.count);
          EXPECT_EQ(std::memcmp(got, want.data(), want.size()), 0) << "root " << r;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Hand-driven cores.

using testutil::find_action;
using testutil::write_hdr;

struct Driven : testutil::DrivenCore<ScheduleCore> {
  Driven(Coll coll, int rank, int n, size_t count, int root = 0) {
    setup(rank, testutil::identity_ring(n), count);
    CollParams c;
    c.root = root;
    switch (coll) {
      case Coll::kReduceScatter:
        core.reset(new RingReduceScatter(p, c, &scratch));
        break;
      case Coll::kAllgather:
        core.reset(new RingAllgather(p, c, &scratch));
        break;
      case Coll::kBcast:
        core.reset(new ChainBroadcast(p, c, &scratch));
        break;
      case Coll::kReduce:
        core.reset(new ChainReduce(p, c, &scratch));
        break;
    }
    start();
  }
};

TEST(CollectiveProtocol, ReduceScatterOverlapIsAnError) {
  Driven d(Coll::kReduceScatter, 1, 4, 8);  // step 0: block 3's piece from rank 0
  const Action* recv = find_action(d.acts, Action::Kind::kRecv, 0);
  ASSERT_NE(recv, nullptr);
  write_hdr(recv->header, kRsPhase, 3, {0, 1});
  ActionList more = testutil::expect_recv_error(*d.core, *recv, 1.0, "overlaps");
  EXPECT_EQ(find_action(more, Action::Kind::kReduce), nullptr);
}

// The late path folds a segment of an owner's block once the reduce-scatter has finished it:
// final_prefix_elems counts the elements at the start of the own block whose last-step
// reductions have finished, in segment order (a later segment done first does not count yet).
TEST(CollectiveProtocol, ReduceScatterFinalPrefix) {
  testutil::DrivenCore<RingReduceScatter> d;
  d.setup(0, testutil::identity_ring(2), 16);  // own block 0: 8 int32, 2 segments of 4
  d.p.segment_bytes = 16;
  d.core.reset(new RingReduceScatter(d.p, CollParams{}, &d.scratch));
  d.start();
  EXPECT_EQ(d.core->final_prefix_elems(), 0u);
  std::vector<Action> recvs;
  for (const Action& a : d.acts) {
    if (a.kind == Action::Kind::kRecv) recvs.push_back(a);
  }
  ASSERT_EQ(recvs.size(), 2u);
  std::vector<size_t> prefix;
  for (int g : {1, 0}) {  // the second segment's piece first
    write_hdr(recvs[g].header, kRsPhase, 0, {1}, 0, static_cast<uint32_t>(g));
    ActionList more;
    ASSERT_EQ(d.core->on_recv(recvs[g].token, recvs[g].payload_bytes, 1.0, &more), Status::kOk);
    const Action* red = find_action(more, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr) << g;
    EXPECT_EQ(d.core->final_prefix_elems(), 0u) << "reduction of segment " << g << " not done";
    ActionList after;
    ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &after), Status::kOk);
    prefix.push_back(d.core->final_prefix_elems());
  }
  EXPECT_EQ(prefix, (std::vector<size_t>{0, 8}));
}

TEST(CollectiveProtocol, ReduceScatterWrongChunkIsAnError) {
  Driven d(Coll::kReduceScatter, 1, 4, 8);
  const Action* recv = find_action(d.acts, Action::Kind::kRecv, 0);
  ASSERT_NE(recv, nullptr);
  write_hdr(recv->header, kRsPhase, 2, {0});
  ActionList more;
  EXPECT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kErrProtocol);
}

TEST(CollectiveValidate, BadParametersRejected) {
  RingParams p;
  p.ring = {0, 1, 2};
  p.count = 6;
  p.dtype = DType::kFloat;
  p.op = ROp::kBxor;
  int a[6], b[6];
  p.sendbuf = a;
  p.recvbuf = b;
  std::string why;
  CollParams c;
  EXPECT_EQ(RingReduceScatter::validate(p, c, &why), Status::kErrOp);
  EXPECT_EQ(ChainReduce::validate(p, c, &why), Status::kErrOp);
  EXPECT_EQ(RingAllgather::validate(p, c, &why), Status::kOk) << "no op in allgather";
  EXPECT_EQ(ChainBroadcast::validate(p, c, &why), Status::kOk) << "no op in broadcast";
  p.op = ROp::kSum;
  c.block_counts = {1, 2, 2};
  EXPECT_EQ(RingReduceScatter::validate(p, c, &why), Status::kErrCount);
  c.block_counts = {1, 5};
  EXPECT_EQ(RingAllgather::validate(p, c, &why), Status::kErrArg);
  c.block_counts = {1, 5, 0};
  EXPECT_EQ(RingAllgather::validate(p, c, &why), Status::kOk);
  c.root = 3;
  EXPECT_EQ(ChainBroadcast::validate(p, c, &why), Status::kErrArg);
  EXPECT_EQ(ChainReduce::validate(p, c, &why), Status::kErrArg);
  c.root = 2;
  EXPECT_EQ(ChainReduce::validate(p, c, &why), Status::kOk);
  p.tag_span = 512;
  EXPECT_EQ(ChainReduce::validate(p, c, &why), Status::kErrArg);
  p.tag_span = 1 << 20;
  p.recvbuf = nullptr;
  EXPECT_EQ(ChainBroadcast::validate(p, c, &why), Status::kErrBuffer);
}

TEST(CollectiveProtocol, ReduceOperandOrder) {
  // a = the partial from upstream (received), b = the rank's own input.
  {
    Driven d(Coll::kReduceScatter, 1, 4, 8);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv, 0);
    ASSERT_NE(recv, nullptr);
    write_hdr(recv->header, kRsPhase, 3, {0});
    ActionList more;
    ASSERT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kOk);
    const Action* red = find_action(more, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr);
    EXPECT_EQ(red->a, recv->payload);
    EXPECT_EQ(red->b, d.in.data() + 6) << "own input of block 3";
  }
  {
    Driven d(Coll::kReduce, 0, 3, 4, /*root=*/0);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv, 2);
    ASSERT_NE(recv, nullptr);
    write_hdr(recv->header, kReducePhase, 0, {1, 2});
    ActionList more;
    ASSERT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kOk);
    const Action* red = find_action(more, Action::Kind::kReduce);
    ASSERT_NE(red, nullptr);
    EXPECT_EQ(red->a, recv->payload);
    EXPECT_EQ(red->b, d.in.data());
    EXPECT_EQ(red->dst, d.outbuf.data());
    ActionList after;
    ASSERT_EQ(d.core->on_reduce(red->token, 2.0, &after), Status::kOk);
    EXPECT_TRUE(d.core->done());
  }
}

TEST(CollectiveProtocol, ReduceIncompleteAtTheRootIsAnError) {
  // n = 3, root 0: chain 1 -> 2 -> 0. A piece claiming only {1} reaches the root.
  Driven d(Coll::kReduce, 0, 3, 4, /*root=*/0);
  const Action* recv = find_action(d.acts, Action::Kind::kRecv, 2);
  ASSERT_NE(recv, nullptr);
  write_hdr(recv->header, kReducePhase, 0, {1});
  ActionList more = testutil::expect_recv_error(*d.core, *recv, 1.0, "incomplete");
}

TEST(CollectiveProtocol, AllgatherAndBcastCheckTheSource) {
  {
    Driven d(Coll::kAllgather, 1, 4, 8);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv, 0);
    ASSERT_NE(recv, nullptr);
    write_hdr(recv->header, kAgPhase, 0, {0, 3});
    ActionList more = testutil::expect_recv_error(*d.core, *recv, 1.0, "expected");
  }
  {
    Driven d(Coll::kBcast, 2, 4, 8, /*root=*/1);
    const Action* recv = find_action(d.acts, Action::Kind::kRecv, 1);
    ASSERT_NE(recv, nullptr);
    write_hdr(recv->header, kBcastPhase, 0, {2});
    ActionList more;
    EXPECT_EQ(d.core->on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kErrProtocol);
  }
}

TEST(CollectiveResult, ReduceScatterIntoSeparateResultBuffer) {
  // CollParams::result (what the C API uses for MPI_Reduce_scatter_block): the own block goes
  // there, recvbuf is not touched.
  for (int n : {1, 2, 5, 8}) {
    harness::Options o;
    o.n = n;
    o.count = 5 * n + 3;
    o.dtype = DType::kInt64;
    o.op = ROp::kSum;
    o.seed = 77 + n;
    const std::vector<size_t> off = block_offsets({}, o.count, n);
    auto results = std::make_shared<std::vector<std::vector<uint8_t>>>(n);
    for (int r = 0; r < n; ++r) (*results)[r].assign((off[r + 1] - off[r]) * 8, 0);
    o.make_core = [results](const RingParams& p, std::vector<uint8_t>* s) {
      CollParams c;
      c.result = (*results)[p.rank].data();
      return std::unique_ptr<CollectiveCore>(new RingReduceScatter(p, c, s));
    };
    const Buffers in = testdata::make_inputs(o, 9);
    const harness::Result res = harness::run(o, in);
    ASSERT_EQ(res.status, Status::kOk) << res.error;
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(res.outputs[0][r] == std::vector<uint8_t>(o.count * 8, 0xA5));
      const std::vector<uint8_t> want =
          chain(o.op, o.dtype, ring_of(o), r, in[0], off[r], off[r + 1]);
      EXPECT_TRUE((*results)[r] == want) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace skipring
