// Recursive doubling straight on MPI point-to-point (see rd_direct.h).
#include "runtime/rd_direct.h"

#include <cstring>
#include <string>

#include "collectives/recursive_doubling.h"
#include "collectives/reduce_kernels.h"

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

// One rank's waits, watched (runtime/mpi_wait.h): a partner that never answers gives warnings
// and then kErrTimeout with *timeout_message set, not a silent hang.
struct Waiter {
  const WaitPolicy& policy;
  uint64_t seq;
  std::string* timeout_message;
  WaitWhat what(int round, int peer) const {
    WaitWhat w;
    w.what = "all-reduce";
    w.how = "recursive doubling";
    w.seq = static_cast<int64_t>(seq);
    w.step = round;
    w.peer = peer;
    return w;
  }
  Status wait(MPI_Request* reqs, int n, int recvs, int round, int peer) const {
    return wait_all(Requests{reqs, n, recvs}, policy, what(round, peer), timeout_message);
  }
  Status send(const void* buf, size_t bytes, int peer, int tag, MPI_Comm comm, int round) const {
    return send_watched(buf, bytes, peer, tag, comm, policy, what(round, peer), timeout_message);
  }
  Status recv(void* buf, size_t bytes, int peer, int tag, MPI_Comm comm, int round) const {
    return recv_watched(buf, bytes, peer, tag, comm, policy, what(round, peer), timeout_message);
  }
  // Sends `mine` to `peer` with tag `tag` and receives into `theirs` from it with `recv_tag`
  // (default: the same tag): the receive posted first, then the send, then a watched wait.
  // Up to kBlockingSendBytes the send is a plain MPI_Send: that small a message is sent eagerly
  // by every MPI transport (Open MPI's vader 4 KiB, tcp 64 KiB, UCX's eager thresholds are
  // larger), so MPI_Send returns once it is handed over, whatever the peer does, and it takes
  // Open MPI's request-free immediate path (MPI_Isend + a wait: +0.2 us per round at 64 B on
  // shared memory). Larger sends are MPI_Isend, waited for with the receive.
  static constexpr size_t kBlockingSendBytes = 1024;
  Status exchange(MPI_Comm comm, int peer, int tag, const void* mine, void* theirs, size_t bytes,
                  int round, int recv_tag = -1) const {
    const int len = static_cast<int>(bytes);
    if (policy.timeout_s <= 0) {
      // No watchdog (SKIPRING_TIMEOUT=0): one blocking MPI_Sendrecv, the fastest form (MPI_Test
      // loops cost about 0.05-0.1 us more per 8-byte all-reduce at np 2 on shared memory).
      return MPI_Sendrecv(mine, len, MPI_BYTE, peer, tag, theirs, len, MPI_BYTE, peer,
                          recv_tag < 0 ? tag : recv_tag, comm, MPI_STATUS_IGNORE) == MPI_SUCCESS
                 ? Status::kOk
                 : Status::kErrTransport;
    }
    MPI_Request reqs[2];
    if (MPI_Irecv(theirs, len, MPI_BYTE, peer, recv_tag < 0 ? tag : recv_tag, comm, &reqs[0]) !=
        MPI_SUCCESS) {
      return Status::kErrTransport;
    }
    const bool blocking = bytes <= kBlockingSendBytes;
    const int rc = blocking ? MPI_Send(mine, len, MPI_BYTE, peer, tag, comm)
                            : MPI_Isend(mine, len, MPI_BYTE, peer, tag, comm, &reqs[1]);
    if (rc != MPI_SUCCESS) {
      MPI_Cancel(&reqs[0]);
      MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
      return Status::kErrTransport;
    }
    return wait(reqs, blocking ? 1 : 2, 1, round, peer);
  }
};

}  // namespace

Status rd_direct_allreduce(MPI_Comm comm, const std::vector<int>& ring, int pos,
                           const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op,
                           std::vector<uint8_t>* scratch, const WaitPolicy& wait, uint64_t seq,
                           std::string* timeout_message, uint32_t* sent, uint32_t* received) {
  const Waiter waiter{wait, seq, timeout_message};
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
