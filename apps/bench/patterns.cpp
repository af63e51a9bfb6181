// skipring_bench patterns: setting up and removing the straggler of the interleaved modes
// (the data patterns are templates, in patterns.h).
#include "apps/bench/patterns.h"

#include <fmt/core.h>
#include <mpi.h>

#include "skipring/skipring.h"

namespace skipring_bench {

StragglerSetup::~StragglerSetup() {
  if (inject_installed_) skipring_set_inject(nullptr);
}

std::optional<int> StragglerSetup::install(const Options& opts, int rank, int nranks) {
  if (opts.late_rank >= nranks) {
    if (rank == 0) {
      fmt::print(stderr, "skipring_bench: --late-rank {} is not a rank (the job has {} ranks)\n",
                 opts.late_rank, nranks);
    }
    return 2;
  }
  if (!opts.inject_given) return std::nullopt;
  // skipring logs why it refuses a spec.
  if (skipring_set_inject(opts.inject.c_str()) != MPI_SUCCESS) {
    if (rank == 0) {
      fmt::print(stderr, "skipring_bench: --inject: skipring refused \"{}\" (see its message)\n",
                 opts.inject);
    }
    return 2;
  }
  inject_installed_ = true;
  return std::nullopt;
}

}  // namespace skipring_bench
