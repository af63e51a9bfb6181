// The MPI_Wtime / simulated clock and the SKIPRING_CLOCK choice.
#include "runtime/clock.h"

#include <mpi.h>

#ifdef SKIPRING_SIMGRID
#include <simgrid/engine.h>
#endif

namespace skipring {

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
