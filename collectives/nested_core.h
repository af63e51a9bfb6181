// A collective core run inside another one (a composed core: hier's inter-host ring). The
// outer core forwards the inner core's actions and routes their completions back without
// knowing how the inner core numbers its tokens, and learns that the inner collective is over
// from its done(), not from its actions.
//
// Tokens: every send, receive and reduction the inner core emits gets a fresh outer token
// `base | slot` from a table of slots; its completion is looked up there, handed to the inner
// core with the inner token, and the slot is freed. A cancel gets the outer token of the
// receive it cancels and frees its slot (no completion follows one). The outer core keeps
// every token with other high bits for itself. The inner core's kDone is not forwarded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/collective_core.h"
#include "common/status.h"
#include "common/token.h"

namespace skipring {

class NestedCore {
 public:
  // Outer tokens base | slot, slot < 2^slot_bits (base has none of those bits set).
  NestedCore(Token base, int slot_bits) : base_(base), slot_mask_((Token{1} << slot_bits) - 1) {}

  // True when `outer` is in this core's token range (whether or not it is outstanding).
  bool owns(Token outer) const { return (outer & ~slot_mask_) == base_; }
  bool started() const { return core_ != nullptr; }
  // The inner collective is over (and every one of its operations completed).
  bool done() const { return core_ != nullptr && core_->done(); }
  // Valid once started.
  const CollectiveCore& core() const { return *core_; }
  // The inner core's error, or this wrapper's (a completion for no outstanding operation).
  const std::string& error() const { return error_.empty() ? core_->error() : error_; }

  // Takes `core` and starts it; appends its actions, tokens mapped, to *out.
  Status start(std::unique_ptr<CollectiveCore> core, double now, ActionList* out) {
    core_ = std::move(core);
    ActionList inner;
    const Status st = core_->start(now, &inner);
    return forward(st, &inner, out);
  }
  Status on_recv(Token outer, size_t payload_bytes, double now, ActionList* out) {
    Token t = 0;
    SKIPRING_RETURN_IF_ERROR(complete(outer, &t));
    ActionList inner;
    return forward(core_->on_recv(t, payload_bytes, now, &inner), &inner, out);
  }
  Status on_send(Token outer, double now, ActionList* out) {
    Token t = 0;
    SKIPRING_RETURN_IF_ERROR(complete(outer, &t));
    ActionList inner;
    return forward(core_->on_send(t, now, &inner), &inner, out);
  }
  Status on_reduce(Token outer, double now, ActionList* out) {
    Token t = 0;
    SKIPRING_RETURN_IF_ERROR(complete(outer, &t));
    ActionList inner;
    return forward(core_->on_reduce(t, now, &inner), &inner, out);
  }
  Status on_time(double now, ActionList* out) {
    ActionList inner;
    return forward(core_->on_time(now, &inner), &inner, out);
  }
  double next_deadline() const {
    return core_ != nullptr ? core_->next_deadline() : std::numeric_limits<double>::infinity();
  }
  // Inner operations posted and not completed.
  size_t outstanding() const { return live_; }

 private:
  struct Slot {
    Token inner = 0;
    bool live = false;
  };

  // Frees the slot of `outer`, giving the inner token.
  Status complete(Token outer, Token* inner) {
    const size_t s = outer & slot_mask_;
    if (core_ == nullptr || !owns(outer) || s >= slots_.size() || !slots_[s].live) {
      error_ = "completion for no outstanding operation of the inner core (token " +
               std::to_string(outer) + ")";
      return Status::kErrProtocol;
    }
    *inner = slots_[s].inner;
    release(s);
    return Status::kOk;
  }
  Token acquire(Token inner) {
    size_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      s = slots_.size();
      slots_.emplace_back();
    }
    slots_[s] = Slot{inner, true};
    ++live_;
    return base_ | static_cast<Token>(s);
  }
  void release(size_t s) {
    slots_[s].live = false;
    free_.push_back(s);
    --live_;
  }
  // The outer token of the outstanding operation the inner core calls `inner`.
  bool find(Token inner, size_t* slot) const {
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].live && slots_[s].inner == inner) {
        *slot = s;
        return true;
      }
    }
    return false;
  }
  // Maps the inner actions into *out (kDone dropped).
  Status forward(Status st, ActionList* inner, ActionList* out) {
    if (!ok(st)) return st;
    for (Action& a : *inner) {
      switch (a.kind) {
        case Action::Kind::kSend:
        case Action::Kind::kRecv:
        case Action::Kind::kReduce:
          if (live_ > slot_mask_) {
            error_ = "more outstanding operations of the inner core than token slots";
            return Status::kErrProtocol;
          }
          a.token = acquire(a.token);
          break;
        case Action::Kind::kCancel: {
          size_t s = 0;
          if (!find(a.token, &s)) {
            error_ = "the inner core cancels a receive it has not posted";
            return Status::kErrProtocol;
          }
          a.token = base_ | static_cast<Token>(s);
          release(s);
          break;
        }
        case Action::Kind::kCopy:
          break;
        case Action::Kind::kDone:
          continue;
      }
      out->push_back(a);
    }
    return Status::kOk;
  }

  Token base_;
  Token slot_mask_;
  std::unique_ptr<CollectiveCore> core_;
  std::vector<Slot> slots_;
  std::vector<size_t> free_;
  size_t live_ = 0;
  std::string error_;
};

}  // namespace skipring
