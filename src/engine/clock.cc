#include "engine/clock.h"

#include <time.h>

namespace softrdma::engine {

Nanos SteadyClock::now() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Nanos(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Never destroyed (issue 6 defect 4): a process may exit without closing its
// device, and its progress thread keeps reading the clock while exit() runs the
// static destructors; a destroyed object's vptr is gone (UBSan: invalid vptr).
const Clock& steady_clock() {
  static const SteadyClock* const clock = new SteadyClock;
  return *clock;
}

}  // namespace softrdma::engine
