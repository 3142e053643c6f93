// The progress loop (DESIGN.md §5; docs/decisions/progress.md).
//
// A software RNIC must make progress when the application does not call into it
// (one-sided READ/WRITE/ATOMIC are served without the target's help), so each
// context runs this loop on its own thread. It knows nothing of the engine: it
// calls `progress()` (poll transports, run QP tasks, fire due timers), asks
// `next_deadline_ns()` when the next timer is due, and watches `fds`.
//
//   work done -> call progress() again at once
//   no work   -> keep calling it for a short spin (~30 µs: a reply on loopback
//                comes back within it), then block in epoll_wait on `fds` and an
//                internal eventfd, until the next deadline.
//
// Idle, it sleeps in the kernel: these machines have two cores, and a loop that
// spins forever per process takes one of them (DESIGN.md §5).
// wake() tells a blocked loop that work was queued or a timer armed; it costs a
// store and a load unless the loop is actually blocked. run_once() drives the
// same progress inline (tests; poll_cq for the lowest latency); progress() never
// runs on two threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "progress/wake_word.h"

namespace softrdma::progress {

struct ProgressHooks {
  // Does what is ready; true when it did any work. Called with turn_lock held.
  std::function<bool()> progress;
  // When progress() must next run even if no fd fires: CLOCK_MONOTONIC ns, or
  // INT64_MAX for never. Null: never. Called on the loop's thread without
  // turn_lock, while other threads may be in progress(): it must be safe then.
  std::function<int64_t()> next_deadline_ns;
  // Readable means progress() has work (transport rx_fds, ...).
  std::vector<int> fds;
  // What run_once() calls instead, when set: an application thread's turn, which
  // may do less than the loop's (it comes back at once if it found nothing).
  std::function<bool()> poll_progress;
  // The lock whose holder alone runs progress (the engine's: one owner, one lock,
  // docs/decisions/threading.md); the loop and run_once() try it and never wait.
  // Null: the loop's own.
  std::mutex* turn_lock = nullptr;
  // Called after each progress or poll_progress call, once turn_lock is released
  // (what may call back into the owner, e.g. reports to listeners). Optional.
  std::function<void()> after_progress;
  // Whether work was left for the holder of turn_lock by a thread that found it
  // held (the engine's doorbells); asked after letting go, and another turn taken
  // when true. Optional.
  std::function<bool()> work_left;
};

struct ProgressOptions {
  std::chrono::nanoseconds spin{30'000};  // keep polling this long before blocking
  // An application thread that polls (run_once) will poll again: the loop stands
  // aside this long after each poll, whether it found completions or not. Only a
  // hand-over (poller_satisfied(true)) or this much time without a poll ends it:
  // a loop that came back between two polls (while the application posts its
  // answer) was woken by the next message and preempted the poller just when it
  // had that message to read (iWARP ib_send_lat: twice the latency of inline
  // progress; docs/decisions/threading.md).
  std::chrono::nanoseconds aside_while_waiting{200'000};
  std::string thread_name = "softrdma-prog";  // up to 15 characters (pthread)
};

inline constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();

int64_t monotonic_now_ns();

class ProgressLoop {
 public:
  // What the loop did; for tests and `softrdma counters`.
  struct Stats {
    uint64_t iterations = 0;      // loop turns (each calls progress() once)
    uint64_t productive = 0;      // progress() calls that did work
    uint64_t blocks = 0;          // times the thread blocked in epoll
    uint64_t woken_by_fd = 0;     // blocks ended by a readable fd
    uint64_t woken_by_wake = 0;   // blocks ended by wake() or stop()
    uint64_t woken_by_timeout = 0;  // blocks ended by the deadline
    uint64_t wake_writes = 0;     // eventfd writes wake() made
    uint64_t asides = 0;          // times the thread stood aside for a poller
  };

  // Sets up epoll on hooks.fds; the thread starts with start(). `progress` must
  // be set. Aborts if the kernel refuses an epoll fd or an eventfd.
  explicit ProgressLoop(ProgressHooks hooks, ProgressOptions options = {});
  ~ProgressLoop();  // stop()s
  ProgressLoop(const ProgressLoop&) = delete;
  ProgressLoop& operator=(const ProgressLoop&) = delete;

  void start();
  void stop();  // wakes the thread and joins it; idempotent
  bool running() const { return thread_.joinable(); }

  // Work was queued or a timer armed: a blocked loop recomputes and calls progress().
  void wake();
  // Keeps the wake-up words in `word` from now on (memory shared with processes
  // that wake this loop with wake_loop() and wake_fd(); it must outlive the loop).
  // Before start().
  void share_wake_word(WakeWord* word);

  // Calls progress() once on the calling thread, unless another thread is inside
  // it right now (then that one makes the progress): returns what progress()
  // returned, false when skipped. The caller counts as a poller: the loop thread
  // stands aside (sleeps, without watching the fds) while one is present, so that
  // exactly one thread drives the engine and the two never take turns on a core.
  bool run_once();
  // The poller that called run_once() got what it waited for. `hand_over`: it is
  // likely to wait elsewhere next (on memory, on a completion channel): the loop
  // takes over at once. Otherwise nothing changes: the loop stands aside until
  // ProgressOptions::aside_while_waiting has passed without a poll.
  void poller_satisfied(bool hand_over);

  // Watches one more fd (e.g. a transport opened later). Thread-safe.
  void add_fd(int fd);

  Stats stats() const;
  // The loop thread's kernel id, for reading its CPU time (0 before start()).
  pid_t thread_tid() const { return tid_.load(std::memory_order_acquire); }

 private:
  void run();
  bool call_progress();
  bool take_turns(const std::function<bool()>& turn);
  bool spin();
  void block();
  bool poller_present() const;
  void stand_aside();
  int64_t deadline() const;
  void set_state(LoopState state);

  ProgressHooks hooks_;
  const ProgressOptions options_;
  const int epoll_fd_;
  const int aside_epoll_fd_;  // the wake eventfd only
  const int wake_fd_;

 public:
  // The descriptor wake() writes; other processes may be given it (same-host
  // peers ring it: samehost/host.h).
  int wake_fd() const { return wake_fd_; }

 private:
  std::thread thread_;
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> stopping_{false};
  // wake() and the loop's going to sleep form a Dekker pair (wake_word.h): in
  // own_word_, or in shared memory (share_wake_word).
  WakeWord own_word_{};
  WakeWord* word_ = &own_word_;
  std::mutex own_turn_lock_;  // when the hooks name no turn_lock
  std::mutex& turn_lock_;     // progress() on one thread at a time
  // CLOCK_MONOTONIC ns until which the loop stands aside for a poller.
  std::atomic<int64_t> aside_until_ns_{0};

  struct AtomicStats {
    std::atomic<uint64_t> iterations{0}, productive{0}, blocks{0}, woken_by_fd{0},
        woken_by_wake{0}, woken_by_timeout{0}, wake_writes{0}, asides{0};
  } stats_;
};

}  // namespace softrdma::progress
