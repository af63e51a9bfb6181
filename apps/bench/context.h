// skipring_bench context: the run's communicator, buffers and options, and MPI error handling
// shared by the runner, the report and main.
#ifndef SKIPRING_APPS_BENCH_CONTEXT_H_
#define SKIPRING_APPS_BENCH_CONTEXT_H_

#include <mpi.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "apps/bench/options.h"

namespace skipring_bench {

// A failure every rank knows about (agreed through a collective): the run stops cleanly.
class CollectiveFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws std::runtime_error naming `what` and MPI's error text unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* what);

// Page-aligned, pre-touched memory.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_.get());
  }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char[], Free> data_;
};

struct Context {
  Options opts;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int nranks = 1;
  Buffer send;
  Buffer recv;
  Buffer expected;
  int hosts = 1;              // distinct hosts the ranks run on
  double clock_offset_s = 0;  // this rank's steady_clock minus rank 0's (several hosts only)
};

enum class Impl { kSkipring, kMpi };

// Every rank learns whether any rank's call failed (rc, a return code of `impl`); the failing
// ranks say why on stderr. Throws CollectiveFailure on every rank when one failed.
void agree_on_error(const Context& ctx, int rc, Impl impl, const std::string& what);

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_CONTEXT_H_
