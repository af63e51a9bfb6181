// Transport over MPI point-to-point on skipring's internal (duplicated) communicator.
// Small messages (payload <= kPackLimit) travel as one MPI message: sent as is when header
// and payload are contiguous, else packed through a staging buffer. Large messages travel as
// two MPI messages, header then payload, each contiguous, so the payload moves straight
// between user buffers (single-copy shared-memory paths apply). Both sides derive the form
// from the payload size alone, so they always agree.
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
  };
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
};

}  // namespace skipring
