// The progress engine's watchdog (ProgressEngine::check_watchdog, SKIPRING_TIMEOUT) on n
// in-process ranks: real cores and engines over a small instant-delivery network, a manual
// clock, and ranks that never start (silent) or are slow. Asserts the timeout status, when it
// fires (counted from the last event, not from the start), the warnings before it, what the
// message names, and that the timed-out rank's receives are cancelled.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/hier_allreduce.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring_allreduce.h"
#include "collectives/ring_collectives.h"
#include "common/clock.h"
#include "runtime/log.h"
#include "runtime/progress_engine.h"
#include "runtime/transport.h"
#include "tests/unit/harness.h"

namespace skipring {
namespace {

using harness::ManualClock;

// Eager, instant delivery: a send completes at once and lands in the destination's queue; a
// receive matches the oldest queued message of its source (or any) and tag.
class MiniNet {
 public:
  explicit MiniNet(int n) : ranks_(n) {
    for (int r = 0; r < n; ++r) transports_.emplace_back(new Port(this, r, n));
  }
  Transport* transport(int r) { return transports_[r].get(); }
  size_t posted(int r) const { return ranks_[r].posted.size(); }
  int cancels(int r) const { return ranks_[r].cancels; }

 private:
  struct Msg {
    int src, tag;
    std::vector<uint8_t> bytes;
  };
  struct Recv {
    int peer, tag;
    void* header;
    size_t header_bytes;
    void* payload;
    size_t payload_bytes;
    Token token;
  };
  struct Rank {
    std::deque<Msg> queue;
    std::vector<Recv> posted;
    std::vector<Completion> done;
    int cancels = 0;
  };
  class Port final : public Transport {
   public:
    Port(MiniNet* net, int rank, int size) : net_(net), rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Status post_send(int peer, int tag, const void* header, size_t header_bytes,
                     const void* payload, size_t payload_bytes, Token token) override {
      Msg m{rank_, tag, {}};
      const auto* h = static_cast<const uint8_t*>(header);
      const auto* p = static_cast<const uint8_t*>(payload);
      m.bytes.assign(h, h + header_bytes);
      m.bytes.insert(m.bytes.end(), p, p + payload_bytes);
      net_->ranks_[peer].queue.push_back(std::move(m));
      net_->ranks_[rank_].done.push_back(Completion{token, false, 0});
      net_->match(peer);
      return Status::kOk;
    }
    Status post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                     size_t payload_bytes, Token token) override {
      net_->ranks_[rank_].posted.push_back(
          Recv{peer, tag, header, header_bytes, payload, payload_bytes, token});
      net_->match(rank_);
      return Status::kOk;
    }
    Status poll(std::vector<Completion>* done) override {
      auto& mine = net_->ranks_[rank_].done;
      done->insert(done->end(), mine.begin(), mine.end());
      mine.clear();
      return Status::kOk;
    }
    Status cancel(Token token) override {
      auto& posted = net_->ranks_[rank_].posted;
      for (size_t i = 0; i < posted.size(); ++i) {
        if (posted[i].token == token) {
          posted.erase(posted.begin() + static_cast<long>(i));
          ++net_->ranks_[rank_].cancels;
          return Status::kOk;
        }
      }
      return Status::kErrArg;
    }
    size_t outstanding() const override { return net_->ranks_[rank_].posted.size(); }
    Status unmatched_message_waiting(bool* waiting) override {
      *waiting = !net_->ranks_[rank_].queue.empty();
      return Status::kOk;
    }

   private:
    MiniNet* net_;
    int rank_, size_;
  };

