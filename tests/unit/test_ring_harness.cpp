// Ring all-reduce core under the in-process harness: n = 1..16, uneven and tiny counts,
// every op x type, random delivery orders, eager and rendezvous sends, back-to-back
// collectives, in place; results exact (integers) or bitwise identical on all ranks and close
// to a sequential reference (floats); nothing left in flight afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "collectives/reduce_kernels.h"
#include "collectives/ring_allreduce.h"
#include "tests/unit/core_test_util.h"
#include "tests/unit/harness.h"
#include "tests/unit/test_data.h"

namespace skipring {
namespace {

using testdata::Buffers;
using testdata::is_float;
using testdata::value_at;
using testutil::SizeCase;

Buffers make_inputs(const harness::Options& o, uint64_t seed) {
  return testdata::make_inputs(o, seed, /*wide=*/false);
}

// Runs the harness and checks every invariant; *out (if given) gets the result.
void run_and_check(const harness::Options& o, harness::Result* out = nullptr) {
  const Buffers in = make_inputs(o, o.seed * 31 + 7);
  harness::Result local;
  harness::Result& res = out ? *out : local;
  ASSERT_NO_FATAL_FAILURE(testutil::run_clean(o, in, &res));
  const size_t bytes = o.count * dtype_size(o.dtype);
  for (int c = 0; c < o.collectives; ++c) {
    // Sequential reference: fold the inputs in rank order with the same kernel.
    const std::vector<uint8_t> ref = testutil::rank_order_reduction(o, in[c]);
    for (int r = 0; r < o.n; ++r) {
      ASSERT_EQ(res.outputs[c][r].size(), bytes);
      // Every rank ends with the same bits.
      EXPECT_EQ(std::memcmp(res.outputs[c][r].data(), res.outputs[c][0].data(), bytes), 0)
          << "rank " << r << " differs from rank 0, collective " << c;
    }
    const bool order_sensitive = is_float(o.dtype) && (o.op == ROp::kSum || o.op == ROp::kProd);
    if (!order_sensitive) {
      EXPECT_EQ(std::memcmp(res.outputs[c][0].data(), ref.data(), bytes), 0)
          << "result differs from the sequential reference, collective " << c;
    } else {
      for (size_t i = 0; i < o.count; ++i) {
        const long double got = value_at(o.dtype, res.outputs[c][0].data(), i);
        const long double want = value_at(o.dtype, ref.data(), i);
        const long double tol = (o.dtype == DType::kFloat ? 1e-4L : 1e-9L) *
                                (1 + std::fabs(static_cast<double>(want))) * o.n;
        ASSERT_LE(std::fabs(static_cast<double>(got - want)), tol) << "element " << i;
      }
    }
    uint64_t sent = 0, received = 0;
    for (int r = 0; r < o.n; ++r) {
      const CollectiveStats& st = res.stats[c][r];
      EXPECT_EQ(st.skips, 0u);
      EXPECT_EQ(st.seq, static_cast<uint64_t>(c));
      sent += st.messages_sent;
      received += st.messages_received;
    }
    EXPECT_EQ(sent, received) << "every message sent was received exactly once";
  }
}

class RingSizes : public ::testing::TestWithParam<SizeCase> {};

TEST_P(RingSizes, ExactInt32SumRandomOrders) {
  const SizeCase sc = GetParam();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    harness::Options o;
    o.n = sc.n;
    o.count = sc.count;
    o.dtype = DType::kInt32;
    o.op = ROp::kSum;
    o.seed = seed + 100 * sc.n;
    o.segment_bytes = sc.count > 4096 ? 64 * 1024 : 16;  // many segments for small counts
    o.in_place = seed % 2 == 0;
    o.collectives = 2;
    run_and_check(o);
  }
}

std::vector<SizeCase> size_cases() {
  std::vector<SizeCase> v = testutil::size_cases();
  for (int n : {2, 3, 4, 8, 16}) v.push_back({n, size_t{1} << 20});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllRanks, RingSizes, ::testing::ValuesIn(size_cases()),
                         testutil::size_case_name);

TEST(RingOpsTypes, EveryValidPair) {
  const int pairs = testutil::for_each_valid_pair([&](int t, int op, DType dt, ROp rop) {
    for (int n : {2, 3, 5, 7}) {
      harness::Options o;
      o.n = n;
      o.count = 37;
      o.dtype = dt;
      o.op = rop;
      o.segment_bytes = 3 * dtype_size(dt);
      o.seed = 1000 + t * 97 + op * 13 + n;
      o.in_place = (t + op + n) % 2 == 0;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + rop_name(rop) + " n=" + std::to_string(n));
      run_and_check(o);
    }
    return true;
  });
  EXPECT_GT(pairs, 80);  // 13 types, about 7 ops each
}

