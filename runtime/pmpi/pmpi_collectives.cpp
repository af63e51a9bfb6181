// libskipring_pmpi.so: the C interposers of MPI_Reduce_scatter_block, MPI_Reduce_scatter,
// MPI_Allgather, MPI_Bcast and MPI_Reduce (issue 40 item 5). Each takes MPI_Allreduce's path
// (pmpi_allreduce.cpp): argument checks raised on the communicator's error handler with a
// message, then PMPI for SKIPRING_ENABLE=0 (counted, reason "disabled"), then the size threshold,
// then skipring's C API (skipring_reduce_scatter_block, skipring_allgather, skipring_bcast,
// skipring_reduce), which itself hands what it does not run natively (user ops, derived types,
// device memory without a device path) to the PMPI_ function, counted by reason.
//
// The size threshold (kMinBytes below): under it the MPI library's own collective is faster on
// one host (measured per collective at np 2 and 4; README "Drop-in", docs/benchmarks.md) and the
// call goes straight to PMPI, counted in the report line's `mpi_small` field (neither a call
// skipring ran nor a fallback). SKIPRING_AUTO_MPI=0 turns the threshold off (every size runs on
// skipring's engine), as it keeps MPI_Allreduce off the MPI library's own all-reduce. The bytes
// compared are the whole vector each call moves: count x type size for MPI_Bcast and MPI_Reduce,
// size x recvcount x type size for MPI_Reduce_scatter_block and MPI_Allgather, the sum of the
// recvcounts for MPI_Reduce_scatter; every rank computes the same value from its own arguments
// (MPI requires matching counts), so every rank takes the same path.
//
// MPI_Reduce_scatter with equal counts runs as skipring_reduce_scatter_block; unequal counts have
// no skipring path: PMPI_Reduce_scatter, counted as a fallback of reason "other".
// Inter-communicators go to PMPI after the checks that do not depend on the communicator kind
// (their root and MPI_IN_PLACE rules differ), counted as fallbacks of reason "comm".
//
// Argument errors (as Open MPI 4.1 and skipring's C API report them): MPI_COMM_NULL
// (MPI_ERR_COMM), a negative count (MPI_ERR_COUNT), MPI_DATATYPE_NULL (MPI_ERR_TYPE), MPI_OP_NULL
// (MPI_ERR_OP), a root outside the communicator (MPI_ERR_ROOT), a null buffer with a predefined
// datatype and count > 0 (MPI_ERR_BUFFER), MPI_IN_PLACE where MPI does not allow it (recvbuf of
// reduce-scatter and allgather, the buffer of bcast, sendbuf at a non-root of reduce, recvbuf at
// the root of reduce: MPI_ERR_ARG), aliased send and receive buffers (MPI_ERR_BUFFER; at the root
// of reduce MPI_ERR_ARG), recvcounts NULL (MPI_ERR_ARG).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runtime/config.h"
#include "runtime/pmpi/pmpi_internal.h"
#include "skipring/skipring.h"

