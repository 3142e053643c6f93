// Time for the engine's timers. Injectable so that protocol tests step time
// deterministically instead of sleeping (no timed assertions in tests).
#pragma once

#include <cstdint>
#include <limits>

namespace softrdma::engine {

using Nanos = int64_t;  // CLOCK_MONOTONIC nanoseconds
inline constexpr Nanos kNever = std::numeric_limits<Nanos>::max();

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos now() const = 0;
};

// CLOCK_MONOTONIC, the clock the progress loop sleeps on.
class SteadyClock final : public Clock {
 public:
  Nanos now() const override;
};
const Clock& steady_clock();

// A clock that only moves when told to, for tests.
class ManualClock final : public Clock {
 public:
  Nanos now() const override { return now_; }
  void advance(Nanos by) { now_ += by; }
  void set(Nanos t) { now_ = t; }

 private:
  Nanos now_ = 1'000'000'000;
};

}  // namespace softrdma::engine
