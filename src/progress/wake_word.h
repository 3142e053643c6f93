// The words of a progress loop's wake-up protocol (loop.cc, ProgressLoop::wake),
// kept apart from the loop so that they may live in memory shared with other
// processes: a same-host peer that placed a message for this process wakes its
// loop exactly as wake() does — an eventfd write only when the loop is blocked,
// nothing while it runs or stands aside for a poller (docs/decisions/same-host.md,
// "Waking the owner").
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace softrdma::progress {

enum class LoopState : uint32_t { kRunning = 0, kBlocked = 1, kAside = 2 };

// Zero-initialised memory is a running loop with nothing pending.
struct WakeWord {
  std::atomic<uint32_t> state;    // LoopState, stored by the loop only
  std::atomic<uint32_t> pending;  // 1: work was queued since the loop last looked
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared between processes");

// Dekker with the loop's going to sleep: store `pending`, then load `state`; the
// loop stores kBlocked, then loads `pending`. Sequentially consistent, so one of
// the two sees the other. Only the exchange kBlocked -> kRunning writes `fd`, so
// concurrent wakers write once. True when it wrote.
inline bool wake_loop(WakeWord& word, int fd) {
  word.pending.store(1, std::memory_order_seq_cst);
  if (word.state.load(std::memory_order_seq_cst) != uint32_t(LoopState::kBlocked)) return false;
  uint32_t blocked = uint32_t(LoopState::kBlocked);
  if (!word.state.compare_exchange_strong(blocked, uint32_t(LoopState::kRunning),
                                          std::memory_order_seq_cst))
    return false;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
  return true;
}

}  // namespace softrdma::progress