namespace skipring::pmpi {
namespace {

// The size thresholds (bytes, as defined above): below them PMPI runs the call. Measured on
// this project's 2-core host with Open MPI 4.1, np 2 and 4 (pmpi_coll_timing; docs/benchmarks.md,
// "The other collectives through the drop-in"): skipring's reduce-scatter ring beats Open MPI's
// MPI_Reduce_scatter_block from 64 KiB (np 2) / 128 KiB (np 4) on, 3-7x from 256 KiB; its
// allgather ring, bcast chain and reduce chain were slower than Open MPI's at every size from
// 16 B to 4 MiB (1.1-10x), so those go to PMPI at every size unless SKIPRING_AUTO_MPI=0.
struct Thresholds {
  size_t reduce_scatter_block;  // MPI_Reduce_scatter_block and MPI_Reduce_scatter (equal counts)
  size_t allgather;
  size_t bcast;
  size_t reduce;
};
constexpr size_t kNever = SIZE_MAX;  // the MPI library's collective at every size
constexpr Thresholds kMinBytes = {
    /*reduce_scatter_block=*/size_t{128} << 10,
    /*allgather=*/kNever,
    /*bcast=*/kNever,
    /*reduce=*/kNever,
};

std::atomic<uint64_t> g_small_calls{0};

// Says why the call is erroneous (stderr, with the rank and the class) and raises the class on
// the communicator's error handler (MPI_COMM_WORLD's for MPI_COMM_NULL, as MPI does).
int reject(const char* fn, MPI_Comm comm, int code, const char* why) {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "skipring: rank %d: %s: %s: %s\n", rank, fn, why, class_name(code));
  std::fflush(stderr);
  return raise_error(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
}

bool predefined(MPI_Datatype datatype) {
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  return PMPI_Type_get_envelope(datatype, &integers, &addresses, &types, &combiner) ==
             MPI_SUCCESS &&
         combiner == MPI_COMBINER_NAMED;
}

// A null buffer is an error only with a predefined datatype (it is MPI_BOTTOM otherwise).
bool null_buffer(const void* buf, MPI_Datatype datatype) {
  return buf == nullptr && predefined(datatype);
}

// Aliasing: the same address for both buffers, MPI_BOTTOM excepted (absolute addresses).
bool aliased(const void* sendbuf, const void* recvbuf) {
  return sendbuf == recvbuf && sendbuf != MPI_BOTTOM && sendbuf != MPI_IN_PLACE;
}

// Partial overlap of the send range and the receive range (the same address is aliased()'s
// case), for predefined datatypes (contiguous: the ranges are count x size bytes).
bool overlapping(const void* sendbuf, size_t send_bytes, const void* recvbuf, size_t recv_bytes) {
  if (send_bytes == 0 || recv_bytes == 0 || sendbuf == recvbuf || sendbuf == nullptr ||
      recvbuf == nullptr || sendbuf == MPI_IN_PLACE || sendbuf == MPI_BOTTOM ||
      recvbuf == MPI_BOTTOM) {
    return false;
  }
  const auto s = reinterpret_cast<uintptr_t>(sendbuf);
  const auto r = reinterpret_cast<uintptr_t>(recvbuf);
  return s < r + recv_bytes && r < s + send_bytes;
}

constexpr const char* kOverlapWhy =
    "sendbuf and recvbuf overlap (aliasing is erroneous in MPI; pass MPI_IN_PLACE as sendbuf "
    "instead)";

constexpr const char* kAliasWhy =
    "sendbuf and recvbuf are the same buffer (aliasing is erroneous in MPI; pass MPI_IN_PLACE "
    "as sendbuf instead)";

bool is_inter(MPI_Comm comm) {
  int inter = 0;
  return PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && inter != 0;
}

size_t type_bytes(MPI_Datatype datatype) {
  int size = 0;
  return PMPI_Type_size(datatype, &size) == MPI_SUCCESS && size > 0 ? static_cast<size_t>(size) : 0;
}

// What every call does before its checks: MPI not usable (before MPI_Init, after MPI_Finalize)
// returns MPI_ERR_OTHER with a message; *init_rc gets skipring's initialization result.
// Returns true when the call must go straight to PMPI (inside MPI_Finalize, skipring finished).
enum class Entry { kUse, kPmpi, kUnusable };
Entry enter(const char* fn, int* init_rc) {
  *init_rc = ensure_skipring_init();
  if (*init_rc != kMpiNotActive) return Entry::kUse;
  if (const char* when = mpi_unusable()) {
    std::fprintf(stderr, "skipring: %s called %s: returns MPI_ERR_OTHER\n", fn, when);
    std::fflush(stderr);
    return Entry::kUnusable;
  }
  return Entry::kPmpi;
}

// True when the call goes to PMPI because of its size (counted in mpi_small). `bytes` (size_t())
// is only asked for when the threshold is finite: below kNever thresholds the call costs no type
// size lookup.
template <typename Bytes>
bool below_threshold(size_t threshold, Bytes&& bytes) {
  if (!global_config().auto_mpi) return false;
  if (threshold != kNever && bytes() >= threshold) return false;
  g_small_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// A cheap first test for overlapping(): the buffers start less than `elements` x 32 bytes apart
// (32: the largest predefined datatype), so the type's size is looked up only then.
bool near(const void* a, const void* b, size_t elements) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return (x > y ? x - y : y - x) < elements * 32;
}

template <typename F>
int run_skipring(MPI_Comm comm, F&& call) {
  int rc;
  {
    ReentryGuard guard;
    rc = call();
  }
  return rc == MPI_SUCCESS ? MPI_SUCCESS : raise_error(comm, rc);
}

// What every wrapper does around its own argument checks: enter() (MPI not usable: an error;
// inside MPI_Finalize: PMPI), `checks(&inter)` (MPI_SUCCESS or the rejected call's code; it may
// set inter to 0 or 1 when it needed to know, else it stays -1 and is asked here only when
// needed), skipring's initialization result, then PMPI for SKIPRING_ENABLE=0 (counted as
// "disabled"), for inter-communicators (counted as "comm") and below `threshold` (bytes() as in
// below_threshold, counted in mpi_small); else `run()`. `pmpi()` is the PMPI_ call itself.
template <typename Pmpi, typename Checks, typename Bytes, typename Run>
int dispatch(const char* fn, MPI_Comm comm, size_t threshold, Pmpi&& pmpi, Checks&& checks,
             Bytes&& bytes, Run&& run) {
  int init_rc;
  switch (enter(fn, &init_rc)) {
    case Entry::kUnusable:
      return MPI_ERR_OTHER;
    case Entry::kPmpi:
      return pmpi();
    case Entry::kUse:
      break;
  }
  int inter = -1;
  if (const int rc = checks(&inter); rc != MPI_SUCCESS) return rc;
  if (init_rc != MPI_SUCCESS) return raise_error(comm, init_rc);
  if (!global_config().enable) {
    skipring_count_fallback_reason(SKIPRING_FALLBACK_DISABLED);
    return pmpi();
  }
  if (inter < 0) inter = is_inter(comm) ? 1 : 0;
  if (inter == 1) {
    skipring_count_fallback_reason(SKIPRING_FALLBACK_COMM);
    return pmpi();
  }
  if (below_threshold(threshold, bytes)) return pmpi();
  return run();
}

// --- MPI_Reduce_scatter_block ---------------------------------------------------------------

// The checks shared by both reduce-scatters (`any_count`: some block is not empty).
// send_count / recv_count: the elements of sendbuf (every block) and of this rank's recvbuf.
int reduce_scatter_checks(const char* fn, const void* sendbuf, const void* recvbuf,
                          size_t send_count, size_t recv_count, MPI_Datatype datatype, MPI_Op op,
                          MPI_Comm comm) {
  const bool any_count = send_count > 0;
  const bool my_count = recv_count > 0;
  if (datatype == MPI_DATATYPE_NULL) {
    return reject(fn, comm, MPI_ERR_TYPE, "datatype is MPI_DATATYPE_NULL");
  }
  if (op == MPI_OP_NULL) return reject(fn, comm, MPI_ERR_OP, "op is MPI_OP_NULL");
  if (recvbuf == MPI_IN_PLACE) {
    return reject(fn, comm, MPI_ERR_ARG, "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
  }
  if (any_count && null_buffer(sendbuf, datatype)) {
    return reject(fn, comm, MPI_ERR_BUFFER,
                  "sendbuf is NULL with a predefined datatype and a count > 0");
  }
  if (my_count && null_buffer(recvbuf, datatype)) {
    return reject(fn, comm, MPI_ERR_BUFFER,
                  "recvbuf is NULL with a predefined datatype and a count > 0");
  }
  if (any_count && aliased(sendbuf, recvbuf)) return reject(fn, comm, MPI_ERR_BUFFER, kAliasWhy);
  if (near(sendbuf, recvbuf, send_count > recv_count ? send_count : recv_count)) {
    const size_t es = type_bytes(datatype);
    if (overlapping(sendbuf, send_count * es, recvbuf, recv_count * es) && predefined(datatype)) {
      return reject(fn, comm, MPI_ERR_BUFFER, kOverlapWhy);
    }
  }
  return MPI_SUCCESS;
}

int reduce_scatter_block_impl(const void* sendbuf, void* recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  constexpr const char* fn = "MPI_Reduce_scatter_block";
  int size = 1;
  const size_t block = static_cast<size_t>(recvcount);
  return dispatch(
      fn, comm, kMinBytes.reduce_scatter_block,
      [&] { return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm); },
      [&](int*) {
        if (comm == MPI_COMM_NULL) return reject(fn, comm, MPI_ERR_COMM, "comm is MPI_COMM_NULL");
        if (recvcount < 0) return reject(fn, comm, MPI_ERR_COUNT, "recvcount is negative");
        PMPI_Comm_size(comm, &size);
        return reduce_scatter_checks(fn, sendbuf, recvbuf, block * static_cast<size_t>(size), block,
                                     datatype, op, comm);
      },
      [&] { return block * static_cast<size_t>(size) * type_bytes(datatype); },
      [&] {
        return run_skipring(comm, [&] {
          return skipring_reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
        });
      });
}

// --- MPI_Reduce_scatter ---------------------------------------------------------------------

int reduce_scatter_impl(const void* sendbuf, void* recvbuf, const int recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  constexpr const char* fn = "MPI_Reduce_scatter";
  size_t total = 0;
  bool equal = true;
  return dispatch(
      fn, comm, kMinBytes.reduce_scatter_block,
      [&] { return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm); },
      [&](int* inter) {
        if (comm == MPI_COMM_NULL) return reject(fn, comm, MPI_ERR_COMM, "comm is MPI_COMM_NULL");
        if (recvcounts == nullptr) return reject(fn, comm, MPI_ERR_ARG, "recvcounts is NULL");
        *inter = is_inter(comm) ? 1 : 0;
        int size = 1, rank = 0;
        PMPI_Comm_size(comm, &size);  // the local group's (inter): one recvcounts entry per rank
        PMPI_Comm_rank(comm, &rank);
        for (int r = 0; r < size; ++r) {
          if (recvcounts[r] < 0) {
            return reject(fn, comm, MPI_ERR_COUNT, "a recvcounts entry is negative");
          }
          total += static_cast<size_t>(recvcounts[r]);
          equal = equal && recvcounts[r] == recvcounts[0];
        }
        return reduce_scatter_checks(fn, sendbuf, recvbuf, total,
                                     static_cast<size_t>(recvcounts[rank]), datatype, op, comm);
      },
      [&] { return total * type_bytes(datatype); },
      [&] {
        if (!equal) {
          // No skipring path for unequal blocks (the ring's chunks are equal).
          skipring_count_fallback_reason(SKIPRING_FALLBACK_OTHER);
          return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
        }
        return run_skipring(comm, [&] {
          return skipring_reduce_scatter_block(sendbuf, recvbuf, recvcounts[0], datatype, op, comm);
        });
      });
}

// --- MPI_Allgather --------------------------------------------------------------------------

int allgather_impl(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  constexpr const char* fn = "MPI_Allgather";
  return dispatch(
      fn, comm, kMinBytes.allgather,
      [&] {
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
      },
      [&](int*) {
        const bool in_place = sendbuf == MPI_IN_PLACE;
        if (comm == MPI_COMM_NULL) return reject(fn, comm, MPI_ERR_COMM, "comm is MPI_COMM_NULL");
        if (recvcount < 0) return reject(fn, comm, MPI_ERR_COUNT, "recvcount is negative");
        if (!in_place && sendcount < 0) {
          return reject(fn, comm, MPI_ERR_COUNT, "sendcount is negative");
        }
        if (recvtype == MPI_DATATYPE_NULL) {
          return reject(fn, comm, MPI_ERR_TYPE, "recvtype is MPI_DATATYPE_NULL");
        }
        if (!in_place && sendtype == MPI_DATATYPE_NULL) {
          return reject(fn, comm, MPI_ERR_TYPE, "sendtype is MPI_DATATYPE_NULL");
        }
        if (recvbuf == MPI_IN_PLACE) {
          return reject(fn, comm, MPI_ERR_ARG, "recvbuf is MPI_IN_PLACE (only sendbuf may be)");
        }
        if (!in_place && sendcount > 0 && null_buffer(sendbuf, sendtype)) {
          return reject(fn, comm, MPI_ERR_BUFFER,
                        "sendbuf is NULL with a predefined datatype and sendcount > 0");
        }
        if (recvcount > 0 && null_buffer(recvbuf, recvtype)) {
          return reject(fn, comm, MPI_ERR_BUFFER,
                        "recvbuf is NULL with a predefined datatype and recvcount > 0");
        }
        if (recvcount > 0 && aliased(sendbuf, recvbuf)) {
          return reject(fn, comm, MPI_ERR_BUFFER, kAliasWhy);
        }
        if (!in_place && sendcount > 0 && recvcount > 0 && sendbuf != recvbuf) {
          int size = 1;
          PMPI_Comm_size(comm, &size);
          const size_t recv_elements = static_cast<size_t>(recvcount) * static_cast<size_t>(size);
          if (near(sendbuf, recvbuf, std::max(static_cast<size_t>(sendcount), recv_elements)) &&
              overlapping(sendbuf, static_cast<size_t>(sendcount) * type_bytes(sendtype), recvbuf,
                          recv_elements * type_bytes(recvtype)) &&
              predefined(sendtype) && predefined(recvtype)) {
            return reject(fn, comm, MPI_ERR_BUFFER, kOverlapWhy);
          }
        }
        return MPI_SUCCESS;
      },
      [&] {
        int size = 1;
        PMPI_Comm_size(comm, &size);
        return static_cast<size_t>(recvcount) * static_cast<size_t>(size) * type_bytes(recvtype);
      },
      [&] {
        return run_skipring(comm, [&] {
          return skipring_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                    comm);
        });
      });
}

