// Recursive doubling straight on MPI point-to-point (see rd_direct.h).
#include "runtime/rd_direct.h"

#include <climits>
#include <cstring>
#include <string>

#include "collectives/recursive_doubling.h"
#include "collectives/reduce_kernels.h"
#include "runtime/log.h"

namespace skipring {
namespace {

// The cores' fold-in numbering (recursive_doubling.h), so both run the same reduction tree.
struct Layout : FoldInLayout {
  Layout(int n, int pos) { fold_in(n, pos); }
  using FoldInLayout::extra_;
  using FoldInLayout::fold_peer_;
  using FoldInLayout::has_extra_;
  using FoldInLayout::pos_of_vrank;
  using FoldInLayout::rounds_;
  using FoldInLayout::vrank_;
};

// Counts that differ across ranks (an erroneous program) must give an error, never a write
// past a buffer: Open MPI 4.1's single-copy (CMA) rendezvous writes a message longer than its
// receive past the receive's end (docs/reliability.md). So no receive here is ever shorter than
// what any rank can send on its tag:
//  - a message of at most kSmallBytes goes as it is, received into an inbox of kInboxBytes;
//  - a longer one is announced: first kInboxBytes on the same tag (kAnnounceMagic and its byte
//    count), then the payload on tag + kRdPayloadTagOffset, whose receive is posted only once
//    the announcement matched (sender first, so the payload's rendezvous request is already
//    there when the receive is posted: no extra round trip).
// The receiver compares the size it got (MPI_Get_count, or the announced count) with its own; a
// difference is kErrProtocol on both partners of the exchange with both counts in the log. An
// announced payload that does not fit is drained into a buffer of its size, so the partner's
// send completes and nothing is left in flight. Ranks waiting on a rank that stopped at the
// error time out (SKIPRING_TIMEOUT).
constexpr size_t kSmallBytes = 1024;
constexpr size_t kInboxBytes = kSmallBytes + 16;
constexpr uint64_t kAnnounceMagic = 0x534b52474c4f4e47ULL;  // "SKRGLONG"
constexpr int kRdPayloadTagOffset = 64;

// One rank's waits, watched (runtime/mpi_wait.h): a partner that never answers gives warnings
// and then kErrTimeout with *timeout_message set, not a silent hang.
struct Waiter {
  const WaitPolicy& policy;
  uint64_t seq;
  std::string* timeout_message;
  size_t elem;     // bytes per element, for the error message
  uint8_t* inbox;  // kInboxBytes
  WaitWhat what(int round, int peer) const {
    WaitWhat w;
    w.what = "all-reduce";
    w.how = "recursive doubling";
    w.seq = static_cast<int64_t>(seq);
    w.step = round;
    w.peer = peer;
    return w;
  }
  Status wait(MPI_Request* reqs, int n, int recvs, int round, int peer,
              MPI_Status* statuses = nullptr) const {
    return wait_all(Requests{reqs, n, recvs, statuses}, policy, what(round, peer), timeout_message);
  }
  Status send(const void* buf, size_t bytes, int peer, int tag, MPI_Comm comm, int round) const {
    return exchange(comm, peer, tag, buf, nullptr, bytes, round);
  }
  Status recv(void* buf, size_t bytes, int peer, int tag, MPI_Comm comm, int round) const {
    return exchange(comm, peer, tag, nullptr, buf, bytes, round);
  }

  // The inbox received `got` bytes from `peer` where this rank expected `bytes` (its own
  // count): the error, after draining an announced payload.
  Status mismatch(MPI_Comm comm, int peer, int tag, size_t bytes, int got, int round) const {
    uint64_t theirs = got < 0 ? 0 : static_cast<uint64_t>(got);
    uint64_t magic = 0;
    if (got == static_cast<int>(kInboxBytes)) std::memcpy(&magic, inbox, sizeof(magic));
    const bool announced = magic == kAnnounceMagic;
    if (announced) std::memcpy(&theirs, inbox + 8, sizeof(theirs));
    SKIPRING_LOG_ERROR(
        "allreduce #{} (recursive doubling), round {}: the count differs across ranks: this rank "
        "has {} elements ({} bytes), rank {} sent {} bytes ({} elements of {} bytes); every rank "
        "must call with the same count",
        seq, round, bytes / elem, bytes, peer, theirs, theirs / elem, elem);
    if (announced && theirs <= static_cast<uint64_t>(INT32_MAX)) {
      std::vector<uint8_t> drain(static_cast<size_t>(theirs));
      MPI_Request req;
      if (MPI_Irecv(drain.data(), static_cast<int>(theirs), MPI_BYTE, peer,
                    tag + kRdPayloadTagOffset, comm, &req) == MPI_SUCCESS) {
        if (wait(&req, 1, 1, round, peer) == Status::kErrTimeout) leak_pending(&drain);
      }
    }
    return Status::kErrProtocol;
  }

