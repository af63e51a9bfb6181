// In-process harness implementation: fake network, fake transport, virtual clock.
#include "tests/unit/harness.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <queue>
#include <random>
#include <tuple>

#include "collectives/ring_allreduce.h"
#include "runtime/clock.h"
#include "runtime/progress_engine.h"
#include "runtime/transport.h"

namespace skipring {
namespace harness {
namespace {

struct Message {
  int src, dst, tag;
  const void* header;
  size_t header_bytes;
  const void* payload;
  size_t payload_bytes;
  Token token;
  bool eager;
  std::vector<uint8_t> data;  // eager: copied at send time
  uint64_t order;
  bool transferred = false;  // Options::control_eager: crossed the links when sent
};

struct PostedRecv {
  int src, tag;
  void* header;
  size_t header_bytes;
  void* payload;
  size_t payload_bytes;
  Token token;
  uint64_t order;
};

class FakeNetwork;

class FakeTransport final : public Transport {
 public:
  FakeTransport(FakeNetwork* net, int rank, int size) : net_(net), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status post_send(int peer, int tag, const void* header, size_t header_bytes, const void* payload,
                   size_t payload_bytes, Token token) override;
  Status post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                   size_t payload_bytes, Token token) override;
  Status poll(std::vector<Completion>* done) override {
    if (!ok(fault_)) return fault_;
    while (!ready_.empty()) {
      done->push_back(ready_.front());
      ready_.pop_front();
    }
    return Status::kOk;
  }
  Status cancel(Token token) override;
  size_t outstanding() const override { return outstanding_; }
  Status unmatched_message_waiting(bool* waiting) override;

  std::deque<Completion> ready_;
  size_t outstanding_ = 0;
  Status fault_ = Status::kOk;  // a wrong-size message arrived (returned by poll)

 private:
  FakeNetwork* net_;
  int rank_, size_;
};

class FakeNetwork {
 public:
  FakeNetwork(const Options& opt, ManualClock* clock)
      : opt_(opt),
        clock_(clock),
        rng_(opt.seed * 7919 + 17),
        unexpected_(opt.n),
        posted_(opt.n),
        out_free_(opt.n, 0.0),
        in_free_(opt.n, 0.0) {
    for (int r = 0; r < opt.n; ++r) transports_.emplace_back(new FakeTransport(this, r, opt.n));
  }

  FakeTransport* transport(int r) { return transports_[r].get(); }

  void send(int src, int dst, int tag, const void* header, size_t header_bytes, const void* payload,
            size_t payload_bytes, Token token) {
    if (opt_.tamper) {
      std::vector<uint8_t> h(static_cast<const uint8_t*>(header),
                             static_cast<const uint8_t*>(header) + header_bytes);
      std::vector<uint8_t> p(static_cast<const uint8_t*>(payload),
                             static_cast<const uint8_t*>(payload) + payload_bytes);
      const int copies = opt_.tamper(src, dst, tag, &h, &p);
      for (int i = 0; i < copies; ++i) {
        // The sender's completion comes with the first copy only.
        send_bytes(src, dst, tag, h, p, token, /*complete_sender=*/i == 0);
      }
      if (copies <= 0) transports_[src]->ready_.push_back(Completion{token, false, 0});
      return;
    }
    auto m = std::make_shared<Message>();
    const bool control = opt_.control_eager && payload_bytes == 0;
    *m = Message{src,
                 dst,
                 tag,
                 header,
                 header_bytes,
                 payload,
                 payload_bytes,
                 token,
                 control || uniform() < opt_.eager_probability,
                 {},
                 order_++};
    double sent = clock_->now();
    if (control && opt_.links) {
      // Crosses the links now; matching it later costs nothing more.
      const double begin = std::max({sent, out_free_[src], in_free_[dst]});
      sent = out_free_[src] = in_free_[dst] = begin + header_bytes / opt_.bytes_per_s;
      m->transferred = true;
    }
    transports_[src]->outstanding_++;
    if (m->eager) {
      m->data.resize(header_bytes + payload_bytes);
      std::memcpy(m->data.data(), header, header_bytes);
      if (payload_bytes) std::memcpy(m->data.data() + header_bytes, payload, payload_bytes);
      schedule(clock_->now() + 1e-7 * uniform(), [this, m] {
        complete(m->src, Completion{m->token, false, 0});
      });
    }
    deliver(m, sent);
  }

