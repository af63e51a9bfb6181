// Shared helpers of the mpirun test programs: pass/fail counting with the "N passed, M failed"
// closing line, and the check that nothing is left on skipring's internal communicator.
#pragma once

#include <mpi.h>
#include <sched.h>
#include <skipring/skipring.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace mpitest {

inline int g_rank = 0, g_size = 1;
inline long g_passed = 0, g_failed = 0;

inline void check(bool cond, const std::string& what) {
  if (cond) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "rank %d FAIL: %s\n", g_rank, what.c_str());
  }
}

// The tests' own collectives (references, agreement, barriers) wait here: MPI_Test, then
// sched_yield between tests, then short sleeps. MPICH's blocking calls poll without ever
// yielding the core, so with more ranks than cores (the usual case here) a rank spinning in
// PMPI_Barrier holds the core the rank it waits for needs, and each such wait costs a scheduler
// time slice (the mpi tier took several times longer under MPICH 4 than under Open MPI, which
// yields when oversubscribed).
inline int wait_politely(MPI_Request* req) {
  for (long polls = 0;; ++polls) {
    int done = 0;
    if (const int rc = PMPI_Test(req, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    if (polls < 2000) {
      sched_yield();
    } else {
      const timespec pause{0, 20000};  // 20 us
      nanosleep(&pause, nullptr);
    }
  }
}

// A nonblocking PMPI collective, started by start(&request), waited for politely.
template <typename Start>
int politely(Start&& start) {
  MPI_Request req;
  const int rc = start(&req);
  return rc != MPI_SUCCESS ? rc : wait_politely(&req);
}

inline int barrier(MPI_Comm comm = MPI_COMM_WORLD) {
  MPI_Request req;
  const int rc = PMPI_Ibarrier(comm, &req);
  return rc != MPI_SUCCESS ? rc : wait_politely(&req);
}

inline int allreduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op,
                     MPI_Comm comm = MPI_COMM_WORLD) {
  MPI_Request req;
  const int rc = PMPI_Iallreduce(in, out, count, type, op, comm, &req);
  return rc != MPI_SUCCESS ? rc : wait_politely(&req);
}

inline int bcast(void* buf, int count, MPI_Datatype type, int root,
                 MPI_Comm comm = MPI_COMM_WORLD) {
  MPI_Request req;
  const int rc = PMPI_Ibcast(buf, count, type, root, comm, &req);
  return rc != MPI_SUCCESS ? rc : wait_politely(&req);
}

// Every message of a finished collective has been received once all ranks pass the first
// barrier; nobody starts the next collective before the second.
inline bool no_leftovers() {
  barrier();
  int pending = 0;
  const int rc = skipring_pending_messages(MPI_COMM_WORLD, &pending);
  barrier();
  return rc == MPI_SUCCESS && pending == 0;
}

// ---- host references -------------------------------------------------------------------------
// Results of exact reductions are checked against a reduction computed here, on the host, from
// every rank's input (moved by PMPI_Allgather, which reduces nothing), never against MPI's own
// reduction: Open MPI 4.1.4 computes MPI_UNSIGNED_LONG MIN/MAX wrongly when the high bit is set,
// MPICH 4.0.2 uint8 MIN/MAX, so a PMPI reference would hide (or invent) differences.

// a op b for one element of an integer type T; unsigned arithmetic for SUM and PROD (wraps).
template <typename T>
bool host_op_int(MPI_Op op, T a, T b, T* out) {
  using U = std::make_unsigned_t<T>;
  if (op == MPI_SUM) return *out = static_cast<T>(static_cast<U>(a) + static_cast<U>(b)), true;
  if (op == MPI_PROD) {
    return *out = static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))), true;
  }
  if (op == MPI_MIN) return *out = b < a ? b : a, true;
  if (op == MPI_MAX) return *out = b > a ? b : a, true;
  if (op == MPI_LAND) return *out = static_cast<T>(a != 0 && b != 0), true;
  if (op == MPI_LOR) return *out = static_cast<T>(a != 0 || b != 0), true;
  if (op == MPI_LXOR) return *out = static_cast<T>((a != 0) != (b != 0)), true;
  if (op == MPI_BAND) return *out = static_cast<T>(a & b), true;
  if (op == MPI_BOR) return *out = static_cast<T>(a | b), true;
  if (op == MPI_BXOR) return *out = static_cast<T>(a ^ b), true;
  return false;
}

// Floating types: MIN and MAX only (exact whatever the order).
template <typename T>
bool host_op_float(MPI_Op op, T a, T b, T* out) {
  if (op == MPI_MIN) return *out = b < a ? b : a, true;
  if (op == MPI_MAX) return *out = b > a ? b : a, true;
  return false;
}

// Folds `ranks` contributions of `count` elements each (contiguous in `all`) into `out`.
template <typename T, typename F>
bool host_fold(const uint8_t* all, int ranks, size_t count, uint8_t* out, F&& op) {
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, all + i * sizeof(T), sizeof(T));
    for (int r = 1; r < ranks; ++r) {
      T v;
      std::memcpy(&v, all + (static_cast<size_t>(r) * count + i) * sizeof(T), sizeof(T));
      if (!op(acc, v, &acc)) return false;
    }
    std::memcpy(out + i * sizeof(T), &acc, sizeof(T));
  }
  return true;
}

