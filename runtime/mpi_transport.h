// Transport over MPI point-to-point on skipring's internal (duplicated) communicator.
// Small messages (payload <= kPackLimit) travel as one MPI message: sent as is when header
// and payload are contiguous, else packed through a staging buffer. Large messages travel as
// two MPI messages, header then payload, each contiguous, so the payload moves straight
// between user buffers (single-copy shared-memory paths apply). Both sides derive the form
// from the payload size alone, so they always agree.
//
// Receives never write past their buffers, whatever a peer sends (issue 13): outside SimGrid
// a receive is matched first (MPI_Improbe) and its size checked against what the receive
// expects (the header part exactly header_bytes; a packed message header_bytes plus at most
// the payload capacity; a payload part at most the capacity) before MPI_Imrecv lets any byte
// land; a mismatch is Status::kErrProtocol, logged with peer, tag, expected and received
// sizes, and the message is drained into a buffer of its own size so its sender completes.
// Posting an MPI_Irecv ahead is not safe: Open MPI 4.1's single-copy (CMA) rendezvous path
// writes a message larger than the posted receive past its end (measured: 5000 bytes into a
// 32-byte receive wrote 4968 bytes past it and corrupted the heap; eager sizes truncate
// correctly), so a datatype-size mismatch across ranks overflowed a scratch buffer.
// Probing adds no wait: every part of every message is still matched as soon as poll() sees
// it (header and payload of a split message independently, as when both receives were
// posted at once); a poll with nothing waiting costs one MPI_Iprobe more.
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
  Status unmatched_message_waiting(bool* waiting) override;

  // Messages up to this payload size are packed into a staging buffer.
  static constexpr size_t kPackLimit = 16 * 1024;
  // A message of the wrong size is drained (so that its sender completes) up to this size.
  static constexpr size_t kDrainLimit = 64u << 20;

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
    bool deferred_payload = false;  // any-source split receive: payload posted after header
    int source = -1;                // split receive: the rank the first part came from
    int peer = -1;                  // as posted (a rank, kAnySource, kAnySourceOneSender)
    uint8_t unmatched = 0;  // parts still to be probed and matched: kHeaderPart|kPayloadPart
  };
  static constexpr uint8_t kHeaderPart = 1;  // the whole message when not split
  static constexpr uint8_t kPayloadPart = 2;
  // Matches what it can of the probing receives (probe-first path).
  Status match_probed();
  // Probes part `part` of receive `op_id`; on a match of the right size posts MPI_Imrecv.
  Status probe_part(int op_id, uint8_t part, bool* matched);
  // A message of the wrong size: logs it, drains it, returns kErrProtocol.
  Status size_mismatch(const Op& op, const char* part, int from, size_t expected_min,
                       size_t expected_max, int received, MPI_Message* msg);
  int take_staging(size_t bytes);
  int new_op(const Op& op);
  void add_request(MPI_Request req, int op);
  void release_op(int op);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int tag_span_ = 1 << 28;
  std::vector<MPI_Request> requests_;
  std::vector<int> request_op_;  // requests_[i] belongs to ops_[request_op_[i]]
  std::vector<Op> ops_;
  std::vector<int> free_ops_;
  std::vector<std::vector<uint8_t>> staging_;
  std::vector<int> free_staging_;
  std::vector<MPI_Request> late_requests_;  // posted during poll, added after it
  std::vector<int> late_request_op_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  std::vector<int> probing_;  // receives (op ids, in posting order) with unmatched parts
  struct Drain {
    uint8_t* buf;
    MPI_Request req;
  };
  std::vector<Drain> drains_;  // wrong-size messages being received into their own buffers
};

}  // namespace skipring
