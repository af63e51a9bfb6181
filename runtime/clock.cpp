// Real and simulated clocks.
#include "runtime/clock.h"

#include <mpi.h>

#include <chrono>

namespace skipring {

double SteadyClock::now() const {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

double MpiWtimeClock::now() const { return MPI_Wtime(); }

std::unique_ptr<Clock> make_clock(ClockKind kind) {
  if (kind == ClockKind::kMpiWtime) return std::make_unique<MpiWtimeClock>();
  return std::make_unique<SteadyClock>();
}

}  // namespace skipring
