// Clock abstraction: the protocol cores and the progress engine never read time themselves.
// SteadyClock for real runs; runtime/clock.h adds the MPI_Wtime / SimGrid clock, the
// in-process harness a manual one. Base layer: no MPI.
#pragma once

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

}  // namespace skipring