// --- MPI_Bcast ------------------------------------------------------------------------------

int bcast_impl(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  constexpr const char* fn = "MPI_Bcast";
  return dispatch(
      fn, comm, kMinBytes.bcast, [&] { return PMPI_Bcast(buffer, count, datatype, root, comm); },
      [&](int* inter) {
        if (comm == MPI_COMM_NULL) return reject(fn, comm, MPI_ERR_COMM, "comm is MPI_COMM_NULL");
        if (count < 0) return reject(fn, comm, MPI_ERR_COUNT, "count is negative");
        if (datatype == MPI_DATATYPE_NULL) {
          return reject(fn, comm, MPI_ERR_TYPE, "datatype is MPI_DATATYPE_NULL");
        }
        *inter = is_inter(comm) ? 1 : 0;
        if (*inter == 0) {
          int size = 1;
          PMPI_Comm_size(comm, &size);
          if (root < 0 || root >= size) {
            return reject(fn, comm, MPI_ERR_ROOT, "root is not a rank of the communicator");
          }
          if (buffer == MPI_IN_PLACE) {
            return reject(fn, comm, MPI_ERR_ARG,
                          "buffer is MPI_IN_PLACE (bcast has no in-place form)");
          }
          if (count > 0 && null_buffer(buffer, datatype)) {
            return reject(fn, comm, MPI_ERR_BUFFER,
                          "buffer is NULL with a predefined datatype and count > 0");
          }
        }
        return MPI_SUCCESS;
      },
      [&] { return static_cast<size_t>(count) * type_bytes(datatype); },
      [&] {
        return run_skipring(comm,
                            [&] { return skipring_bcast(buffer, count, datatype, root, comm); });
      });
}

