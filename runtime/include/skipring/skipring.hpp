// skipring C++ API: a thin layer over the C API (skipring.h). Errors become skipring::Error
// exceptions here, at the C++ edge only; the C functions underneath never throw.
#pragma once

#include <skipring/skipring.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace skipring {

class Error : public std::runtime_error {
 public:
  explicit Error(int code) : std::runtime_error(skipring_error_string(code)), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

inline void check(int code) {
  if (code != MPI_SUCCESS) throw Error(code);
}

// The MPI datatype of a C++ arithmetic type.
template <typename T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, bool>)
    return MPI_C_BOOL;
  else if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, long double>)
    return MPI_LONG_DOUBLE;
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 1)
      return MPI_INT8_T;
    else if constexpr (sizeof(T) == 2)
      return MPI_INT16_T;
    else if constexpr (sizeof(T) == 4)
      return MPI_INT32_T;
    else
      return MPI_INT64_T;
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (sizeof(T) == 1)
      return MPI_UINT8_T;
    else if constexpr (sizeof(T) == 2)
      return MPI_UINT16_T;
    else if constexpr (sizeof(T) == 4)
      return MPI_UINT32_T;
    else
      return MPI_UINT64_T;
  } else {
    static_assert(std::is_arithmetic_v<T>, "skipring::allreduce needs an arithmetic type");
    return MPI_DATATYPE_NULL;
  }
}

template <typename T>
void allreduce(const T* send, T* recv, int count, MPI_Op op = MPI_SUM,
               MPI_Comm comm = MPI_COMM_WORLD) {
  check(skipring_allreduce(send, recv, count, mpi_type<T>(), op, comm));
}

// In place over a whole vector.
template <typename T>
void allreduce(std::vector<T>& data, MPI_Op op = MPI_SUM, MPI_Comm comm = MPI_COMM_WORLD) {
  check(skipring_allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), mpi_type<T>(),
                           op, comm));
}

// Reduce-scatter with equal blocks: send holds size * recvcount elements, recv gets this rank's.
template <typename T>
void reduce_scatter_block(const T* send, T* recv, int recvcount, MPI_Op op = MPI_SUM,
                          MPI_Comm comm = MPI_COMM_WORLD) {
  check(skipring_reduce_scatter_block(send, recv, recvcount, mpi_type<T>(), op, comm));
}

// Allgather: count elements from every rank into recv (size * count elements, rank order).
template <typename T>
void allgather(const T* send, int count, T* recv, MPI_Comm comm = MPI_COMM_WORLD) {
  check(skipring_allgather(send, count, mpi_type<T>(), recv, count, mpi_type<T>(), comm));
}

// Broadcast of a whole vector from `root` (every rank's vector must have the same size).
template <typename T>
void bcast(std::vector<T>& data, int root = 0, MPI_Comm comm = MPI_COMM_WORLD) {
  check(skipring_bcast(data.data(), static_cast<int>(data.size()), mpi_type<T>(), root, comm));
}

// Reduce to `root`; recv is only written (and may be null) on the other ranks.
template <typename T>
void reduce(const T* send, T* recv, int count, int root = 0, MPI_Op op = MPI_SUM,
            MPI_Comm comm = MPI_COMM_WORLD) {
  check(skipring_reduce(send, recv, count, mpi_type<T>(), op, root, comm));
}

// Forces the all-reduce algorithm ("auto", "skipring", "rd", ...) on every rank; an empty name
// goes back to SKIPRING_ALGO.
inline void set_algo(const std::string& name) {
  check(skipring_set_algo(name.empty() ? nullptr : name.c_str()));
}

inline skipring_stats_t last_stats(MPI_Comm comm = MPI_COMM_WORLD) {
  skipring_stats_t s;
  check(skipring_last_stats(comm, &s));
  return s;
}

inline skipring_totals_t totals() {
  skipring_totals_t t;
  check(skipring_get_totals(&t));
  return t;
}

}  // namespace skipring
