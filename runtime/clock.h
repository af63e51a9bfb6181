// Clock abstraction: the protocol core and the progress engine never read time themselves.
// SteadyClock for real runs, MpiWtimeClock under SimGrid SMPI (where MPI_Wtime is simulated
// time), and a manual clock in the in-process harness.
#pragma once

#include <memory>

#include "runtime/config.h"

namespace skipring {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since an arbitrary fixed origin.
  virtual double now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  double now() const override;
};

class MpiWtimeClock final : public Clock {
 public:
  double now() const override;
};

std::unique_ptr<Clock> make_clock(ClockKind kind);

}  // namespace skipring
