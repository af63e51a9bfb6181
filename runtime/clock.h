// Clocks of the runtime: the base layer's Clock and SteadyClock (common/clock.h) plus
// MpiWtimeClock for SimGrid SMPI (where MPI_Wtime is simulated time), chosen by
// SKIPRING_CLOCK.
#pragma once

#include <memory>

#include "common/clock.h"
#include "runtime/config.h"

namespace skipring {

class MpiWtimeClock final : public Clock {
 public:
  double now() const override;
};

std::unique_ptr<Clock> make_clock(ClockKind kind);

}  // namespace skipring