  // Schedules the arrival of `m`, sent at `sent`, after a random latency. Non-overtaking: a
  // message never arrives before an earlier one with the same envelope.
  void deliver(const std::shared_ptr<Message>& m, double sent) {
    double at = sent + opt_.latency_min + (opt_.latency_max - opt_.latency_min) * uniform();
    // With small_overtakes_bytes the small and the large messages of an envelope keep their
    // order each among themselves only (two mailboxes).
    const bool small = opt_.small_overtakes_bytes > 0 && m->payload_bytes > 0 &&
                       m->payload_bytes <= opt_.small_overtakes_bytes;
    auto key = std::make_tuple(m->src, m->dst, small ? -1 - m->tag : m->tag);
    if (small) at = sent + opt_.latency_min * uniform();  // the small mailbox is quicker
    at = std::max(at, last_arrival_[key] + 1e-9);
    last_arrival_[key] = at;
    schedule(at, [this, m] {
      unexpected_[m->dst].push_back(m);
      match(m->dst);
    });
  }

  // An eager message of the given bytes (Options::tamper); the sender completes at once when
  // complete_sender.
  void send_bytes(int src, int dst, int tag, const std::vector<uint8_t>& h,
                  const std::vector<uint8_t>& p, Token token, bool complete_sender) {
    auto m = std::make_shared<Message>();
    *m = Message{src, dst, tag, nullptr, h.size(), nullptr, p.size(), token, true, {}, order_++};
    m->data = h;
    m->data.insert(m->data.end(), p.begin(), p.end());
    if (complete_sender) {
      transports_[src]->outstanding_++;
      schedule(clock_->now() + 1e-7 * uniform(), [this, m] {
        complete(m->src, Completion{m->token, false, 0});
      });
    }
    deliver(m, clock_->now());
  }

  void recv(int dst, int src, int tag, void* header, size_t header_bytes, void* payload,
            size_t payload_bytes, Token token) {
    transports_[dst]->outstanding_++;
    posted_[dst].push_back(
        PostedRecv{src, tag, header, header_bytes, payload, payload_bytes, token, order_++});
    match(dst);
  }

  bool cancel(int dst, Token token) {
    auto& p = posted_[dst];
    for (auto it = p.begin(); it != p.end(); ++it) {
      if (it->token == token) {
        p.erase(it);
        transports_[dst]->outstanding_--;
        return true;
      }
    }
    return false;
  }

  bool unmatched(int dst) const { return !unexpected_[dst].empty(); }

  // Runs every event due at the earliest pending time; returns false when none is pending.
  double next_time() const {
    return events_.empty() ? std::numeric_limits<double>::infinity() : events_.top().time;
  }
  void run_due(double t) {
    while (!events_.empty() && events_.top().time <= t) {
      auto fn = events_.top().fn;
      events_.pop();
      fn();
    }
  }

  bool idle() const {
    if (!events_.empty()) return false;
    for (int r = 0; r < opt_.n; ++r) {
      if (!unexpected_[r].empty() || !posted_[r].empty() || !transports_[r]->ready_.empty()) {
        return false;
      }
    }
    return true;
  }

  std::string error;
  std::string fault;  // the last wrong-size message (Options::tamper)

 private:
  struct Event {
    double time;
    uint64_t order;
    std::function<void()> fn;
    bool operator>(const Event& o) const {
      return std::tie(time, order) > std::tie(o.time, o.order);
    }
  };

  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  void schedule(double t, std::function<void()> fn) {
    // Random tie-breaking order among events at the same time.
    events_.push(Event{t, rng_(), std::move(fn)});
  }
  void complete(int rank, Completion c) {
    transports_[rank]->ready_.push_back(c);
    transports_[rank]->outstanding_--;
  }

  // MPI matching: the earliest posted receive and the earliest arrived message with the
  // same source and tag.
  void match(int dst) {
    auto& ux = unexpected_[dst];
    auto& po = posted_[dst];
    if (opt_.small_overtakes_bytes > 0) {
      // SMPI's two mailboxes: a receive for at most small_overtakes_bytes waits in the small
      // one, a larger receive in the normal one, and a small message first looks for a posted
      // receive in the normal mailbox: it takes the earliest larger receive of its envelope,
      // even one posted after the small receive meant for it.
      for (auto mit = ux.begin(); mit != ux.end();) {
        const std::shared_ptr<Message> m = *mit;
        const bool small_msg =
            m->payload_bytes > 0 && m->payload_bytes <= opt_.small_overtakes_bytes;
        auto pit = po.end();
        if (small_msg) {
          pit = std::find_if(po.begin(), po.end(), [&](const PostedRecv& r) {
            return (r.src < 0 || m->src == r.src) && m->tag == r.tag &&
                   r.payload_bytes > opt_.small_overtakes_bytes;
          });
        }
        if (pit == po.end()) {
          ++mit;
          continue;
        }
        PostedRecv r = *pit;
        mit = ux.erase(mit);
        po.erase(pit);
        start_transfer(dst, m, r);
      }
    }
    for (auto pit = po.begin(); pit != po.end();) {
      auto mit = std::find_if(ux.begin(), ux.end(), [&](const std::shared_ptr<Message>& m) {
        return (pit->src < 0 || m->src == pit->src) && m->tag == pit->tag;
      });
      if (mit == ux.end()) {
        ++pit;
        continue;
      }
      std::shared_ptr<Message> m = *mit;
      PostedRecv r = *pit;
      ux.erase(mit);
      pit = po.erase(pit);
      start_transfer(dst, m, r);
    }
  }