TEST(RingOpsTypes, InvalidPairRejected) {
  RingParams p;
  p.ring = {0, 1};
  p.count = 4;
  p.dtype = DType::kFloat;
  p.op = ROp::kBxor;
  int a[4], b[4];
  p.sendbuf = a;
  p.recvbuf = b;
  std::string why;
  EXPECT_EQ(RingAllreduce::validate(p, &why), Status::kErrOp);
  EXPECT_NE(why.find("float"), std::string::npos);
}

TEST(RingRandom, ManySchedules) {
  // Random n, count, segment size, depth, latencies, eager/rendezvous mix, start skew.
  std::mt19937_64 rng(42);
  for (int i = 0; i < 300; ++i) {
    harness::Options o;
    o.n = 1 + static_cast<int>(rng() % 12);
    o.count = rng() % 3000;
    o.dtype = (i % 3 == 0) ? DType::kDouble : DType::kInt64;
    o.op = (i % 5 == 0) ? ROp::kMax : ROp::kSum;
    o.segment_bytes = 8 * (1 + rng() % 64);
    o.depth = 1 + static_cast<int>(rng() % 6);
    testutil::random_delivery(&o, rng);
    o.in_place = rng() & 1;
    o.collectives = 1 + static_cast<int>(rng() % 3);
    o.seed = rng();
    testutil::random_start_times(&o, rng);
    o.lead_in = i % 2 == 1;  // not drawn: the other draws stay as they were
    SCOPED_TRACE("schedule " + std::to_string(i) + " n=" + std::to_string(o.n) +
                 " count=" + std::to_string(o.count) + " lead_in=" + std::to_string(o.lead_in));
    run_and_check(o);
    if (::testing::Test::HasFailure()) break;
  }
}

// Across hosts a chunk is cut into at least 8 segments, none below 128 KiB, none above the
// configured size (communicator.cpp applies it to the ring rows when the ranks span hosts).
TEST(RingLayout, CrossHostSegments) {
  constexpr size_t K = 1024, M = 1024 * 1024;
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 1 * M, 2, false), 128 * K);  // 64 MiB over 64 ranks
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 3 * M / 2, 2, false), 192 * K);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 2 * M, 2, false), 256 * K);  // 8 already
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 16 * M, 2, false),
            256 * K);  // never above the setting
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 256 * K, 2, false), 128 * K);  // the floor
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 4 * K, 2, false), 128 * K);    // one segment still
  EXPECT_EQ(cross_host_segment_bytes(64 * K, 1 * M, 2, false), 64 * K);    // a smaller setting wins
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 1 * M, 1, false), 256 * K);  // one host: the setting
  // Hosts joined by sockets: 60 KiB (under Open MPI's TCP eager limit) for chunks below 32
  // whole settings (8 MiB); larger chunks keep the rule above; a smaller setting still wins, one
  // host still the setting.
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 1 * M, 2, true), kSocketSegmentBytes);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 3 * M / 2, 2, true), kSocketSegmentBytes);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 2 * M, 2, true), kSocketSegmentBytes);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 4 * M, 4, true), kSocketSegmentBytes);  // 16 MiB, n 4
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 8 * M - 8, 2, true), kSocketSegmentBytes);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 8 * M, 2, true), 256 * K);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 16 * M, 4, true), 256 * K);  // 64 MiB, n 4
  EXPECT_EQ(cross_host_segment_bytes(1 * M, 16 * M, 4, true), kSocketSegmentBytes);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 4 * K, 2, true), kSocketSegmentBytes);
  EXPECT_EQ(cross_host_segment_bytes(32 * K, 1 * M, 2, true), 32 * K);
  EXPECT_EQ(cross_host_segment_bytes(256 * K, 1 * M, 1, true), 256 * K);
  EXPECT_LT(kSocketSegmentBytes + 256, size_t{64} * K);  // room for skipring's and MPI's headers
  // A chunk of 1 MiB + 8 bytes: still at most 8 segments (rounded up).
  const size_t seg = cross_host_segment_bytes(256 * K, M + 8, 2, false);
  EXPECT_LE((M + 8 + seg - 1) / seg, 8u);
  // The segment it gives still runs exactly.
  harness::Options o;
  o.n = 5;
  o.count = 5 * 3000;
  o.segment_bytes = cross_host_segment_bytes(8 * K, o.count / o.n * 4, 2, false);
  o.seed = 11;
  run_and_check(o);
}