  // Sends `mine` (nullptr: nothing) to `peer` with tag `tag` and receives into `theirs`
  // (nullptr: nothing) from it with `recv_tag` (default: the same tag): the receive posted
  // first, then the send, then a watched wait. Up to kSmallBytes the send of an exchange
  // is a plain MPI_Send: that small a message is sent eagerly by every MPI transport (Open
  // MPI's vader 4 KiB, tcp 64 KiB, UCX's eager thresholds are larger), so MPI_Send returns once
  // it is handed over, whatever the peer does, and it takes Open MPI's request-free immediate
  // path (MPI_Isend + a wait: +0.2 us per round at 64 B on shared memory). Larger messages are
  // announced (above).
  Status exchange(MPI_Comm comm, int peer, int tag, const void* mine, void* theirs, size_t bytes,
                  int round, int recv_tag = -1) const {
    if (recv_tag < 0) recv_tag = tag;
    const bool small = bytes <= kSmallBytes;
    MPI_Status sts[2];
    if (small && mine != nullptr && theirs != nullptr && policy.timeout_s <= 0) {
      // No watchdog (SKIPRING_TIMEOUT=0): one blocking MPI_Sendrecv, the fastest form (MPI_Test
      // loops cost about 0.05-0.1 us more per 8-byte all-reduce at np 2 on shared memory).
      if (MPI_Sendrecv(mine, static_cast<int>(bytes), MPI_BYTE, peer, tag, inbox,
                       static_cast<int>(kInboxBytes), MPI_BYTE, peer, recv_tag, comm,
                       &sts[0]) != MPI_SUCCESS) {
        return Status::kErrTransport;
      }
      return received(comm, peer, recv_tag, theirs, bytes, sts[0], round, nullptr);
    }
    MPI_Request reqs[2];
    MPI_Request payload_send = MPI_REQUEST_NULL;
    int n = 0;
    const int recvs = theirs != nullptr ? 1 : 0;
    if (theirs != nullptr && MPI_Irecv(inbox, static_cast<int>(kInboxBytes), MPI_BYTE, peer,
                                       recv_tag, comm, &reqs[n++]) != MPI_SUCCESS) {
      return Status::kErrTransport;
    }
    uint8_t announce[kInboxBytes];
    if (mine != nullptr) {
      int rc;
      if (small && theirs != nullptr) {
        rc = MPI_Send(mine, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm);
      } else if (small) {
        rc = MPI_Isend(mine, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm, &reqs[n++]);
      } else {
        const uint64_t len = bytes;
        std::memset(announce, 0, sizeof(announce));
        std::memcpy(announce, &kAnnounceMagic, sizeof(kAnnounceMagic));
        std::memcpy(announce + 8, &len, sizeof(len));
        rc = MPI_Isend(announce, static_cast<int>(kInboxBytes), MPI_BYTE, peer, tag, comm,
                       &reqs[n++]);
        if (rc == MPI_SUCCESS) {
          rc = MPI_Isend(mine, static_cast<int>(bytes), MPI_BYTE, peer, tag + kRdPayloadTagOffset,
                         comm, &payload_send);
        }
      }
      if (rc != MPI_SUCCESS) {
        if (recvs) {
          MPI_Cancel(&reqs[0]);
          MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
        }
        return Status::kErrTransport;
      }
    }
    // The announcement (or small message) both ways first; the payload's send completes once
    // the partner has checked the announcement and posted its receive.
    if (n > 0) {
      if (const Status st = wait(reqs, n, recvs, round, peer, sts); !ok(st)) {
        if (payload_send != MPI_REQUEST_NULL) MPI_Request_free(&payload_send);  // background
        return st;
      }
    }
    if (theirs == nullptr) {
      return payload_send == MPI_REQUEST_NULL ? Status::kOk
                                              : wait(&payload_send, 1, 0, round, peer);
    }
    return received(comm, peer, recv_tag, theirs, bytes, sts[0], round, &payload_send);
  }

