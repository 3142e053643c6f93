// Waiting in a test for something another thread, process or the kernel does,
// when it offers no fd, futex or callback to wait on: poll `condition` until it
// holds, giving up after `limit` (a bound against hanging, never a timing
// assertion: a slow machine only waits longer, up to the bound).
#ifndef SOFTRDMA_TESTS_SUPPORT_EVENTUALLY_H_
#define SOFTRDMA_TESTS_SUPPORT_EVENTUALLY_H_

#include <chrono>
#include <thread>

namespace softrdma::testing_support {

// True as soon as `condition()` is; false if it still is not after `limit`.
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = std::chrono::seconds(10),
                std::chrono::microseconds interval = std::chrono::milliseconds(1)) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(interval);  // not an event: the pace of a poll with a deadline
  }
  return true;
}

}  // namespace softrdma::testing_support

#endif  // SOFTRDMA_TESTS_SUPPORT_EVENTUALLY_H_
