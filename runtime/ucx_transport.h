// Transport over UCX (UCP tag API), beside the MPI one: SKIPRING_TRANSPORT=ucx (issue 14).
//
// One UCP worker per communicator (so its tags need no communicator id), endpoints to every
// rank, bootstrapped by one all-gather of worker addresses on skipring's internal communicator;
// the progress engine drives ucp_worker_progress through poll(). The UCP context is one per
// process, created on first use (with UCX_NET_DEVICES set to the NIC the topology picks when the
// user did not set it) and kept for the process's lifetime.
//
// Tag layout, 64 bits: the transport tag (the engine's tag, below tag_span()) in bits 63..32,
// the sending rank in bits 31..0. A receive from one rank matches all 64 bits; from any rank
// (kAnySource, kAnySourceOneSender) the high 32. Every message is one UCP message whatever its
// size: header and payload go as a two-entry iov when they are not contiguous, so an any-source
// receive needs no second round (the MPI transport splits large messages in two).
//
// Receives never write past their buffers: UCX truncates (UCS_ERR_MESSAGE_TRUNCATED), reported
// as kErrProtocol with peer, tag and sizes, as MpiTransport does. Nor into them once a failed
// collective has returned (abandon). Buffers are host memory (the C
// API stages or falls back for device memory, runtime/api_device.cpp); every operation says so to
// UCX (UCP_OP_ATTR_FIELD_MEMORY_TYPE), which also spares UCX its own memory-type lookup.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/mpi_wait.h"
#include "runtime/transport.h"

namespace skipring {

// Whether this build has the UCX transport (UCX found at configure time).
bool ucx_transport_built();

class UcxTransport final : public Transport {
 public:
  // Collective over `comm` (skipring's internal communicator): every rank creates its worker,
  // all-gathers the addresses (watched by `wait`) and connects. A rank that cannot create its
  // worker makes every rank fail with kErrTransport and a message naming it. `net_device`:
  // the UCX_NET_DEVICES value to use when the environment sets none (empty: UCX's default);
  // only the first communicator's choice counts (the context is per process).
  static Status create(MPI_Comm comm, const WaitPolicy& wait, const std::string& net_device,
                       std::unique_ptr<UcxTransport>* out);
  ~UcxTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int tag_span() const { return 1 << 28; }
  Status post_send(int peer, int tag, const void* header, size_t header_bytes, const void* payload,
                   size_t payload_bytes, Token token) override;
  Status post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                   size_t payload_bytes, Token token) override;
  Status poll(std::vector<Completion>* done) override;
  Status cancel(Token token) override;
  size_t outstanding() const override;
  Status unmatched_message_waiting(bool* waiting) override;
  // After a failed collective: cancels the receives not matched yet, progresses the worker
  // until every matched one has finished (a rendezvous's data is put into them by the sender
  // with no further step of ours) and sends have had a short chance, at most `seconds`; from
  // then on the worker is never progressed again (every later call fails with kErrTransport),
  // so no late put or fragment can land in the caller's buffers once they are freed.
  void abandon(double seconds) override;

  // The UCX library's version and the transports of this process's context, for
  // skipring_info and logs: "UCX 1.13.1" or why the context could not be created.
  static std::string describe();

 private:
  struct Impl;  // UCX state (runtime/ucx_transport.cpp): absent where UCX is not built
  explicit UcxTransport(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
};

}  // namespace skipring