  // The inbox's message (status st) has come: checks it, copies a small payload out, or
  // receives an announced one (and completes *payload_send, this rank's own, with it).
  Status received(MPI_Comm comm, int peer, int recv_tag, void* theirs, size_t bytes,
                  const MPI_Status& st, int round, MPI_Request* payload_send) const {
    const bool small = bytes <= kSmallBytes;
    Status bad = Status::kOk;
    int got = -1;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (small) {
      if (got == static_cast<int>(bytes)) {
        std::memcpy(theirs, inbox, bytes);
      } else {
        bad = mismatch(comm, peer, recv_tag, bytes, got, round);
      }
    } else {
      uint64_t magic = 0, len = 0;
      if (got == static_cast<int>(kInboxBytes)) {
        std::memcpy(&magic, inbox, sizeof(magic));
        std::memcpy(&len, inbox + 8, sizeof(len));
      }
      if (magic != kAnnounceMagic || len != bytes) {
        bad = mismatch(comm, peer, recv_tag, bytes, got, round);
      } else {
        MPI_Request reqs[2];
        int n = 0;
        if (MPI_Irecv(theirs, static_cast<int>(bytes), MPI_BYTE, peer,
                      recv_tag + kRdPayloadTagOffset, comm, &reqs[n++]) != MPI_SUCCESS) {
          return Status::kErrTransport;
        }
        if (payload_send != nullptr && *payload_send != MPI_REQUEST_NULL) {
          reqs[n++] = *payload_send;
          *payload_send = MPI_REQUEST_NULL;
        }
        return wait(reqs, n, 1, round, peer);
      }
    }
    // This rank's own announced payload: the partner drains it after its own check.
    if (payload_send != nullptr && *payload_send != MPI_REQUEST_NULL) {
      const Status st2 = wait(payload_send, 1, 0, round, peer);
      if (!ok(st2)) return st2;
    }
    return bad;
  }
};

}  // namespace

Status rd_direct_allreduce(MPI_Comm comm, const std::vector<int>& ring, int pos,
                           const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op,
                           std::vector<uint8_t>* scratch, const WaitPolicy& wait, uint64_t seq,
                           std::string* timeout_message, uint32_t* sent, uint32_t* received) {
  uint8_t inbox[kInboxBytes];
  const Waiter waiter{wait, seq, timeout_message, dtype_size(dtype), inbox};
  const int n = static_cast<int>(ring.size());
  const size_t bytes = count * dtype_size(dtype);
  uint32_t n_sent = 0, n_recv = 0;
  auto count_msgs = [&]() {
    if (sent) *sent = n_sent;
    if (received) *received = n_recv;
  };
  if (bytes > static_cast<size_t>(INT32_MAX)) return Status::kErrCount;
  if (n == 1 || count == 0) {
    if (count > 0 && sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, bytes);
    count_msgs();
    return Status::kOk;
  }
  const Layout lay(n, pos);
  if (scratch->size() < bytes) scratch->resize(bytes);
  void* tmp = scratch->data();

  if (lay.extra_) {
    // An extra position: give the input to the right neighbour, take the result back.
    const int peer = ring[lay.fold_peer_];
    if (sendbuf == recvbuf) {
      // In place the input and the result share the buffer: the send must be over before a
      // receive into it is posted.
      SKIPRING_RETURN_IF_ERROR(waiter.send(sendbuf, bytes, peer, kRdDirectTagBase, comm, 0));
      SKIPRING_RETURN_IF_ERROR(waiter.recv(recvbuf, bytes, peer, kRdDirectTagBase + 63, comm, 0));
    } else {
      SKIPRING_RETURN_IF_ERROR(waiter.exchange(comm, peer, kRdDirectTagBase, sendbuf, recvbuf,
                                               bytes, 0, kRdDirectTagBase + 63));
    }
    n_sent = 1;
    n_recv = 1;
    count_msgs();
    return Status::kOk;
  }

  const void* cur = sendbuf;
  if (lay.has_extra_) {
    // Partner of the extra at pos - 1: a = the extra's input (the lower position).
    SKIPRING_RETURN_IF_ERROR(
        waiter.recv(tmp, bytes, ring[lay.fold_peer_], kRdDirectTagBase, comm, 0));
    ++n_recv;
    SKIPRING_RETURN_IF_ERROR(reduce(op, dtype, recvbuf, tmp, sendbuf, count));
    cur = recvbuf;
  }
  const int v = lay.vrank_;
  for (int k = 0; k < lay.rounds_; ++k) {
    const int w = v ^ (1 << k);
    const int peer = ring[lay.pos_of_vrank(w)];
    SKIPRING_RETURN_IF_ERROR(
        waiter.exchange(comm, peer, kRdDirectTagBase + 1 + k, cur, tmp, bytes, k + 1));
    ++n_sent;
    ++n_recv;
    // a = the partial of the side whose bit k is clear: the same operands, in the same order,
    // on both sides of the exchange.
    if (v < w) {
      SKIPRING_RETURN_IF_ERROR(reduce(op, dtype, recvbuf, cur, tmp, count));
    } else {
      SKIPRING_RETURN_IF_ERROR(reduce(op, dtype, recvbuf, tmp, cur, count));
    }
    cur = recvbuf;
  }
  if (lay.has_extra_) {
    SKIPRING_RETURN_IF_ERROR(waiter.send(recvbuf, bytes, ring[lay.fold_peer_],
                                         kRdDirectTagBase + 63, comm, lay.rounds_ + 1));
    ++n_sent;
  }
  count_msgs();
  return Status::kOk;
}

}  // namespace skipring
