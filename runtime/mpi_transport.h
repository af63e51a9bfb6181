// Transport over MPI point-to-point on skipring's internal (duplicated) communicator.
// A message is one MPI message: header and payload go together, packed into a staging
// buffer when small, described by an hindexed datatype (no copy) when large, or sent as is
// when they are already contiguous.
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
  int size() const override { return size_; }
  Status post_send(int peer, int tag, const void* header, size_t header_bytes,
                   const void* payload, size_t payload_bytes, Token token) override;
  Status post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                   size_t payload_bytes, Token token) override;
  Status poll(std::vector<Completion>* done) override;
  Status cancel(Token token) override;
  size_t outstanding() const override { return requests_.size(); }
  Status unmatched_message_waiting(bool* waiting) override;

  // Messages up to this payload size are packed into a staging buffer.
  static constexpr size_t kPackLimit = 16 * 1024;

 private:
  struct Pending {
    Token token;
    bool is_recv;
    size_t header_bytes;
    void* header;   // receive unpack targets when staged
    void* payload;
    int staging = -1;  // index into staging_ when packed
  };
  int take_staging(size_t bytes);
  Status post(MPI_Request req, const Pending& p);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> requests_;
  std::vector<Pending> pending_;
  std::vector<std::vector<uint8_t>> staging_;
  std::vector<int> free_staging_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
};

}  // namespace skipring
