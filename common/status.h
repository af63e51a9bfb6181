// One status type used inside skipring and mapped to MPI error codes at the C ABI
// (runtime/api_errors.cpp). Base layer: no MPI.
#pragma once

namespace skipring {

enum class Status : int {
  kOk = 0,
  kErrCount,      // negative count
  kErrBuffer,     // null buffer with count > 0
  kErrOp,         // op not defined on the type, or not supported natively
  kErrType,       // datatype outside the native list (DType)
  kErrComm,       // invalid communicator
  kErrArg,        // other bad argument
  kErrConfig,     // invalid SKIPRING_* value
  kErrProtocol,   // protocol invariant broken (overlapping contribution sets, bad header...)
  kErrTransport,  // the transport (MPI) reported an error
  kErrNoMem,      // allocation failed (std::bad_alloc caught at the C boundary)
  kErrInternal,
  kErrTimeout,  // no progress for SKIPRING_TIMEOUT seconds (the progress engine's watchdog)
  kErrDevice,   // a CUDA call of the device path failed (staging copy, pinned allocation, kernel)
};

const char* status_string(Status s);
inline bool ok(Status s) { return s == Status::kOk; }

}  // namespace skipring

// Propagate a non-OK status to the caller.
#define SKIPRING_RETURN_IF_ERROR(expr)              \
  do {                                              \
    ::skipring::Status _st = (expr);                \
    if (_st != ::skipring::Status::kOk) return _st; \
  } while (0)