  // Matches rank r's posted receives (in posting order) against its queue (oldest first).
  void match(int r) {
    Rank& k = ranks_[r];
    for (size_t i = 0; i < k.posted.size();) {
      const Recv& rv = k.posted[i];
      bool matched = false;
      for (size_t j = 0; j < k.queue.size(); ++j) {
        const Msg& m = k.queue[j];
        if (m.tag != rv.tag || (rv.peer >= 0 && m.src != rv.peer)) continue;
        const size_t hb = std::min(rv.header_bytes, m.bytes.size());
        std::memcpy(rv.header, m.bytes.data(), hb);
        const size_t pb = std::min(rv.payload_bytes, m.bytes.size() - hb);
        if (pb > 0) std::memcpy(rv.payload, m.bytes.data() + hb, pb);
        k.done.push_back(Completion{rv.token, true, m.bytes.size() - hb});
        k.queue.erase(k.queue.begin() + static_cast<long>(j));
        matched = true;
        break;
      }
      if (matched) {
        k.posted.erase(k.posted.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }

  std::vector<Rank> ranks_;
  std::vector<std::unique_ptr<Port>> transports_;
};

// Captures the library logger's lines while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    sink_->set_pattern("%l: %v");
    logger().sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = logger().sinks();
    for (size_t i = 0; i < sinks.size(); ++i) {
      if (sinks[i] == sink_) sinks.erase(sinks.begin() + static_cast<long>(i));
    }
  }
  std::string text() const { return out_.str(); }
  int count(const std::string& what) const {
    const std::string t = text();
    int c = 0;
    for (size_t at = t.find(what); at != std::string::npos; at = t.find(what, at + 1)) ++c;
    return c;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// n ranks running one collective each; rank r starts at start[r] (< 0: never).
struct Ranks {
  Ranks(int n, double timeout_s, bool skip) : net(n), inputs(n), outputs(n), scratch(n) {
    EngineOptions o;
    o.timeout_s = timeout_s;
    for (int r = 0; r < n; ++r) {
      engines.emplace_back(new ProgressEngine(net.transport(r), &clock, o));
      inputs[r].assign(kCount, r + 1);
      outputs[r].assign(kCount, 0);
    }
    status.assign(n, Status::kOk);
    started.assign(n, false);
    cores.resize(n);
    p.count = kCount;
    p.dtype = DType::kInt32;
    p.op = ROp::kSum;
    p.segment_bytes = 64;
    p.depth = 4;
    p.skip = skip;
    p.skip_threshold_s = 1e-3;
    for (int r = 0; r < n; ++r) p.ring.push_back(r);
  }

  std::unique_ptr<CollectiveCore> make(int r) {
    RingParams q = p;
    q.rank = r;
    q.sendbuf = inputs[r].data();
    q.recvbuf = outputs[r].data();
    if (make_core) return make_core(q, &scratch[r]);
    return std::unique_ptr<CollectiveCore>(new RingAllreduce(q, &scratch[r]));
  }

  // Advances the clock to `until` in steps of dt; at each step starts the ranks due, lets
  // every running rank progress until quiet, then runs its watchdog.
  void advance(double until, double dt, const std::vector<double>& start) {
    for (double t = clock.now(); t <= until + 1e-12; t += dt) {
      clock.set(t);
      for (size_t r = 0; r < engines.size(); ++r) {
        if (!started[r] && start[r] >= 0 && start[r] <= t) {
          started[r] = true;
          cores[r] = make(static_cast<int>(r));
          status[r] = engines[r]->begin(cores[r].get());
        }
      }
      for (bool any = true; any;) {
        any = false;
        for (size_t r = 0; r < engines.size(); ++r) {
          if (!started[r] || !ok(status[r]) || engines[r]->finished()) continue;
          bool progressed = false;
          status[r] = engines[r]->progress(&progressed);
          any = any || progressed;
        }
      }
      for (size_t r = 0; r < engines.size(); ++r) {
        if (started[r] && ok(status[r]) && !engines[r]->finished()) {
          status[r] = engines[r]->check_watchdog(t);
        }
      }
    }
  }
  bool finished(int r) const { return engines[r]->finished(); }

  static constexpr size_t kCount = 48;
  ManualClock clock;
  MiniNet net;
  RingParams p;
  std::function<std::unique_ptr<CollectiveCore>(const RingParams&, std::vector<uint8_t>*)>
      make_core;
  std::vector<std::vector<int32_t>> inputs, outputs;
  std::vector<std::vector<uint8_t>> scratch;
  std::vector<std::unique_ptr<ProgressEngine>> engines;
  std::vector<std::unique_ptr<CollectiveCore>> cores;
  std::vector<Status> status;
  std::vector<bool> started;
};

TEST(Watchdog, SilentRankTimesOutTheRingNamingIt) {
  LogCapture log;
  Ranks run(3, 2.0, /*skip=*/true);
  const std::vector<double> start = {0, 0, -1};  // rank 2 never enters
  run.advance(0.98, 0.01, start);
  EXPECT_EQ(run.status[0], Status::kOk);
  EXPECT_EQ(run.status[1], Status::kOk);
  EXPECT_EQ(log.count("watchdog"), 0) << log.text();  // the first warning is at timeout / 2
  run.advance(1.05, 0.01, start);
  EXPECT_GE(log.count("warning: watchdog: no progress for 1.0 s (fails at SKIPRING_TIMEOUT=2 s)"),
            2)
      << log.text();  // one per waiting rank
  run.advance(1.95, 0.01, start);
  EXPECT_EQ(run.status[0], Status::kOk) << "timed out early";
  // Warnings every timeout / 10 from timeout / 2: 1.0, 1.2, ..., 1.8 on each rank.
  EXPECT_EQ(log.count("warning: watchdog"), 10) << log.text();
  run.advance(2.1, 0.01, start);
  ASSERT_EQ(run.status[0], Status::kErrTimeout);
  ASSERT_EQ(run.status[1], Status::kErrTimeout);
  // Rank 0 is rank 2's successor: nothing of this all-reduce ever came from rank 2.
  const std::string m0 = run.engines[0]->timeout_message();
  EXPECT_NE(m0.find("no progress for 2.0 s (SKIPRING_TIMEOUT=2 s): all-reduce #0"),
            std::string::npos)
      << m0;
  EXPECT_NE(m0.find("waiting for rank 2 (predecessor)"), std::string::npos) << m0;
  EXPECT_NE(m0.find("rank 2 has not entered all-reduce #0 for 2.0 s"), std::string::npos) << m0;
  EXPECT_NE(m0.find("reduce-scatter step 0"), std::string::npos) << m0;
  // Rank 1 owns chunk 1, whose partial starts at rank 2: rank 2's input is what it lacks.
  const std::string m1 = run.engines[1]->timeout_message();
  EXPECT_NE(m1.find("our chunk 1: 1 segment(s) still lack the inputs of rank(s) 2"),
            std::string::npos)
      << m1;
  EXPECT_EQ(log.count("error: watchdog: no progress for 2.0 s"), 2) << log.text();
  // The timed-out ranks' receives were cancelled; nothing is left posted.
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(run.net.cancels(r), 0) << r;
    EXPECT_EQ(run.net.posted(r), 0u) << r;
  }
}

TEST(Watchdog, TimeoutCountsFromTheLastEventNotTheStart) {
  // Rank 2 runs the plain ring with 1.5 s before each of its steps (the timeout is 2 s): the
  // collective lasts longer than the timeout but never stands still for one.
  Ranks run(3, 2.0, /*skip=*/false);
  run.engines[2]->set_step_delay([](Phase, int) { return 1.5; });
  run.advance(10, 0.01, {0, 0, 0});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run.status[r], Status::kOk) << r << ": " << run.engines[r]->timeout_message();
    EXPECT_TRUE(run.finished(r)) << r;
    EXPECT_EQ(run.outputs[r], std::vector<int32_t>(Ranks::kCount, 1 + 2 + 3)) << r;
  }
  EXPECT_GT(run.cores[0]->stats().end - run.cores[0]->stats().start, 2.5);
}

TEST(Watchdog, LateRankWithinTheTimeoutIsFine) {
  Ranks run(3, 2.0, /*skip=*/true);
  run.advance(3, 0.01, {0, 0, 1.9});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run.status[r], Status::kOk) << r;
    EXPECT_TRUE(run.finished(r)) << r;
    EXPECT_EQ(run.outputs[r], std::vector<int32_t>(Ranks::kCount, 6)) << r;
  }
}