// --- MPI_Reduce -----------------------------------------------------------------------------

int reduce_impl(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm) {
  constexpr const char* fn = "MPI_Reduce";
  return dispatch(
      fn, comm, kMinBytes.reduce,
      [&] { return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm); },
      [&](int* inter) {
        if (comm == MPI_COMM_NULL) return reject(fn, comm, MPI_ERR_COMM, "comm is MPI_COMM_NULL");
        if (count < 0) return reject(fn, comm, MPI_ERR_COUNT, "count is negative");
        if (datatype == MPI_DATATYPE_NULL) {
          return reject(fn, comm, MPI_ERR_TYPE, "datatype is MPI_DATATYPE_NULL");
        }
        if (op == MPI_OP_NULL) return reject(fn, comm, MPI_ERR_OP, "op is MPI_OP_NULL");
        *inter = is_inter(comm) ? 1 : 0;
        if (*inter == 0) {
          int size = 1, rank = 0;
          PMPI_Comm_size(comm, &size);
          PMPI_Comm_rank(comm, &rank);
          if (root < 0 || root >= size) {
            return reject(fn, comm, MPI_ERR_ROOT, "root is not a rank of the communicator");
          }
          if (rank != root && sendbuf == MPI_IN_PLACE) {
            return reject(fn, comm, MPI_ERR_ARG,
                          "sendbuf is MPI_IN_PLACE at a non-root rank (only the root may pass it)");
          }
          if (rank == root && recvbuf == MPI_IN_PLACE) {
            return reject(fn, comm, MPI_ERR_ARG,
                          "recvbuf is MPI_IN_PLACE at the root (only sendbuf may be)");
          }
          if (count > 0 && null_buffer(sendbuf, datatype)) {
            return reject(fn, comm, MPI_ERR_BUFFER,
                          "sendbuf is NULL with a predefined datatype and count > 0");
          }
          if (rank == root && count > 0 && null_buffer(recvbuf, datatype)) {
            return reject(fn, comm, MPI_ERR_BUFFER,
                          "recvbuf is NULL at the root with a predefined datatype and count > 0");
          }
          // recvbuf is not significant at a non-root: only the root's buffers may not alias.
          if (rank == root && count > 0 && aliased(sendbuf, recvbuf)) {
            return reject(fn, comm, MPI_ERR_ARG, kAliasWhy);
          }
          if (rank == root && count > 0 && sendbuf != recvbuf &&
              near(sendbuf, recvbuf, static_cast<size_t>(count))) {
            // The type's size first: the envelope (predefined) only when the ranges overlap.
            const size_t bytes = static_cast<size_t>(count) * type_bytes(datatype);
            if (overlapping(sendbuf, bytes, recvbuf, bytes) && predefined(datatype)) {
              return reject(fn, comm, MPI_ERR_ARG, kOverlapWhy);
            }
          }
        }
        return MPI_SUCCESS;
      },
      [&] { return static_cast<size_t>(count) * type_bytes(datatype); },
      [&] {
        return run_skipring(comm, [&] {
          return skipring_reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
        });
      });
}

