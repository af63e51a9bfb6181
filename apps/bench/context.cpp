// skipring_bench context: buffers and the agreement on errors.
#include "apps/bench/context.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "skipring/skipring.h"

namespace skipring_bench {
namespace {

const char* impl_call_name(Impl impl) {
  return impl == Impl::kSkipring ? "skipring_allreduce" : "PMPI_Allreduce";
}

// The error text of a return code of skipring_allreduce or PMPI_Allreduce.
std::string error_text(int rc, Impl impl) {
  if (impl == Impl::kSkipring) {
    const char* s = skipring_error_string(rc);
    return s ? s : "(no description)";
  }
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  return buf;
}

}  // namespace

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(fmt::format("{} failed: {} (code {})", what, text, rc));
}

Buffer::Buffer(size_t bytes) {
  const size_t kAlign = 4096;
  const size_t rounded = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  data_.reset(static_cast<unsigned char*>(std::aligned_alloc(kAlign, rounded)));
  if (!data_) throw std::bad_alloc();
  std::memset(data_.get(), 0, rounded);
}

void agree_on_error(const Context& ctx, int rc, Impl impl, const std::string& what) {
  const int local = rc != MPI_SUCCESS ? 1 : 0;
  if (local) {
    fmt::print(stderr, "[rank {}] {} failed ({}): {} (code {})\n", ctx.rank, impl_call_name(impl),
               what, error_text(rc, impl), rc);
    std::fflush(stderr);
  }
  int any = 0;
  check_mpi(PMPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, ctx.comm), "PMPI_Allreduce(error)");
  if (any) {
    throw CollectiveFailure(fmt::format("{} returned an error ({}); see the messages above",
                                        impl_call_name(impl), what));
  }
}

}  // namespace skipring_bench