template <typename T>
bool host_fold_int(MPI_Op op, const uint8_t* all, int ranks, size_t count, uint8_t* out) {
  return host_fold<T>(all, ranks, count, out,
                      [op](T a, T b, T* o) { return host_op_int<T>(op, a, b, o); });
}

template <typename T>
bool host_fold_float(MPI_Op op, const uint8_t* all, int ranks, size_t count, uint8_t* out) {
  return host_fold<T>(all, ranks, count, out,
                      [op](T a, T b, T* o) { return host_op_float<T>(op, a, b, o); });
}

// The reduction of every rank's `count` elements at `in` over `comm` (collective), into `out`
// (count elements of `type`). False, on every rank, when the host has no exact reference for
// (type, op): floating SUM/PROD, pair types, user ops; the caller then compares otherwise.
inline bool host_reduce(MPI_Datatype type, MPI_Op op, const void* in, size_t count, void* out,
                        MPI_Comm comm = MPI_COMM_WORLD) {
  int size = 0, es = 0;
  PMPI_Comm_size(comm, &size);
  PMPI_Type_size(type, &es);
  std::vector<uint8_t> all(static_cast<size_t>(size) * count * static_cast<size_t>(es) + 1);
  MPI_Request req;
  PMPI_Iallgather(in, static_cast<int>(count), type, all.data(), static_cast<int>(count), type,
                  comm, &req);
  wait_politely(&req);
  auto* o = static_cast<uint8_t*>(out);
  const uint8_t* a = all.data();
  if (type == MPI_SIGNED_CHAR || type == MPI_INT8_T)
    return host_fold_int<int8_t>(op, a, size, count, o);
  if (type == MPI_UNSIGNED_CHAR || type == MPI_UINT8_T || type == MPI_BYTE || type == MPI_C_BOOL) {
    if (type == MPI_C_BOOL && !(op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR)) return false;
    return host_fold_int<uint8_t>(op, a, size, count, o);
  }
  if (type == MPI_SHORT || type == MPI_INT16_T)
    return host_fold_int<int16_t>(op, a, size, count, o);
  if (type == MPI_UNSIGNED_SHORT || type == MPI_UINT16_T) {
    return host_fold_int<uint16_t>(op, a, size, count, o);
  }
  if (type == MPI_INT || type == MPI_INT32_T) return host_fold_int<int32_t>(op, a, size, count, o);
  if (type == MPI_UNSIGNED || type == MPI_UINT32_T) {
    return host_fold_int<uint32_t>(op, a, size, count, o);
  }
  if (type == MPI_LONG) return host_fold_int<long>(op, a, size, count, o);
  if (type == MPI_UNSIGNED_LONG) return host_fold_int<unsigned long>(op, a, size, count, o);
  if (type == MPI_LONG_LONG || type == MPI_INT64_T) {
    return host_fold_int<int64_t>(op, a, size, count, o);
  }
  if (type == MPI_UNSIGNED_LONG_LONG || type == MPI_UINT64_T) {
    return host_fold_int<uint64_t>(op, a, size, count, o);
  }
  if (type == MPI_FLOAT) return host_fold_float<float>(op, a, size, count, o);
  if (type == MPI_DOUBLE) return host_fold_float<double>(op, a, size, count, o);
  if (type == MPI_LONG_DOUBLE) return host_fold_float<long double>(op, a, size, count, o);
  return false;
}

// Fills `count` integer elements of `size` bytes with every bit pattern likely, the high bit
// included: random bytes, and every 5th element one of 0, all ones, the high bit alone, the
// high bit with the low bit (largest unsigned / most negative signed values).
inline void fill_full_range(uint8_t* buf, size_t count, size_t size, std::mt19937_64& rng) {
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = buf + i * size;
    for (size_t k = 0; k < size; ++k) e[k] = static_cast<uint8_t>(rng());
    if (i % 5 != 0) continue;
    switch (rng() % 4) {
      case 0:
        std::memset(e, 0, size);
        break;
      case 1:
        std::memset(e, 0xFF, size);
        break;
      case 2:
        std::memset(e, 0, size);
        e[size - 1] = 0x80;  // little endian: the top byte
        break;
      default:
        std::memset(e, 0, size);
        e[size - 1] = 0x80;
        e[0] |= 1;
        break;
    }
  }
}

// Sums the counts over ranks, prints the closing line on rank 0; returns the exit code.
inline int finish() {
  long totals[2] = {g_passed, g_failed}, sums[2];
  allreduce(totals, sums, 2, MPI_LONG, MPI_SUM);
  if (g_rank == 0) std::printf("%ld passed, %ld failed\n", sums[0], sums[1]);
  return sums[1] == 0 ? 0 : 1;
}

}  // namespace mpitest
