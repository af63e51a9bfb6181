// NestedCore (collectives/nested_core.h): an inner core's tokens, whatever their bits, are
// mapped into the outer core's range and back; cancels follow; the end is the inner done().
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collectives/nested_core.h"

namespace skipring {
namespace {

// Posts two receives, a send and a reduction with tokens in the outer core's own range
// (high bits set); once the send completes it cancels the second receive; done when the first
// receive and the reduction have completed. Records the inner tokens it is handed back.
class FakeInner final : public CoreBase {
 public:
  static constexpr Token kRecvA = 0xffffffffu, kRecvB = 0xc0000000u, kSend = 0xc0000001u,
                         kReduce = 7;
  FakeInner() : CoreBase(0, 0) {}
  Status start(double now, ActionList* out) override {
    (void)now;
    out->push_back(message_action(Action::Kind::kRecv, kRecvA, 1, 0, nullptr, 0, nullptr, 0));
    out->push_back(message_action(Action::Kind::kRecv, kRecvB, 1, 1, nullptr, 0, nullptr, 0));
    out->push_back(message_action(Action::Kind::kSend, kSend, 1, 2, nullptr, 0, nullptr, 0));
    out->push_back(reduce_action(kReduce, nullptr, nullptr, nullptr, 0, DType::kByte, ROp::kSum));
    out->push_back(copy_action(nullptr, nullptr, 0));
    return Status::kOk;
  }
  Status on_recv(Token t, size_t, double now, ActionList* out) override {
    seen.push_back(t);
    if (t != kRecvA) return fail("unexpected receive");
    return maybe_finish(now, out);
  }
  Status on_send(Token t, double, ActionList* out) override {
    seen.push_back(t);
    out->push_back(cancel_action(kRecvB));
    return Status::kOk;
  }
  Status on_reduce(Token t, double now, ActionList* out) override {
    seen.push_back(t);
    return maybe_finish(now, out);
  }
  std::vector<Token> seen;

 private:
  Status maybe_finish(double now, ActionList* out) {
    if (++finished_ == 2) complete(now, out);
    return Status::kOk;
  }
  int finished_ = 0;
};

const Action* find(const ActionList& acts, Action::Kind k, int tag = -1) {
  for (const Action& a : acts) {
    if (a.kind == k && (tag < 0 || a.tag == tag)) return &a;
  }
  return nullptr;
}

TEST(NestedCore, MapsTokensCancelsAndEndsOnDone) {
  const Token base = Token{3} << 30;
  NestedCore nested(base, 30);
  EXPECT_FALSE(nested.started());
  auto inner_owned = std::make_unique<FakeInner>();
  FakeInner* inner = inner_owned.get();
  ActionList acts;
  ASSERT_EQ(nested.start(std::move(inner_owned), 0.0, &acts), Status::kOk);
  ASSERT_EQ(acts.size(), 5u);  // kDone never forwarded; the copy passes unchanged
  std::set<Token> tokens;
  for (const Action& a : acts) {
    if (a.kind == Action::Kind::kCopy) continue;
    EXPECT_TRUE(nested.owns(a.token)) << a.token;
    EXPECT_TRUE(tokens.insert(a.token).second) << "outer tokens distinct";
  }
  EXPECT_EQ(nested.outstanding(), 4u);
  EXPECT_FALSE(nested.owns(0)) << "the outer core's other tokens stay its own";
  const Action recv_a = *find(acts, Action::Kind::kRecv, 0);
  const Action recv_b = *find(acts, Action::Kind::kRecv, 1);
  const Action send = *find(acts, Action::Kind::kSend);
  const Action reduce = *find(acts, Action::Kind::kReduce);

  ActionList more;
  ASSERT_EQ(nested.on_send(send.token, 1.0, &more), Status::kOk);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].kind, Action::Kind::kCancel);
  EXPECT_EQ(more[0].token, recv_b.token) << "the cancel names the receive's outer token";
  EXPECT_EQ(nested.outstanding(), 2u);
  more.clear();
  EXPECT_EQ(nested.on_recv(recv_b.token, 0, 2.0, &more), Status::kErrProtocol)
      << "no completion for a cancelled receive";
  EXPECT_NE(nested.error().find("no outstanding"), std::string::npos) << nested.error();

  NestedCore fresh(base, 30);
  ActionList facts;
  ASSERT_EQ(fresh.start(std::make_unique<FakeInner>(), 0.0, &facts), Status::kOk);
  EXPECT_EQ(fresh.on_reduce(0, 1.0, &facts), Status::kErrProtocol) << "not in its range";

  more.clear();
  ASSERT_EQ(nested.on_recv(recv_a.token, 0, 3.0, &more), Status::kOk);
  EXPECT_FALSE(nested.done());
  ASSERT_EQ(nested.on_reduce(reduce.token, 4.0, &more), Status::kOk);
  EXPECT_TRUE(nested.done()) << "the inner core's completion";
  EXPECT_TRUE(more.empty()) << "its kDone stays inside";
  EXPECT_EQ(nested.outstanding(), 0u);
  const std::vector<Token> expected = {FakeInner::kSend, FakeInner::kRecvA, FakeInner::kReduce};
  EXPECT_EQ(inner->seen, expected) << "inner tokens handed back unchanged";
}

TEST(NestedCore, FreedSlotsAreReused) {
  NestedCore nested(Token{1} << 31, 31);
  ActionList acts;
  ASSERT_EQ(nested.start(std::make_unique<FakeInner>(), 0.0, &acts), Status::kOk);
  const Action send = *find(acts, Action::Kind::kSend);
  ActionList more;
  ASSERT_EQ(nested.on_send(send.token, 1.0, &more), Status::kOk);
  // The send's and the cancelled receive's slots are free: 2 of 4 outstanding.
  EXPECT_EQ(nested.outstanding(), 2u);
}

}  // namespace
}  // namespace skipring
