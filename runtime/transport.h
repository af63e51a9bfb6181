// Minimal transport interface: post a send or a receive of one message (a small header plus
// a payload, each contiguous, possibly in different places), poll for completions, cancel.
// Implemented over MPI point-to-point (mpi_transport.h) and by the in-process fake transport
// of the test harness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/peer.h"
#include "common/status.h"
#include "common/token.h"

namespace skipring {

struct Completion {
  Token token;
  bool is_recv;
  size_t payload_bytes;  // for receives: bytes of payload actually received
  int peer = -1;         // for receives, where the transport says: the sender (message log)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // The message is header bytes followed by payload bytes. Both buffers must stay
  // untouched until the completion is reported.
  virtual Status post_send(int peer, int tag, const void* header, size_t header_bytes,
                           const void* payload, size_t payload_bytes, Token token) = 0;
  // Receives one message from `peer` (a rank, kAnySource or kAnySourceOneSender) with `tag`:
  // the first header_bytes land in `header`, the rest (at most payload_bytes) in `payload`.
  virtual Status post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                           size_t payload_bytes, Token token) = 0;
  // Appends completed operations to *done; never blocks.
  virtual Status poll(std::vector<Completion>* done) = 0;
  // Cancels an outstanding receive (sends cannot be cancelled).
  virtual Status cancel(Token token) = 0;
  // Operations posted and not yet reported complete.
  virtual size_t outstanding() const = 0;
  // True when a message is waiting that no posted receive matches (stale-message check).
  virtual Status unmatched_message_waiting(bool* waiting) = 0;
  // The collective about to run, as a word every rank of a correct program computes alike
  // (call_word: count, datatype, op), or 0 (unknown). A transport may check it against what
  // senders say before it trusts their sizes (MpiTransport). Default: ignored.
  virtual void set_call(uint64_t word) { (void)word; }
  // The collective failed, and the caller releases its buffers (and the communicator breaks)
  // once this returns: no operation may write into them after. A transport that cannot
  // cancel every posted operation at once makes sure of that here, taking up to `seconds`
  // (UcxTransport: waits for its matched receives, then never progresses again). Default:
  // nothing.
  virtual void abandon(double seconds) { (void)seconds; }
};

// The all-reduce's call word for set_call: nonzero, the count in bits 16..62.
inline uint64_t call_word(uint64_t count, int dtype, int op) {
  return (uint64_t{1} << 63) | ((count & ((uint64_t{1} << 47) - 1)) << 16) |
         (static_cast<uint64_t>(dtype & 0xff) << 8) | static_cast<uint64_t>(op & 0xff);
}
inline uint64_t call_word_count(uint64_t word) { return (word >> 16) & ((uint64_t{1} << 47) - 1); }

// A message, or a part of a split one (`what`), of the wrong size: logs it with sender, tag and
// the sizes expected, returns kErrProtocol. received < 0: more than hi (truncated).
Status report_size_mismatch(const char* what, int from, int tag, size_t lo, size_t hi,
                            long long received);
// The two parts of a split message come from one rank (kAnySourceOneSender's promise): records
// *source from the first part; logs and returns kErrProtocol when the second came from another.
Status check_same_sender(int tag, int from, int* source);

}  // namespace skipring