  void start_transfer(int dst, const std::shared_ptr<Message>& m, const PostedRecv& r) {
    const double dur =
        m->transferred ? 0.0 : (m->header_bytes + m->payload_bytes) / opt_.bytes_per_s;
    double t = clock_->now() + dur;
    if (opt_.links && !m->transferred) {
      const double begin = std::max({clock_->now(), out_free_[m->src], in_free_[dst]});
      t = begin + dur;
      out_free_[m->src] = in_free_[dst] = t;
    }
    schedule(t, [this, m, r] { transfer(*m, r); });
  }

  void transfer(const Message& m, const PostedRecv& r) {
    if (opt_.tamper && (m.header_bytes != r.header_bytes || m.payload_bytes > r.payload_bytes)) {
      // What MpiTransport does with a message of the wrong size: a protocol error on the
      // receiver, nothing copied.
      transports_[m.dst]->fault_ = Status::kErrProtocol;
      fault = "rank " + std::to_string(m.dst) + ": message from rank " + std::to_string(m.src) +
              " with tag " + std::to_string(m.tag) + " of " + std::to_string(m.header_bytes) +
              " + " + std::to_string(m.payload_bytes) + " bytes, expected " +
              std::to_string(r.header_bytes) + " + at most " + std::to_string(r.payload_bytes);
      return;
    }
    if (m.header_bytes != r.header_bytes || m.payload_bytes > r.payload_bytes ||
        (m.payload_bytes != 0 && m.payload_bytes != r.payload_bytes)) {
      error = "message truncated: header " + std::to_string(m.header_bytes) + "/" +
              std::to_string(r.header_bytes) + " payload " + std::to_string(m.payload_bytes) + "/" +
              std::to_string(r.payload_bytes);
    } else if (m.eager) {
      std::memcpy(r.header, m.data.data(), m.header_bytes);
      if (m.payload_bytes) std::memcpy(r.payload, m.data.data() + m.header_bytes, m.payload_bytes);
    } else {
      std::memcpy(r.header, m.header, m.header_bytes);
      if (m.payload_bytes) std::memcpy(r.payload, m.payload, m.payload_bytes);
    }
    complete(m.dst, Completion{r.token, true, m.payload_bytes});
    if (!m.eager) complete(m.src, Completion{m.token, false, 0});
  }

  const Options& opt_;
  ManualClock* clock_;
  std::mt19937_64 rng_;
  uint64_t order_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<std::deque<std::shared_ptr<Message>>> unexpected_;
  std::vector<std::deque<PostedRecv>> posted_;
  std::map<std::tuple<int, int, int>, double> last_arrival_;
  std::vector<double> out_free_, in_free_;  // Options::links: when each rank's links are free
  std::vector<std::unique_ptr<FakeTransport>> transports_;
};

Status FakeTransport::post_send(int peer, int tag, const void* header, size_t header_bytes,
                                const void* payload, size_t payload_bytes, Token token) {
  if (peer < 0 || peer >= size_) return Status::kErrArg;
  net_->send(rank_, peer, tag, header, header_bytes, payload, payload_bytes, token);
  return Status::kOk;
}

Status FakeTransport::post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                                size_t payload_bytes, Token token) {
  if (peer < kAnySourceOneSender || peer >= size_) return Status::kErrArg;
  net_->recv(rank_, peer < 0 ? kAnySource : peer, tag, header, header_bytes, payload, payload_bytes,
             token);
  return Status::kOk;
}

Status FakeTransport::cancel(Token token) {
  // Not among the unmatched posted receives: a message matched it, which the protocol forbids.
  return net_->cancel(rank_, token) ? Status::kOk : Status::kErrProtocol;
}

Status FakeTransport::unmatched_message_waiting(bool* waiting) {
  *waiting = net_->unmatched(rank_);
  return Status::kOk;
}

}  // namespace

