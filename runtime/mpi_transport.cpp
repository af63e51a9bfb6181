// MPI point-to-point transport.
#include "runtime/mpi_transport.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "collectives/wire_header.h"
#include "runtime/log.h"

namespace skipring {
namespace {

bool contiguous(const void* header, size_t header_bytes, const void* payload) {
  return static_cast<const uint8_t*>(header) + header_bytes == payload;
}

// MPI tags of the two parts of a split message.
int header_tag(int tag) { return 2 * tag; }
int payload_tag(int tag) { return 2 * tag + 1; }

// A data message (payload > 0). Under SimGrid SMPI it goes out as MPI_Issend: SMPI completes
// an eager MPI_Isend (below smpi/async-small-thresh, 64 KiB in scripts/sim_run.sh) at once
// and shares a link max-min between every message in flight, so a window of sends
// (kAgInFlight, kPacedInFlight, the pipeline depth) paces nothing below 64 KiB: every segment
// goes out together and they all complete together. A real MPI's eager sends on one TCP
// connection are serialised by the stream and bounded by the socket buffer; a synchronous
// send completes when the receiver has matched it, which is closer to that. Rendezvous-size
// messages (>= 64 KiB) behave the same either way. Control messages (no payload) and the
// header of a split message stay MPI_Isend (a synchronous header too moved SimGrid n = 8,
// 64 MiB, late rank: skip-ahead 8054.660 -> 8837.015 us after the arrival, the payload's
// rendezvous already waits for the match). Outside SimGrid this is plain MPI_Isend.
int isend_data(const void* buf, int count, int peer, int tag, MPI_Comm comm, MPI_Request* req) {
#ifdef SKIPRING_SIMGRID
  return MPI_Issend(buf, count, MPI_BYTE, peer, tag, comm, req);
#else
  return MPI_Isend(buf, count, MPI_BYTE, peer, tag, comm, req);
#endif
}

// Whether split payloads are matched by MPI_Improbe and size-checked before MPI_Imrecv. Off:
// under Open MPI's UCX pml (mpi_collectives_ucx_np3) the probe handed out same-tag payloads
// from one sender out of order (a ring round's last, short segment before its first), which
// for equal-size segments would be a silent misassignment; posted receives keep MPI's
// non-overtaking order. With it off, a payload larger than its receive (a datatype-size
// mismatch above kPackLimit on both sides) is still written past the receive by Open MPI's CMA
// path; everything on the even tag is safe (post_recv). Under SimGrid it stays off as well
// (the engine blocks in the redirected MPI_Testsome on posted requests).
constexpr bool kProbeFirst = false;

const char* part_name(bool split, bool payload_part) {
  return !split ? "message" : payload_part ? "payload part" : "header part";
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  max_header_ = wire_header_bytes(size_);
  even_capacity_ = max_header_ + kPackLimit;
  int* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  // (tag_ub + 1) / 2 in 64 bits: ob1's MPI_TAG_UB is INT_MAX, and INT_MAX + 1 overflows.
  if (flag && tag_ub != nullptr) {
    tag_span_ =
        static_cast<int>(std::min<long long>(tag_span_, (static_cast<long long>(*tag_ub) + 1) / 2));
  }
}

MpiTransport::~MpiTransport() {
  for (auto& r : requests_) {
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
  for (Drain& d : drains_) {
    int done = 0;
    MPI_Test(&d.req, &done, MPI_STATUS_IGNORE);
    if (done) {
      delete[] d.buf;
    } else {
      // Still arriving (after a protocol error): MPI owns the buffer until it completes, so it
      // is left allocated.
      MPI_Request_free(&d.req);
    }
  }
}

int MpiTransport::take_staging(size_t bytes) {
  int idx;
  if (!free_staging_.empty()) {
    idx = free_staging_.back();
    free_staging_.pop_back();
  } else {
    idx = static_cast<int>(staging_.size());
    staging_.emplace_back();
  }
  if (staging_[idx].size() < bytes) staging_[idx].resize(bytes);
  return idx;
}

int MpiTransport::new_op(const Op& op) {
  if (!free_ops_.empty()) {
    const int i = free_ops_.back();
    free_ops_.pop_back();
    ops_[i] = op;
    return i;
  }
  ops_.push_back(op);
  return static_cast<int>(ops_.size()) - 1;
}

void MpiTransport::add_request(MPI_Request req, int op) {
  requests_.push_back(req);
  request_op_.push_back(op);
}

void MpiTransport::release_op(int op) {
  if (ops_[op].staging >= 0) free_staging_.push_back(ops_[op].staging);
  ops_[op].remaining = -1;
  free_ops_.push_back(op);
}

Status MpiTransport::post_send(int peer, int tag, const void* header, size_t header_bytes,
                               const void* payload, size_t payload_bytes, Token token) {
  if (header_bytes + payload_bytes > static_cast<size_t>(INT_MAX)) return Status::kErrArg;
  if (header_bytes > max_header_) {
    // Receivers size their buffers for at most this (post_recv).
    SKIPRING_LOG_ERROR("send with a {}-byte header (at most {} on {} ranks)", header_bytes,
                       max_header_, size_);
    return Status::kErrArg;
  }
  Op op{token,   false, payload_bytes > kPackLimit, 1, header_bytes, payload_bytes, nullptr,
        nullptr, -1};
  MPI_Request reqs[2];
  if (op.split) {
    op.remaining = 2;
    if (MPI_Isend(header, static_cast<int>(header_bytes), MPI_BYTE, peer, header_tag(tag), comm_,
                  &reqs[0]) != MPI_SUCCESS ||
        isend_data(payload, static_cast<int>(payload_bytes), peer, payload_tag(tag), comm_,
                   &reqs[1]) != MPI_SUCCESS) {
      return Status::kErrTransport;
    }
  } else {
    const void* buf = header;
    if (payload_bytes > 0 && !contiguous(header, header_bytes, payload)) {
      op.staging = take_staging(header_bytes + payload_bytes);
      uint8_t* st = staging_[op.staging].data();
      std::memcpy(st, header, header_bytes);
      std::memcpy(st + header_bytes, payload, payload_bytes);
      buf = st;
    }
    const int count = static_cast<int>(header_bytes + payload_bytes);
    const int rc = payload_bytes > 0
                       ? isend_data(buf, count, peer, header_tag(tag), comm_, &reqs[0])
                       : MPI_Isend(buf, count, MPI_BYTE, peer, header_tag(tag), comm_, &reqs[0]);
    if (rc != MPI_SUCCESS) {
      return Status::kErrTransport;
    }
  }
  const int id = new_op(op);
  for (int i = 0; i < op.remaining; ++i) add_request(reqs[i], id);
  return Status::kOk;
}

Status MpiTransport::post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                               size_t payload_bytes, Token token) {
  if (header_bytes + payload_bytes > static_cast<size_t>(INT_MAX)) return Status::kErrArg;
  if (header_bytes > max_header_) {
    SKIPRING_LOG_ERROR("receive with a {}-byte header (at most {} on {} ranks)", header_bytes,
                       max_header_, size_);
    return Status::kErrArg;
  }
  Op op{token, true, payload_bytes > kPackLimit, 1, header_bytes, 0, header, payload, -1};
  op.tag = tag;
  op.payload_capacity = payload_bytes;
  op.peer = peer;
  // The even tag carries a packed message (at most max_header_ + kPackLimit bytes) or the
  // header part of a split one (at most max_header_), whatever this receive expects: posted
  // ahead into a buffer that holds either, so no sender can overrun it; poll() checks the size.
  const size_t even_bytes = op.split ? header_bytes : header_bytes + payload_bytes;
  void* even_buf = header;
  if (even_bytes < even_capacity_ ||
      (!op.split && payload_bytes > 0 && !contiguous(header, header_bytes, payload))) {
    op.staging = take_staging(even_capacity_);
    even_buf = staging_[op.staging].data();
  }
  const int even_count = static_cast<int>(std::max(even_bytes, even_capacity_));
  const int src = peer < 0 ? MPI_ANY_SOURCE : peer;
  MPI_Request reqs[2];
  if (MPI_Irecv(even_buf, even_count, MPI_BYTE, src, header_tag(tag), comm_, &reqs[0]) !=
      MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  if (op.split) {
    op.remaining = 2;
    if (kProbeFirst) {
      // The payload part is probed and size-checked before it is received (poll()). From any
      // source, it waits for the header's sender (so two senders' parts are never paired).
      op.unmatched = kPayloadPart;
    } else if (peer == kAnySource) {
      // Posted once the header has come, from its sender.
      op.deferred_payload = true;
    } else {
      // From `peer`, or from the one rank that sends this tag (kAnySourceOneSender): both parts
      // at once; poll() checks that they came from the same rank.
      if (MPI_Irecv(payload, static_cast<int>(payload_bytes), MPI_BYTE, src, payload_tag(tag),
                    comm_, &reqs[1]) != MPI_SUCCESS) {
        return Status::kErrTransport;
      }
    }
  }
  const int id = new_op(op);
  add_request(reqs[0], id);
  if (op.split && !kProbeFirst && !op.deferred_payload) add_request(reqs[1], id);
  if (op.unmatched != 0) probing_.push_back(id);
  return Status::kOk;
}

Status MpiTransport::size_mismatch(const Op& op, const char* part, int from, size_t expected_min,
                                   size_t expected_max, int received, MPI_Message* msg) {
  if (expected_min == expected_max) {
    SKIPRING_LOG_ERROR(
        "protocol error: {} from rank {} with tag {}: expected {} bytes, received {} bytes", part,
        from, op.tag, expected_max, received);
  } else {
    SKIPRING_LOG_ERROR(
        "protocol error: {} from rank {} with tag {}: expected {} to {} bytes, received {} bytes",
        part, from, op.tag, expected_min, expected_max, received);
  }
  if (msg != nullptr && *msg != MPI_MESSAGE_NULL) {
    // Received into a buffer of its own size, so the sender's request completes.
    const size_t bytes = received > 0 ? static_cast<size_t>(received) : 0;
    if (bytes <= kDrainLimit) {
      Drain d{new uint8_t[bytes > 0 ? bytes : 1], MPI_REQUEST_NULL};
      if (MPI_Imrecv(d.buf, received, MPI_BYTE, msg, &d.req) == MPI_SUCCESS) {
        drains_.push_back(d);
      } else {
        delete[] d.buf;
      }
    }
  }
  return Status::kErrProtocol;
}

Status MpiTransport::probe_part(int op_id, uint8_t part, bool* matched) {
  *matched = false;
  Op& op = ops_[op_id];
  if (part != kPayloadPart) return Status::kErrInternal;
  // The payload of a kAnySource split message comes from the header's sender, once known.
  if (op.peer == kAnySource && op.source < 0) return Status::kOk;
  int src = op.peer < 0 ? MPI_ANY_SOURCE : op.peer;
  if (op.source >= 0) src = op.source;
  int flag = 0;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  if (MPI_Improbe(src, payload_tag(op.tag), comm_, &flag, &msg, &st) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  if (!flag) return Status::kOk;
  *matched = true;
  int bytes = 0;
  if (MPI_Get_count(&st, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes == MPI_UNDEFINED) bytes = -1;
  if (bytes < 0 || static_cast<size_t>(bytes) > op.payload_capacity) {
    return size_mismatch(op, "payload part", st.MPI_SOURCE, 0, op.payload_capacity, bytes, &msg);
  }
  MPI_Request req;
  if (MPI_Imrecv(op.payload, bytes, MPI_BYTE, &msg, &req) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  add_request(req, op_id);
  op.unmatched &= static_cast<uint8_t>(~part);
  return Status::kOk;
}

Status MpiTransport::match_probed(bool* any) {
  *any = false;
  if (probing_.empty()) return Status::kOk;
  // Several payloads pending and nothing waiting: one probe instead of one per receive.
  if (probing_.size() > 1) {
    int flag = 0;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return Status::kErrTransport;
    }
    if (!flag) return Status::kOk;
  }
  // In posting order, so two receives that can match the same message take them in order,
  // as posted MPI receives would.
  size_t keep = 0;
  for (size_t i = 0; i < probing_.size(); ++i) {
    const int id = probing_[i];
    bool matched = false;
    SKIPRING_RETURN_IF_ERROR(probe_part(id, kPayloadPart, &matched));
    *any = *any || matched;
    if (ops_[id].unmatched != 0) probing_[keep++] = id;
  }
  probing_.resize(keep);
  return Status::kOk;
}

Status MpiTransport::poll(std::vector<Completion>* done) {
  SKIPRING_RETURN_IF_ERROR(test_requests(done));
  // Payload parts that arrived (or whose announcement did) during that test: received now and
  // tested again, so a payload completes in the poll that first sees it, as a receive posted
  // ahead would.
  if (probing_.empty()) return Status::kOk;
  bool matched = false;
  SKIPRING_RETURN_IF_ERROR(match_probed(&matched));
  return matched ? test_requests(done) : Status::kOk;
}

Status MpiTransport::test_requests(std::vector<Completion>* done) {
  if (requests_.empty()) return Status::kOk;
  const int n = static_cast<int>(requests_.size());
  indices_.resize(n);
  statuses_.resize(n);
  int outcount = 0;
  if (MPI_Testsome(n, requests_.data(), &outcount, indices_.data(), statuses_.data()) !=
      MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  if (outcount == MPI_UNDEFINED || outcount == 0) return Status::kOk;
  for (int i = 0; i < outcount; ++i) {
    const int op_id = request_op_[indices_[i]];
    Op& op = ops_[op_id];
    if (op.is_recv) {
      // Every part's size, before anything is copied out of staging. The even-tag part was
      // received into a buffer that holds any sender's message, the payload part was probed
      // and checked before it was received (probe-first), so nothing was overrun.
      int bytes = 0;
      MPI_Get_count(&statuses_[i], MPI_BYTE, &bytes);
      const bool payload_part = op.split && statuses_[i].MPI_TAG % 2 == 1;
      const size_t lo = payload_part ? 0 : op.header_bytes;
      const size_t hi = payload_part ? op.payload_capacity
                        : op.split   ? op.header_bytes
                                     : op.header_bytes + op.payload_capacity;
      if (bytes == MPI_UNDEFINED || bytes < 0 || static_cast<size_t>(bytes) < lo ||
          static_cast<size_t>(bytes) > hi) {
        return size_mismatch(op, part_name(op.split, payload_part), statuses_[i].MPI_SOURCE, lo, hi,
                             bytes, nullptr);
      }
      if (op.split) {
        // The two parts of one message come from one rank (kAnySourceOneSender's promise).
        const int from = statuses_[i].MPI_SOURCE;
        if (op.source >= 0 && op.source != from) {
          SKIPRING_LOG_ERROR(
              "protocol error: split message with tag {}: header and payload from ranks {} and {}",
              op.tag, op.source, from);
          return Status::kErrProtocol;
        }
        op.source = from;
      }
      if (payload_part) {
        op.payload_bytes = static_cast<size_t>(bytes);
      } else if (!op.split) {
        op.payload_bytes = bytes - op.header_bytes;
      } else if (op.staging >= 0) {
        std::memcpy(op.header, staging_[op.staging].data(), op.header_bytes);
      }
      if (!payload_part && op.deferred_payload) {
        // Header of an any-source split message arrived: now the payload, from that sender.
        op.deferred_payload = false;
        MPI_Request req;
        if (MPI_Irecv(op.payload, static_cast<int>(op.payload_capacity), MPI_BYTE, op.source,
                      payload_tag(op.tag), comm_, &req) != MPI_SUCCESS) {
          return Status::kErrTransport;
        }
        late_requests_.push_back(req);
        late_request_op_.push_back(op_id);
      }
    }
    if (--op.remaining > 0) continue;
    Completion c{op.token, op.is_recv, op.is_recv ? op.payload_bytes : 0};
    if (op.is_recv && !op.split && op.staging >= 0) {
      const uint8_t* buf = staging_[op.staging].data();
      std::memcpy(op.header, buf, op.header_bytes);
      if (c.payload_bytes) std::memcpy(op.payload, buf + op.header_bytes, c.payload_bytes);
    }
    release_op(request_op_[indices_[i]]);
    done->push_back(c);
  }
  // Drop completed requests (highest index first so swaps do not disturb the rest).
  std::sort(indices_.begin(), indices_.begin() + outcount, std::greater<int>());
  for (int i = 0; i < outcount; ++i) {
    const int k = indices_[i];
    requests_[k] = requests_.back();
    request_op_[k] = request_op_.back();
    requests_.pop_back();
    request_op_.pop_back();
  }
  for (size_t i = 0; i < late_requests_.size(); ++i)
    add_request(late_requests_[i], late_request_op_[i]);
  late_requests_.clear();
  late_request_op_.clear();
  return Status::kOk;
}

Status MpiTransport::cancel(Token token) {
  int id = -1;
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (ops_[i].remaining > 0 && ops_[i].token == token && ops_[i].is_recv)
      id = static_cast<int>(i);
  }
  if (id < 0) return Status::kErrArg;
  bool received = false;
  for (size_t k = requests_.size(); k-- > 0;) {
    if (request_op_[k] != id) continue;
    MPI_Status st;
    MPI_Cancel(&requests_[k]);
    MPI_Wait(&requests_[k], &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    received = received || !cancelled;
    requests_[k] = requests_.back();
    request_op_[k] = request_op_.back();
    requests_.pop_back();
    request_op_.pop_back();
  }
  if (ops_[id].unmatched != 0) {
    // A payload part not matched yet: nothing posted for it. One waiting now, which a posted
    // receive would have matched, is data the protocol did not expect.
    const Op& op = ops_[id];
    const int src = op.source >= 0 ? op.source : op.peer < 0 ? MPI_ANY_SOURCE : op.peer;
    // Another receive for this tag may be the one a waiting message is for.
    bool shared_tag = false;
    for (int other : probing_)
      shared_tag = shared_tag || (other != id && ops_[other].tag == op.tag);
    if (!shared_tag && (op.peer != kAnySource || op.source >= 0)) {
      int flag = 0;
      MPI_Iprobe(src, payload_tag(op.tag), comm_, &flag, MPI_STATUS_IGNORE);
      received = received || flag != 0;
    }
    probing_.erase(std::remove(probing_.begin(), probing_.end(), id), probing_.end());
    ops_[id].unmatched = 0;
  }
  release_op(id);
  // The protocol cancels only receives nothing can match any more: data here is a bug.
  return received ? Status::kErrProtocol : Status::kOk;
}

Status MpiTransport::unmatched_message_waiting(bool* waiting) {
  int flag = 0;
  if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  *waiting = flag != 0;
  return Status::kOk;
}

}  // namespace skipring
