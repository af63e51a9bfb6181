// Text for skipring's internal status codes.
#include "common/status.h"

namespace skipring {

const char* status_string(Status s) {
  switch (s) {
    case Status::kOk:
      return "success";
    case Status::kErrCount:
      return "invalid count (negative, or too large for the algorithm)";
    case Status::kErrBuffer:
      return "invalid buffer (NULL with count > 0)";
    case Status::kErrOp:
      return "operation not defined on this datatype";
    case Status::kErrType:
      return "datatype not supported";
    case Status::kErrComm:
      return "invalid communicator";
    case Status::kErrArg:
      return "invalid argument";
    case Status::kErrConfig:
      return "invalid SKIPRING_* configuration";
    case Status::kErrProtocol:
      return "protocol error (contribution sets or headers inconsistent)";
    case Status::kErrTransport:
      return "transport (MPI) error";
    case Status::kErrNoMem:
      return "out of memory";
    case Status::kErrInternal:
      return "internal error";
    case Status::kErrTimeout:
      return "timed out (no progress for SKIPRING_TIMEOUT seconds)";
    case Status::kErrDevice:
      return "CUDA device error";
  }
  return "unknown status";
}

}  // namespace skipring
