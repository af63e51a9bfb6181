// MPI point-to-point transport.
#include "runtime/mpi_transport.h"

#include <algorithm>
#include <cstring>

#include "runtime/log.h"

namespace skipring {
namespace {

// A datatype covering header and payload at their absolute addresses (use with MPI_BOTTOM).
Status make_pair_type(const void* header, size_t header_bytes, const void* payload,
                      size_t payload_bytes, MPI_Datatype* type) {
  int lens[2] = {static_cast<int>(header_bytes), static_cast<int>(payload_bytes)};
  MPI_Aint disps[2];
  MPI_Get_address(header, &disps[0]);
  MPI_Get_address(payload, &disps[1]);
  if (MPI_Type_create_hindexed(2, lens, disps, MPI_BYTE, type) != MPI_SUCCESS ||
      MPI_Type_commit(type) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  return Status::kOk;
}

bool contiguous(const void* header, size_t header_bytes, const void* payload) {
  return static_cast<const uint8_t*>(header) + header_bytes == payload;
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiTransport::~MpiTransport() {
  for (auto& r : requests_) {
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
}

int MpiTransport::take_staging(size_t bytes) {
  int idx;
  if (!free_staging_.empty()) {
    idx = free_staging_.back();
    free_staging_.pop_back();
  } else {
    idx = static_cast<int>(staging_.size());
    staging_.emplace_back();
  }
  if (staging_[idx].size() < bytes) staging_[idx].resize(bytes);
  return idx;
}

Status MpiTransport::post(MPI_Request req, const Pending& p) {
  requests_.push_back(req);
  pending_.push_back(p);
  return Status::kOk;
}

Status MpiTransport::post_send(int peer, int tag, const void* header, size_t header_bytes,
                               const void* payload, size_t payload_bytes, Token token) {
  MPI_Request req;
  Pending p{token, false, header_bytes, nullptr, nullptr, -1};
  const size_t total = header_bytes + payload_bytes;
  if (total > static_cast<size_t>(INT32_MAX)) return Status::kErrArg;
  int rc;
  if (payload_bytes == 0 || contiguous(header, header_bytes, payload)) {
    rc = MPI_Isend(header, static_cast<int>(total), MPI_BYTE, peer, tag, comm_, &req);
  } else if (payload_bytes <= kPackLimit) {
    p.staging = take_staging(total);
    uint8_t* buf = staging_[p.staging].data();
    std::memcpy(buf, header, header_bytes);
    std::memcpy(buf + header_bytes, payload, payload_bytes);
    rc = MPI_Isend(buf, static_cast<int>(total), MPI_BYTE, peer, tag, comm_, &req);
  } else {
    MPI_Datatype type;
    SKIPRING_CHECK(make_pair_type(header, header_bytes, payload, payload_bytes, &type));
    rc = MPI_Isend(MPI_BOTTOM, 1, type, peer, tag, comm_, &req);
    MPI_Type_free(&type);  // freed once the send no longer needs it
  }
  if (rc != MPI_SUCCESS) return Status::kErrTransport;
  return post(req, p);
}

Status MpiTransport::post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                               size_t payload_bytes, Token token) {
  MPI_Request req;
  Pending p{token, true, header_bytes, header, payload, -1};
  const size_t total = header_bytes + payload_bytes;
  if (total > static_cast<size_t>(INT32_MAX)) return Status::kErrArg;
  int rc;
  if (payload_bytes == 0 || contiguous(header, header_bytes, payload)) {
    rc = MPI_Irecv(header, static_cast<int>(total), MPI_BYTE, peer, tag, comm_, &req);
  } else if (payload_bytes <= kPackLimit) {
    p.staging = take_staging(total);
    rc = MPI_Irecv(staging_[p.staging].data(), static_cast<int>(total), MPI_BYTE, peer, tag,
                   comm_, &req);
  } else {
    MPI_Datatype type;
    SKIPRING_CHECK(make_pair_type(header, header_bytes, payload, payload_bytes, &type));
    rc = MPI_Irecv(MPI_BOTTOM, 1, type, peer, tag, comm_, &req);
    MPI_Type_free(&type);
  }
  if (rc != MPI_SUCCESS) return Status::kErrTransport;
  return post(req, p);
}

Status MpiTransport::poll(std::vector<Completion>* done) {
  if (requests_.empty()) return Status::kOk;
  const int n = static_cast<int>(requests_.size());
  indices_.resize(n);
  statuses_.resize(n);
  int outcount = 0;
  if (MPI_Testsome(n, requests_.data(), &outcount, indices_.data(), statuses_.data()) !=
      MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  if (outcount == MPI_UNDEFINED || outcount == 0) return Status::kOk;
  for (int i = 0; i < outcount; ++i) {
    const Pending& p = pending_[indices_[i]];
    Completion c{p.token, p.is_recv, 0};
    if (p.is_recv) {
      int bytes = 0;
      MPI_Get_count(&statuses_[i], MPI_BYTE, &bytes);
      if (bytes == MPI_UNDEFINED || static_cast<size_t>(bytes) < p.header_bytes) {
        return Status::kErrTransport;
      }
      c.payload_bytes = bytes - p.header_bytes;
      if (p.staging >= 0) {
        const uint8_t* buf = staging_[p.staging].data();
        std::memcpy(p.header, buf, p.header_bytes);
        if (c.payload_bytes) std::memcpy(p.payload, buf + p.header_bytes, c.payload_bytes);
      }
    }
    if (p.staging >= 0) free_staging_.push_back(p.staging);
    done->push_back(c);
  }
  // Drop completed entries (highest index first so swaps do not disturb the rest).
  std::sort(indices_.begin(), indices_.begin() + outcount, std::greater<int>());
  for (int i = 0; i < outcount; ++i) {
    const int k = indices_[i];
    requests_[k] = requests_.back();
    pending_[k] = pending_.back();
    requests_.pop_back();
    pending_.pop_back();
  }
  return Status::kOk;
}

Status MpiTransport::cancel(Token token) {
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].token != token || !pending_[i].is_recv) continue;
    MPI_Cancel(&requests_[i]);
    MPI_Wait(&requests_[i], MPI_STATUS_IGNORE);
    if (pending_[i].staging >= 0) free_staging_.push_back(pending_[i].staging);
    requests_[i] = requests_.back();
    pending_[i] = pending_.back();
    requests_.pop_back();
    pending_.pop_back();
    return Status::kOk;
  }
  return Status::kErrArg;
}

Status MpiTransport::unmatched_message_waiting(bool* waiting) {
  int flag = 0;
  if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
    return Status::kErrTransport;
  }
  *waiting = flag != 0;
  return Status::kOk;
}

}  // namespace skipring
