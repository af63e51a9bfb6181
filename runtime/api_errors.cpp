// The C API's error codes and strings: a Status as an MPI error code, argument rejections with
// the reason logged, and skipring_error_string.
#include <mpi.h>

#include <cstdio>

#include "runtime/api_common.h"
#include "runtime/log.h"

namespace skipring::api {
namespace {

const char* error_name(int code) {
  switch (code) {
    case MPI_ERR_BUFFER:
      return "MPI_ERR_BUFFER";
    case MPI_ERR_ARG:
      return "MPI_ERR_ARG";
    default:
      return "an MPI error";
  }
}

}  // namespace

int to_mpi_error(Status s) {
  switch (s) {
    case Status::kOk:
      return MPI_SUCCESS;
    case Status::kErrCount:
      return MPI_ERR_COUNT;
    case Status::kErrBuffer:
      return MPI_ERR_BUFFER;
    case Status::kErrOp:
      return MPI_ERR_OP;
    case Status::kErrType:
      return MPI_ERR_TYPE;
    case Status::kErrComm:
      return MPI_ERR_COMM;
    case Status::kErrArg:
    case Status::kErrConfig:
      return MPI_ERR_ARG;
    case Status::kErrNoMem:
      return MPI_ERR_NO_MEM;
    default:
      return MPI_ERR_OTHER;
  }
}

int reject(const char* fn, int code, const char* why) {
  SKIPRING_LOG_ERROR("{}: {}: returns {}", fn, why, error_name(code));
  return code;
}

}  // namespace skipring::api

extern "C" {

const char* skipring_error_string(int code) {
  thread_local char buf[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) {
    std::snprintf(buf, sizeof(buf), "unknown error %d", code);
  }
  return buf;
}

}  // extern "C"