// The lead-in (across hosts): chunks of at least 16 whole segments start with half a segment;
// the segments still tile every chunk exactly, none empty, none above the segment size.
TEST(RingLayout, LeadInSegments) {
  const RingLayout plain(4, 4 * 2000, 4, 400);  // 100 elements per segment, 2000 per chunk
  const RingLayout led(4, 4 * 2000, 4, 400, true);
  EXPECT_EQ(plain.segments(0), 20);
  EXPECT_EQ(led.segments(0), 21);
  EXPECT_EQ(led.lead_elems(0), 50u);
  EXPECT_EQ(led.segment_count(0, 0), 50u);
  EXPECT_EQ(led.segment_count(0, 1), 100u);
  EXPECT_EQ(led.segment_offset(1, 1), 2050u);
  EXPECT_EQ(led.segment_count(0, 20), 50u);  // the last one takes the remainder
  EXPECT_EQ(led.total_segments(), 84);
  // Below 16 whole segments per chunk: no lead-in.
  const RingLayout short_chunks(4, 4 * 1599, 4, 400, true);
  EXPECT_EQ(short_chunks.lead_elems(0), 0u);
  EXPECT_EQ(short_chunks.segments(0), 16);
  for (int n : {1, 2, 3, 5, 8}) {
    for (size_t count : {0, 1, 15, 16, 17, 100, 1001, 4099, 9000}) {
      for (size_t seg : {1, 2, 3, 8}) {
        const RingLayout l(n, count, 1, seg, true);
        for (int c = 0; c < n; ++c) {
          size_t covered = 0;
          for (int g = 0; g < l.segments(c); ++g) {
            EXPECT_EQ(l.segment_offset(c, g), l.chunk_offset(c) + covered);
            EXPECT_GT(l.segment_count(c, g), 0u);
            EXPECT_LE(l.segment_count(c, g), l.segment_elems());
            covered += l.segment_count(c, g);
          }
          EXPECT_EQ(covered, l.chunk_count(c)) << "n=" << n << " count=" << count;
        }
      }
    }
  }
  // And it runs exactly, chunks led in, plain ring.
  harness::Options o;
  o.n = 5;
  o.count = 5 * 1000;
  o.segment_bytes = 64;
  o.lead_in = true;
  o.seed = 12;
  run_and_check(o);
}

TEST(RingOrder, NonIdentityRing) {
  harness::Options o;
  o.n = 6;
  o.count = 1000;
  o.ring = {3, 0, 5, 1, 4, 2};
  o.seed = 9;
  run_and_check(o);
}

