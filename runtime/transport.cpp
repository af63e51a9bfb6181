// Checks both transports (MpiTransport, UcxTransport) make on what they received.
#include "runtime/transport.h"

#include "runtime/log.h"

namespace skipring {

Status report_size_mismatch(const char* what, int from, int tag, size_t lo, size_t hi,
                            long long received) {
  if (received < 0) {
    SKIPRING_LOG_ERROR(
        "protocol error: {} from rank {} with tag {}: expected {} to {} bytes, received more "
        "(truncated by the transport)",
        what, from, tag, lo, hi);
  } else if (lo == hi) {
    SKIPRING_LOG_ERROR(
        "protocol error: {} from rank {} with tag {}: expected {} bytes, received {} bytes", what,
        from, tag, hi, received);
  } else {
    SKIPRING_LOG_ERROR(
        "protocol error: {} from rank {} with tag {}: expected {} to {} bytes, received {} bytes",
        what, from, tag, lo, hi, received);
  }
  return Status::kErrProtocol;
}

Status check_same_sender(int tag, int from, int* source) {
  if (*source >= 0 && *source != from) {
    SKIPRING_LOG_ERROR(
        "protocol error: split message with tag {}: header and payload from ranks {} and {}", tag,
        *source, from);
    return Status::kErrProtocol;
  }
  *source = from;
  return Status::kOk;
}

}  // namespace skipring
