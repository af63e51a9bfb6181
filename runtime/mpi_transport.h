// Transport over MPI point-to-point on skipring's internal (duplicated) communicator.
// Small messages (payload <= kPackLimit) travel as one MPI message: sent as is when header
// and payload are contiguous, else packed through a staging buffer. Large messages travel as
// two MPI messages, header then payload, each contiguous, so the payload moves straight
// between user buffers (single-copy shared-memory paths apply). Both sides derive the form
// from the payload size alone, so they always agree.
//
// Receives never write past their buffers, whatever a peer sends (issue 13). Posting a
// receive of the size the local arguments give is not enough: Open MPI 4.1's single-copy (CMA)
// rendezvous path writes a message larger than the posted receive past its end (measured:
// 5000 bytes into a 32-byte MPI_Irecv wrote 4968 bytes past it and corrupted the heap; eager
// sizes truncate correctly), so a datatype-size mismatch across ranks overflowed a buffer.
//  - The even tag carries a packed message (at most max_header_ + kPackLimit bytes, the
//    sender enforces header_bytes <= max_header_ = wire_header_bytes(size)) or the header
//    part of a split one. Its receive is still posted ahead (no added latency on the small,
//    latency-bound path), into a buffer of even_capacity_ = max_header_ + kPackLimit bytes
//    (a pooled staging buffer when the receive's own is smaller), so no sender can overrun
//    it; poll() then checks the size before copying anything out.
//  - The payload part of a split message (> kPackLimit bytes): the header part ends with a
//    trailer, the payload's byte count and the sender's call word (count, datatype and op of
//    the all-reduce, set_call). A payload receive is posted ahead only from a sender whose
//    call word already matched this rank's in this collective (then its layout is this rank's,
//    and no payload can be longer than its receive) or when the call is unknown (set_call(0):
//    other collectives, the cost probe); else once its header part has come: the trailer is
//    checked, the payload received at the announced size, and every receive from that sender
//    still waiting is posted. So counts or datatypes that differ across ranks are a protocol
//    error naming both counts, never a write past a buffer (Open MPI 4.1's CMA path writes a
//    longer message past its receive, for plain MPI programs too: docs/reliability.md), and
//    only the first pieces from each sender per all-reduce wait for their header; only from
//    senders in this rank's shared-memory group (MPI_COMM_TYPE_SHARED), since a network
//    transport truncates instead of overrunning. Off under
//    SimGrid SMPI (set_call). A probe-first receive (MPI_Improbe + MPI_Imrecv) was tried and
//    removed earlier: under Open MPI's UCX pml it handed out same-tag payloads of one sender
//    out of order.
// A size mismatch is Status::kErrProtocol, logged with peer, tag, expected and received sizes.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "runtime/transport.h"

namespace skipring {

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  // Largest tag + 1 a caller may use (the transport needs two MPI tags per tag).
  int tag_span() const { return tag_span_; }
  int size() const override { return size_; }
  Status post_send(int peer, int tag, const void* header, size_t header_bytes, const void* payload,
                   size_t payload_bytes, Token token) override;
  Status post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                   size_t payload_bytes, Token token) override;
  Status poll(std::vector<Completion>* done) override;
  Status cancel(Token token) override;
  size_t outstanding() const override { return ops_.size() - free_ops_.size(); }
  void set_call(uint64_t word) override;
  Status unmatched_message_waiting(bool* waiting) override;

  // Messages up to this payload size are packed into a staging buffer.
  static constexpr size_t kPackLimit = 16 * 1024;
  // The header part of a split message ends with a trailer: the payload's byte count and the
  // sender's call word (set_call), two uint64.
  static constexpr size_t kSizeWordBytes = 16;

 private:
  struct Op {
    Token token;
    bool is_recv;
    bool split;     // header and payload as two MPI messages
    int remaining;  // MPI requests not yet complete
    size_t header_bytes;
    size_t payload_bytes;  // receives: bytes received (filled on completion)
    void* header;          // receive unpack targets when staged
    void* payload;
    int staging = -1;  // index into staging_ when packed
    int tag = 0;
    size_t payload_capacity = 0;
    bool deferred_payload = false;  // split receive: payload posted after the header part
    int source = -1;                // split receive: the rank the first part came from
    int peer = -1;                  // as posted (a rank, kAnySource, kAnySourceOneSender)
  };
  // A header larger than any receive is sized for (post_recv): logs it, returns kErrArg.
  Status check_header(const char* what, size_t header_bytes) const;
  // MPI_Testsome over the posted requests; completed receives' sizes checked.
  Status test_requests(std::vector<Completion>* done);
  int take_staging(size_t bytes);
  int new_op(const Op& op);
  void add_request(MPI_Request req, int op);
  void release_op(int op);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int tag_span_ = 1 << 28;
  size_t max_header_ = 0;     // largest header a message may have: wire_header_bytes(size_)
  size_t even_capacity_ = 0;  // largest even-tag message: max_header_ + kPackLimit
  std::vector<MPI_Request> requests_;
  std::vector<int> request_op_;  // requests_[i] belongs to ops_[request_op_[i]]
  std::vector<Op> ops_;
  std::vector<int> free_ops_;
  std::vector<std::vector<uint8_t>> staging_;
  std::vector<int> free_staging_;
  std::vector<MPI_Request> late_requests_;  // posted during poll, added after it
  uint64_t call_ = 0;               // set_call's word; 0: unknown (no check, payloads pre-posted)
  std::vector<uint8_t> verified_;   // per rank: its call word matched this collective's
  std::vector<uint8_t> same_node_;  // per rank: in our MPI_COMM_TYPE_SHARED group (CMA possible)
  // Posts the payload receive of split receive `op_id` from `source` with `bytes` (in poll).
  Status post_deferred_payload(int op_id, int source, size_t bytes);
  // A split header part's trailer from `source` (op `op`): the payload fits, the call word
  // matches; then every payload receive from `source` still waiting for its header is posted.
  Status check_trailer(int op_id, int source);
  std::vector<int> late_request_op_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
};

}  // namespace skipring
