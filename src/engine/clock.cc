#include "engine/clock.h"

#include <time.h>

namespace softrdma::engine {

Nanos SteadyClock::now() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Nanos(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

const Clock& steady_clock() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace softrdma::engine