TEST(RingStats, StepRecordsAndWait) {
  harness::Options o;
  o.n = 4;
  o.count = 4000;
  o.segment_bytes = 1000;
  o.start_time = {0, 0, 0, 1e-3};  // rank 3 arrives 1 ms late
  harness::Result res;
  run_and_check(o, &res);
  ASSERT_EQ(res.status, Status::kOk);
  const CollectiveStats& st = res.stats[0][0];
  ASSERT_EQ(st.steps.size(), 6u);  // 3 reduce-scatter + 3 allgather steps
  EXPECT_EQ(st.steps[0].phase, Phase::kReduceScatter);
  EXPECT_EQ(st.steps[3].phase, Phase::kAllgather);
  EXPECT_EQ(st.steps[0].from, 3);
  // Rank 0's predecessor is the late rank: it waited about 1 ms in its first step.
  EXPECT_GT(st.steps[0].wait_s, 0.9e-3);
  EXPECT_GT(st.wait_s, 0.9e-3);
  ASSERT_FALSE(st.neighbours.empty());
  EXPECT_EQ(st.neighbours[0].rank, 3);
  // Rank 3 itself hardly waits.
  EXPECT_LT(res.stats[0][3].wait_s, 0.5e-3);
}

// Drives one core by hand to check that an overlapping contribution set is an error.
TEST(RingProtocol, OverlappingContributionSetIsAnError) {
  RingParams p;
  p.rank = 1;
  p.ring = {0, 1, 2};
  p.count = 3;
  p.dtype = DType::kInt32;
  int32_t in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  p.sendbuf = in;
  p.recvbuf = out;
  std::vector<uint8_t> scratch;
  RingAllreduce core(p, &scratch);
  ActionList acts;
  ASSERT_EQ(core.start(0.0, &acts), Status::kOk);
  const Action* recv = nullptr;
  for (const auto& a : acts) {
    if (a.kind == Action::Kind::kRecv && a.payload_bytes > 0 && recv == nullptr) recv = &a;
  }
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(recv->peer, 0);
  // Forge the predecessor's piece claiming to include rank 1 (us) already.
  WireHeader h{};
  h.seq = 0;
  h.phase = 0;
  h.set_words = 1;
  h.chunk = 2;  // rank 1 at step 0 receives chunk (1 - 2) mod 3 = 2
  h.segment = 0;
  std::memcpy(recv->header, &h, sizeof(h));
  const uint64_t set = 0b011;  // ranks 0 and 1
  std::memcpy(static_cast<uint8_t*>(recv->header) + sizeof(h), &set, 8);
  seal_wire_header(static_cast<uint8_t*>(recv->header), wire_header_bytes(3));
  ActionList more;
  EXPECT_EQ(core.on_recv(recv->token, recv->payload_bytes, 1.0, &more), Status::kErrProtocol);
  EXPECT_NE(core.error().find("overlaps"), std::string::npos) << core.error();
}

TEST(RingProtocol, StaleSequenceNumberIsAnError) {
  RingParams p;
  p.rank = 0;
  p.ring = {0, 1};
  p.count = 2;
  p.seq = 5;
  int32_t in[2] = {1, 2}, out[2];
  p.sendbuf = in;
  p.recvbuf = out;
  std::vector<uint8_t> scratch;
  RingAllreduce core(p, &scratch);
  ActionList acts;
  ASSERT_EQ(core.start(0.0, &acts), Status::kOk);
  for (const auto& a : acts) {
    if (a.kind != Action::Kind::kRecv || a.payload_bytes == 0) continue;
    WireHeader h{};
    h.seq = 4;  // a piece of the previous collective
    h.set_words = 1;
    std::memcpy(a.header, &h, sizeof(h));
    seal_wire_header(static_cast<uint8_t*>(a.header), wire_header_bytes(2));
    ActionList more;
    EXPECT_EQ(core.on_recv(a.token, a.payload_bytes, 1.0, &more), Status::kErrProtocol);
    EXPECT_NE(core.error().find("collective 4"), std::string::npos) << core.error();
    return;
  }
  FAIL() << "no receive posted";
}

}  // namespace
}  // namespace skipring