// Runs `impl` unless this thread is inside skipring (then `pmpi`), so that nothing thrown
// reaches the caller: an exception is raised as MPI_ERR_INTERN on the error handler.
template <typename Impl, typename Pmpi>
int entry(MPI_Comm comm, Impl&& impl, Pmpi&& pmpi) {
  if (inside_skipring()) return pmpi();
  try {
    return impl();
  } catch (...) {
    return guarded([&] { return raise_error(comm, MPI_ERR_INTERN); });
  }
}

}  // namespace

uint64_t small_calls() { return g_small_calls.load(std::memory_order_relaxed); }

int reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm) {
  return entry(
      comm,
      [&] { return reduce_scatter_block_impl(sendbuf, recvbuf, recvcount, datatype, op, comm); },
      [&] { return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm); });
}

int reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return entry(
      comm, [&] { return reduce_scatter_impl(sendbuf, recvbuf, recvcounts, datatype, op, comm); },
      [&] { return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm); });
}

int allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return entry(
      comm,
      [&] {
        return allgather_impl(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
      },
      [&] {
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
      });
}

int bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  return entry(
      comm, [&] { return bcast_impl(buffer, count, datatype, root, comm); },
      [&] { return PMPI_Bcast(buffer, count, datatype, root, comm); });
}

int reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
           int root, MPI_Comm comm) {
  return entry(
      comm, [&] { return reduce_impl(sendbuf, recvbuf, count, datatype, op, root, comm); },
      [&] { return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm); });
}

}  // namespace skipring::pmpi

extern "C" {

SKIPRING_PMPI_EXPORT int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return skipring::pmpi::reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

SKIPRING_PMPI_EXPORT int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf,
                                            const int recvcounts[], MPI_Datatype datatype,
                                            MPI_Op op, MPI_Comm comm) {
  return skipring::pmpi::reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
}

SKIPRING_PMPI_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                       void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                       MPI_Comm comm) {
  return skipring::pmpi::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                   comm);
}

SKIPRING_PMPI_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                   MPI_Comm comm) {
  return skipring::pmpi::bcast(buffer, count, datatype, root, comm);
}

SKIPRING_PMPI_EXPORT int MPI_Reduce(const void* sendbuf, void* recvbuf, int count,
                                    MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
  return skipring::pmpi::reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

}  // extern "C"
