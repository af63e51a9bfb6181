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
#ifndef SKIPRING_SIMGRID
  // The peers MPI reaches through shared memory (its MPI_COMM_TYPE_SHARED group, whatever
  // SKIPRING_HOST_MAP says): only there can a single-copy transfer (CMA) write past a receive,
  // so only their payloads wait for the call-word check (set_call). Collective over comm_, as
  // the transport is made at communicator setup on every rank.
  same_node_.assign(static_cast<size_t>(size_), 1);
  MPI_Comm local = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS &&
      local != MPI_COMM_NULL) {
    MPI_Group all = MPI_GROUP_NULL, mine = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &all);
    MPI_Comm_group(local, &mine);
    std::vector<int> ranks(static_cast<size_t>(size_)), in_mine(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) ranks[r] = r;
    MPI_Group_translate_ranks(all, size_, ranks.data(), mine, in_mine.data());
    for (int r = 0; r < size_; ++r) same_node_[r] = in_mine[r] != MPI_UNDEFINED;
    MPI_Group_free(&all);
    MPI_Group_free(&mine);
    MPI_Comm_free(&local);
  }
#endif
}

MpiTransport::~MpiTransport() {
  for (auto& r : requests_) {
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
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

Status MpiTransport::check_header(const char* what, size_t header_bytes) const {
  if (header_bytes <= max_header_) return Status::kOk;
  SKIPRING_LOG_ERROR("{} with a {}-byte header (at most {} on {} ranks)", what, header_bytes,
                     max_header_, size_);
  return Status::kErrArg;
}

Status MpiTransport::post_send(int peer, int tag, const void* header, size_t header_bytes,
                               const void* payload, size_t payload_bytes, Token token) {
  if (header_bytes + payload_bytes > static_cast<size_t>(INT_MAX)) return Status::kErrArg;
  SKIPRING_RETURN_IF_ERROR(check_header("send", header_bytes));  // receivers size for this
  Op op{token,   false, payload_bytes > kPackLimit, 1, header_bytes, payload_bytes, nullptr,
        nullptr, -1};
  MPI_Request reqs[2];
  if (op.split) {
    // The header part carries the payload's byte count after the header (kSizeWordBytes): the
    // receiver posts the payload's receive only once it knows the payload fits.
    op.remaining = 2;
    op.staging = take_staging(header_bytes + kSizeWordBytes);
    uint8_t* st = staging_[op.staging].data();
    std::memcpy(st, header, header_bytes);
    const uint64_t trailer[2] = {payload_bytes, call_};
    std::memcpy(st + header_bytes, trailer, kSizeWordBytes);
    if (MPI_Isend(st, static_cast<int>(header_bytes + kSizeWordBytes), MPI_BYTE, peer,
                  header_tag(tag), comm_, &reqs[0]) != MPI_SUCCESS ||
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
  SKIPRING_RETURN_IF_ERROR(check_header("receive", header_bytes));
  Op op{token, true, payload_bytes > kPackLimit, 1, header_bytes, 0, header, payload, -1};
  op.tag = tag;
  op.payload_capacity = payload_bytes;
  op.peer = peer;
  // The even tag carries a packed message (at most max_header_ + kPackLimit bytes) or the
  // header part of a split one (at most max_header_ + kSizeWordBytes), whatever this receive
  // expects: posted ahead into a buffer that holds either, so no sender can overrun it; poll()
  // checks the size.
  const size_t even_bytes = op.split ? header_bytes + kSizeWordBytes : header_bytes + payload_bytes;
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
    // From `peer`, or from the one rank that sends this tag (kAnySourceOneSender), whose call
    // word matched (or the call is unknown): both parts at once; poll() checks that they came
    // from the same rank. Else the payload once the header part has come (mpi_transport.h).
    op.remaining = 2;
    const bool trusted = call_ == 0 || (peer >= 0 && verified_[peer] != 0);
    if (peer == kAnySource || !trusted) {
      op.deferred_payload = true;
    } else if (MPI_Irecv(payload, static_cast<int>(payload_bytes), MPI_BYTE, src, payload_tag(tag),
                         comm_, &reqs[1]) != MPI_SUCCESS) {
      return Status::kErrTransport;
    }
  }
  const int id = new_op(op);
  add_request(reqs[0], id);
  if (op.split && !op.deferred_payload) add_request(reqs[1], id);
  return Status::kOk;
}

Status MpiTransport::poll(std::vector<Completion>* done) { return test_requests(done); }

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
      // received into a buffer that holds any sender's message; the payload part into the
      // receive's own buffer (mpi_transport.h: the one case Open MPI's CMA can overrun).
      int bytes = 0;
      MPI_Get_count(&statuses_[i], MPI_BYTE, &bytes);
      const bool payload_part = op.split && statuses_[i].MPI_TAG % 2 == 1;
      const size_t lo = payload_part ? 0
                        : op.split   ? op.header_bytes + kSizeWordBytes
                                     : op.header_bytes;
      const size_t hi = payload_part ? op.payload_capacity
                        : op.split   ? op.header_bytes + kSizeWordBytes
                                     : op.header_bytes + op.payload_capacity;
      if (bytes == MPI_UNDEFINED || bytes < 0 || static_cast<size_t>(bytes) < lo ||
          static_cast<size_t>(bytes) > hi) {
        return report_size_mismatch(part_name(op.split, payload_part), statuses_[i].MPI_SOURCE,
                                    op.tag, lo, hi, bytes);
      }
      if (op.split) {
        SKIPRING_RETURN_IF_ERROR(check_same_sender(op.tag, statuses_[i].MPI_SOURCE, &op.source));
      }
      if (payload_part) {
        op.payload_bytes = static_cast<size_t>(bytes);
      } else if (!op.split) {
        op.payload_bytes = bytes - op.header_bytes;
      } else {
        std::memcpy(op.header, staging_[op.staging].data(), op.header_bytes);
        SKIPRING_RETURN_IF_ERROR(check_trailer(op_id, statuses_[i].MPI_SOURCE));
      }
    }
    if (--op.remaining > 0) continue;
    Completion c{op.token, op.is_recv, op.is_recv ? op.payload_bytes : 0,
                 op.is_recv ? (op.split ? op.source : statuses_[i].MPI_SOURCE) : -1};
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

void MpiTransport::set_call(uint64_t word) {
#ifdef SKIPRING_SIMGRID
  // Under SimGrid SMPI the check stays off: no single-copy path can write past a receive there,
  // and SMPI starts a rendezvous-size transfer only once its receive is posted, so each first
  // piece waiting for its header would cost a whole simulated latency (n = 8 on cluster-8,
  // skip-ahead: 1 MiB 558 -> 598 us, 16 MiB 6499 -> 6641 us; the ring 0.7-0.9 %), where a real
  // MPI's rendezvous request arrives right behind the header part.
  (void)word;
#else
  call_ = word;
  // Peers across the network are trusted from the start (their transports truncate, they do not
  // overrun): deferring their first payloads cost 3-4 % of a training epoch across 4 emulated
  // hosts (TCP), where the rendezvous request of a deferred payload waits for the receiver's
  // next poll.
  if (word != 0) {
    verified_.resize(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) verified_[r] = same_node_[r] ? 0 : 1;
  }
#endif
}

Status MpiTransport::post_deferred_payload(int op_id, int source, size_t bytes) {
  Op& op = ops_[op_id];
  op.deferred_payload = false;
  MPI_Request req;
  if (MPI_Irecv(op.payload, static_cast<int>(bytes), MPI_BYTE, source, payload_tag(op.tag), comm_,
                &req) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  late_requests_.push_back(req);
  late_request_op_.push_back(op_id);
  return Status::kOk;
}

Status MpiTransport::check_trailer(int op_id, int source) {
  Op& op = ops_[op_id];
  uint64_t trailer[2];
  std::memcpy(trailer, staging_[op.staging].data() + op.header_bytes, kSizeWordBytes);
  if (trailer[0] > op.payload_capacity) {
    return report_size_mismatch("payload part (announced)", source, op.tag, 0, op.payload_capacity,
                                static_cast<long long>(std::min<uint64_t>(trailer[0], LLONG_MAX)));
  }
  if (call_ != 0 && trailer[1] != call_) {
    SKIPRING_LOG_ERROR(
        "protocol error: the all-reduce's arguments differ across ranks: rank {} called it with "
        "count {}{}, this rank with count {} (every rank must pass the same count, datatype and "
        "op)",
        source, call_word_count(trailer[1]),
        (trailer[1] & 0xffff) != (call_ & 0xffff) ? " and another datatype or op" : "",
        call_word_count(call_));
    return Status::kErrProtocol;
  }
  if (!op.deferred_payload) return Status::kOk;
  SKIPRING_RETURN_IF_ERROR(post_deferred_payload(op_id, source, static_cast<size_t>(trailer[0])));
  if (call_ == 0 || verified_[source] != 0) return Status::kOk;
  // The sender's call matched: its other pieces fit their receives as posted.
  verified_[source] = 1;
  for (size_t i = 0; i < ops_.size(); ++i) {
    Op& o = ops_[i];
    if (o.remaining > 0 && o.is_recv && o.deferred_payload && o.peer == source) {
      o.source = source;
      SKIPRING_RETURN_IF_ERROR(
          post_deferred_payload(static_cast<int>(i), source, o.payload_capacity));
    }
  }
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
