// The steady clock (clock.h).
#include "common/clock.h"

#include <chrono>

namespace skipring {

double SteadyClock::now() const {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace skipring