TEST(Watchdog, ZeroTimeoutNeverFires) {
  LogCapture log;
  Ranks run(3, 0, /*skip=*/true);
  run.advance(1, 0.05, {0, 0, -1});
  run.clock.set(1e6);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.engines[r]->check_watchdog(1e6), Status::kOk);
    EXPECT_FALSE(run.finished(r));
  }
  EXPECT_EQ(log.count("watchdog"), 0) << log.text();
}

TEST(Watchdog, OtherCollectivesDescribeTheirPendingReceives) {
  // A schedule core (the ring allgather) uses the generic description: what is pending, from
  // which peer.
  Ranks run(3, 1.0, /*skip=*/false);
  run.make_core = [](const RingParams& q, std::vector<uint8_t>* scratch) {
    RingParams a = q;
    a.sendbuf = a.recvbuf;
    return std::unique_ptr<CollectiveCore>(new RingAllgather(a, CollParams{}, scratch));
  };
  run.advance(1.1, 0.01, {0, 0, -1});
  ASSERT_EQ(run.status[0], Status::kErrTimeout);
  const std::string m = run.engines[0]->timeout_message();
  EXPECT_NE(m.find("seq 0"), std::string::npos) << m;
  EXPECT_NE(m.find("recv peer 2"), std::string::npos) << m;
}

TEST(Watchdog, RecursiveDoublingNamesThePeerAndRound) {
  Ranks run(3, 1.0, /*skip=*/false);
  run.make_core = [](const RingParams& q, std::vector<uint8_t>* scratch) {
    return std::unique_ptr<CollectiveCore>(new RecursiveDoublingAllreduce(q, scratch));
  };
  run.advance(1.1, 0.01, {0, 0, -1});
  // Positions 0 and 1 fold together (3 is not a power of two); rank 1 then exchanges with 2.
  ASSERT_EQ(run.status[1], Status::kErrTimeout);
  const std::string m = run.engines[1]->timeout_message();
  EXPECT_NE(m.find("recursive-doubling all-reduce #0: waiting for rank 2 (round 0)"),
            std::string::npos)
      << m;
}

TEST(Watchdog, HierarchicalNamesTheSilentLocalRank) {
  // Two hosts of two ranks; rank 3 never enters: rank 2, on its host, waits for its pieces.
  Ranks run(4, 1.0, /*skip=*/false);
  run.make_core = [](const RingParams& q, std::vector<uint8_t>* scratch) {
    return std::unique_ptr<CollectiveCore>(new HierAllreduce(q, {0, 0, 1, 1}, scratch));
  };
  run.advance(1.1, 0.01, {0, 0, 0, -1});
  ASSERT_EQ(run.status[2], Status::kErrTimeout);
  const std::string m = run.engines[2]->timeout_message();
  EXPECT_NE(m.find("hierarchical all-reduce #0"), std::string::npos) << m;
  EXPECT_NE(m.find("not arrived, from rank(s) 3"), std::string::npos) << m;
}

}  // namespace
}  // namespace skipring
