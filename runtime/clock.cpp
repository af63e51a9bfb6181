// Real and simulated clocks.
#include "runtime/clock.h"

#include <mpi.h>

#include <chrono>

#ifdef SKIPRING_SIMGRID
#include <simgrid/engine.h>
#endif

namespace skipring {

double SteadyClock::now() const {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

#ifdef SKIPRING_SIMGRID
// SimGrid's simulated clock, which is what MPI_Wtime returns under SMPI (scripts/sim_run.sh sets
// smpi/wtime:0), without MPI_Wtime's per-call bookkeeping (two CPU-time clock reads): the
// engine reads the clock several times per event.
double MpiWtimeClock::now() const { return simgrid_get_clock(); }
#else
double MpiWtimeClock::now() const { return MPI_Wtime(); }
#endif

std::unique_ptr<Clock> make_clock(ClockKind kind) {
  if (kind == ClockKind::kMpiWtime) return std::make_unique<MpiWtimeClock>();
  return std::make_unique<SteadyClock>();
}

}  // namespace skipring