Result run(const Options& opt, const std::vector<std::vector<std::vector<uint8_t>>>& inputs) {
  Result res;
  ManualClock clock;
  FakeNetwork net(opt, &clock);
  std::mt19937_64 rng(opt.seed);
  const int n = opt.n;
  const size_t bytes = opt.count * dtype_size(opt.dtype);

  std::vector<int> ring = opt.ring;
  if (ring.empty()) {
    for (int r = 0; r < n; ++r) ring.push_back(r);
  }
  res.outputs.assign(opt.collectives, std::vector<std::vector<uint8_t>>(n));
  res.stats.assign(opt.collectives, std::vector<CollectiveStats>(n));

  struct RankState {
    int next = 0;  // next collective to start
    double start_at = 0;
    std::vector<uint8_t> sendbuf, recvbuf, scratch;
    std::unique_ptr<CollectiveCore> core;
    std::unique_ptr<ProgressEngine> engine;
  };
  std::vector<RankState> ranks(n);
  for (int r = 0; r < n; ++r) {
    ranks[r].start_at = opt.start_time.empty() ? 0.0 : opt.start_time[r];
    ranks[r].engine.reset(new ProgressEngine(net.transport(r), &clock, EngineOptions{}));
  }

  auto fail = [&](Status st, const std::string& why) {
    res.status = st;
    res.error = why;
    return res;
  };

  for (;;) {
    // Start collectives that are due.
    for (int r = 0; r < n; ++r) {
      RankState& rs = ranks[r];
      if (rs.core || rs.next >= opt.collectives || rs.start_at > clock.now()) continue;
      const auto& in = inputs[rs.next][r];
      rs.recvbuf.assign(bytes, 0xA5);  // poison: every byte must be written
      if (opt.in_place) {
        rs.recvbuf = in;
      } else {
        rs.sendbuf = in;
      }
      RingParams p = opt;  // the shared ring parameters; the per-rank ones follow
      p.rank = r;
      p.ring = ring;
      p.sendbuf = opt.in_place ? rs.recvbuf.data() : rs.sendbuf.data();
      p.recvbuf = rs.recvbuf.data();
      p.seq = static_cast<uint32_t>(rs.next);
      if (opt.step_delay) {
        const int coll = rs.next;
        rs.engine->set_step_delay(
            [&opt, r, coll](Phase ph, int step) { return opt.step_delay(r, coll, ph, step); });
      }
      std::string why;
      Status st = RingAllreduce::validate(p, &why);
      if (!ok(st)) return fail(st, why);
      if (opt.make_core) {
        rs.core = opt.make_core(p, &rs.scratch);
      } else {
        rs.core.reset(new RingAllreduce(p, &rs.scratch));
      }
      st = rs.engine->begin(rs.core.get());
      if (!ok(st)) return fail(st, rs.core->error());
    }
    // Let every rank progress until nothing changes at this instant.
    bool any = true;
    while (any) {
      any = false;
      for (int r = 0; r < n; ++r) {
        RankState& rs = ranks[r];
        if (!rs.core) continue;
        bool progressed = false;
        Status st = rs.engine->progress(&progressed);
        if (!ok(st)) return fail(st, rs.core->error().empty() ? net.fault : rs.core->error());
        any = any || progressed;
        if (rs.engine->finished()) {
          res.outputs[rs.next][r] = rs.recvbuf;
          res.stats[rs.next][r] = rs.core->stats();
          if (opt.on_done) opt.on_done(r, rs.next, *rs.core);
          rs.core.reset();
          rs.next++;
          rs.start_at =
              clock.now() + opt.gap_max * std::uniform_real_distribution<double>(0, 1)(rng);
          any = true;
        }
      }
      if (!net.error.empty()) return fail(Status::kErrTransport, net.error);
    }
    bool all_done = true;
    double next = net.next_time();
    for (int r = 0; r < n; ++r) {
      RankState& rs = ranks[r];
      if (rs.next < opt.collectives) all_done = false;
      if (!rs.core && rs.next < opt.collectives) next = std::min(next, rs.start_at);
      if (rs.core) next = std::min(next, rs.engine->next_wakeup());
    }
    if (all_done) break;
    if (next == std::numeric_limits<double>::infinity()) {
      std::string who;
      for (int r = 0; r < n; ++r) {
        if (ranks[r].next < opt.collectives) who += " " + std::to_string(r);
      }
      for (int r = 0; r < n; ++r) {
        if (ranks[r].core) who += "\n  " + ranks[r].core->describe();
      }
      return fail(Status::kErrInternal, "deadlock: nothing pending, unfinished ranks:" + who);
    }
    clock.set(std::max(clock.now(), next));
    net.run_due(clock.now());
  }
  res.end_time = clock.now();
  res.leftover_messages = !net.idle();
  if (opt.unmatched_is_error && res.leftover_messages) {
    res.status = Status::kErrProtocol;
    res.error = "a message is left unmatched";
  }
  return res;
}

}  // namespace harness
}  // namespace skipring
