#include "progress/loop.h"

#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace softrdma::progress {

namespace {

constexpr int kMaxEvents = 16;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();  // lets the sibling hyperthread run while we poll
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// EEVDF (Linux 6.6+) lets a woken thread preempt a running one only when its
// deadline is earlier, and the deadline is one slice (about 3 ms) away: an engine
// thread woken by a packet waited up to that long behind an application spinning
// on memory (ib_write_lat, 2 cores). A SCHED_OTHER thread may ask for a shorter
// slice (sched_setattr(2) sched_runtime, Linux 6.12; unprivileged, 0.1-100 ms):
// its deadline is then near and it runs on wakeup. Older kernels refuse the field
// or ignore it; the loop works either way. Nice is kept as it was.
struct SchedAttr {
  uint32_t size;
  uint32_t policy;
  uint64_t flags;
  int32_t nice;
  uint32_t priority;
  uint64_t runtime;
  uint64_t deadline;
  uint64_t period;
};
constexpr uint64_t kShortSliceNs = 100'000;

void ask_for_a_short_slice() {
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.policy = SCHED_OTHER;
  errno = 0;
  attr.nice = getpriority(PRIO_PROCESS, 0);
  if (errno != 0) return;
  attr.runtime = kShortSliceNs;
  [[maybe_unused]] long r = syscall(SYS_sched_setattr, 0, &attr, 0);
}

[[noreturn, gnu::cold]] void die(const char* what) {
  std::fprintf(stderr, "softrdma: progress loop: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

// Blocks until an event or `deadline_ns` (CLOCK_MONOTONIC; kNoDeadline: none).
// epoll_pwait2 (Linux 5.11) takes nanoseconds: RC timers go down to 4.096 µs × 2^t.
int wait_for_events(int epoll_fd, epoll_event* events, int64_t deadline_ns) {
  timespec timeout{};
  timespec* timeout_ptr = nullptr;
  if (deadline_ns != kNoDeadline) {
    const int64_t left = std::max<int64_t>(0, deadline_ns - monotonic_now_ns());
    timeout.tv_sec = left / 1'000'000'000;
    timeout.tv_nsec = left % 1'000'000'000;
    timeout_ptr = &timeout;
  }
  const int n = epoll_pwait2(epoll_fd, events, kMaxEvents, timeout_ptr, nullptr);
  if (n >= 0 || errno != ENOSYS) return n;
  // Older kernels: milliseconds, rounded up so that we never wake before the deadline.
  const int ms = timeout_ptr == nullptr
                     ? -1
                     : int((int64_t(timeout.tv_sec) * 1'000'000'000 + timeout.tv_nsec + 999'999) /
                           1'000'000);
  return epoll_wait(epoll_fd, events, kMaxEvents, ms);
}

}  // namespace

int64_t monotonic_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ProgressLoop::ProgressLoop(ProgressHooks hooks, ProgressOptions options)
    : hooks_(std::move(hooks)), options_(std::move(options)),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      aside_epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      turn_lock_(hooks_.turn_lock != nullptr ? *hooks_.turn_lock : own_turn_lock_) {
  if (epoll_fd_ < 0 || aside_epoll_fd_ < 0) die("epoll_create1");
  if (wake_fd_ < 0) die("eventfd");
  add_fd(wake_fd_);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake_fd_;
  if (epoll_ctl(aside_epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event) != 0) die("epoll_ctl");
  for (int fd : hooks_.fds) add_fd(fd);
}

ProgressLoop::~ProgressLoop() {
  stop();
  close(wake_fd_);
  close(aside_epoll_fd_);
  close(epoll_fd_);
}

void ProgressLoop::add_fd(int fd) {
  if (fd < 0) return;
  epoll_event event{};
  event.events = EPOLLIN;  // level-triggered: readable until progress() drains it
  event.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0 && errno != EEXIST) die("epoll_ctl");
}

void ProgressLoop::start() {
  if (thread_.joinable()) return;
  stopping_.store(false);
  thread_ = std::thread([this] { run(); });
}

void ProgressLoop::stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);  // always: it may block now
  thread_.join();
}

// wake_word.h says how a wake and the loop's going to sleep meet. A loop standing
// aside (kAside) is not woken: the poller it stands aside for runs the engine,
// timers included, and the loop looks again when the poller's time is up.
void ProgressLoop::wake() {
  if (wake_loop(*word_, wake_fd_)) stats_.wake_writes.fetch_add(1, std::memory_order_relaxed);
}

void ProgressLoop::share_wake_word(WakeWord* word) {
  word->pending.store(word_->pending.load());
  word->state.store(word_->state.load());
  word_ = word;
}

void ProgressLoop::set_state(LoopState state) {
  word_->state.store(uint32_t(state), std::memory_order_seq_cst);
}

// The loop thread never waits for the lock: when a poller holds it, the poller
// is making the progress and the loop is about to stand aside.
bool ProgressLoop::call_progress() { return take_turns(hooks_.progress); }

// Turns while work is left behind: a thread that found turn_lock held left its
// work for the holder (the engine's doorbells, threading.md), so the holder looks
// again after it lets go, and takes another turn if any came meanwhile; looked at
// before letting go, a doorbell rung in between would wait for whoever comes next.
bool ProgressLoop::take_turns(const std::function<bool()>& turn) {
  bool did_work = false;
  do {
    std::unique_lock lock(turn_lock_, std::try_to_lock);
    if (!lock.owns_lock()) break;  // another thread is progressing right now
    did_work |= turn();
  } while (hooks_.work_left && hooks_.work_left());
  if (hooks_.after_progress) hooks_.after_progress();
  if (did_work) stats_.productive.fetch_add(1, std::memory_order_relaxed);
  return did_work;
}

bool ProgressLoop::run_once() {
  // A relaxed store: the loop reads it to decide whether to sleep, and being late
  // by a turn costs nothing but one more progress() call.
  aside_until_ns_.store(monotonic_now_ns() + options_.aside_while_waiting.count(),
                        std::memory_order_relaxed);
  return take_turns(hooks_.poll_progress ? hooks_.poll_progress : hooks_.progress);
}

void ProgressLoop::poller_satisfied(bool hand_over) {
  if (!hand_over) return;
  // The loop may be asleep until the end of the stand-aside: tell it now.
  aside_until_ns_.store(0, std::memory_order_seq_cst);
  uint32_t aside = uint32_t(LoopState::kAside);
  if (word_->state.load(std::memory_order_seq_cst) != aside) return;
  if (!word_->state.compare_exchange_strong(aside, uint32_t(LoopState::kRunning),
                                            std::memory_order_seq_cst))
    return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
  stats_.wake_writes.fetch_add(1, std::memory_order_relaxed);
}

bool ProgressLoop::poller_present() const {
  return aside_until_ns_.load(std::memory_order_relaxed) > monotonic_now_ns();
}

// Sleeps while a poller drives the engine, watching only the wake eventfd (stop),
// not the transports: a readable socket is the poller's to drain, and waking for it
// would put two threads on one core again. Returns when no poller is present.
void ProgressLoop::stand_aside() {
  for (;;) {
    const int64_t until = aside_until_ns_.load(std::memory_order_relaxed);
    if (until <= monotonic_now_ns() || stopping_.load(std::memory_order_relaxed)) return;
    stats_.asides.fetch_add(1, std::memory_order_relaxed);
    set_state(LoopState::kAside);
    epoll_event events[kMaxEvents];
    // Polls only ever push `until` later (a hand-over wakes the loop): it looks
    // again then, and sleeps on if the poller polled meanwhile.
    const int n = wait_for_events(aside_epoll_fd_, events, until);
    set_state(LoopState::kRunning);
    if (n > 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof count);
    }
  }
}

int64_t ProgressLoop::deadline() const {
  if (!hooks_.next_deadline_ns) return kNoDeadline;
  return hooks_.next_deadline_ns();  // safe beside progress() (ProgressHooks)
}

void ProgressLoop::run() {
  tid_.store(gettid(), std::memory_order_release);
  pthread_setname_np(pthread_self(), options_.thread_name.substr(0, 15).c_str());
  ask_for_a_short_slice();
  while (!stopping_.load(std::memory_order_relaxed)) {
    // Consumed before progress(): a wake() for work this call misses sets it again.
    word_->pending.store(0, std::memory_order_seq_cst);
    stats_.iterations.fetch_add(1, std::memory_order_relaxed);
    stand_aside();
    if (call_progress()) continue;
    if (spin()) continue;
    block();
  }
}

// Keeps calling progress() for options_.spin: on loopback the answer to what was
// just sent usually comes back within it, and blocking would cost two context
// switches. Each turn yields the core: where threads outnumber cores, an
// application thread spinning on memory for a remote WRITE (ib_write_lat) is what
// must run next, and with nobody else runnable sched_yield returns at once
// (docs/decisions/progress.md "Spinning politely"). Returns true when progress()
// did work or wake() was called.
bool ProgressLoop::spin() {
  const int64_t until = monotonic_now_ns() + options_.spin.count();
  while (monotonic_now_ns() < until) {
    if (stopping_.load(std::memory_order_relaxed)) return true;
    if (word_->pending.load(std::memory_order_relaxed) != 0) return true;
    if (poller_present()) return true;
    cpu_relax();
    sched_yield();
    stats_.iterations.fetch_add(1, std::memory_order_relaxed);
    if (call_progress()) return true;
  }
  return false;
}

void ProgressLoop::block() {
  set_state(LoopState::kBlocked);
  if (word_->pending.load(std::memory_order_seq_cst) != 0 || stopping_.load()) {
    set_state(LoopState::kRunning);
    return;
  }
  const int64_t due = deadline();
  if (due != kNoDeadline && due <= monotonic_now_ns()) {
    set_state(LoopState::kRunning);
    stats_.woken_by_timeout.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  stats_.blocks.fetch_add(1, std::memory_order_relaxed);
  epoll_event events[kMaxEvents];
  const int n = wait_for_events(epoll_fd_, events, due);
  set_state(LoopState::kRunning);
  if (n < 0) return;  // EINTR: go round
  if (n == 0) {
    stats_.woken_by_timeout.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  bool by_fd = false;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd != wake_fd_) {
      by_fd = true;
      continue;
    }
    uint64_t count;
    [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof count);
    stats_.woken_by_wake.fetch_add(1, std::memory_order_relaxed);
  }
  if (by_fd) stats_.woken_by_fd.fetch_add(1, std::memory_order_relaxed);
}

ProgressLoop::Stats ProgressLoop::stats() const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  Stats s;
  s.iterations = get(stats_.iterations);
  s.productive = get(stats_.productive);
  s.blocks = get(stats_.blocks);
  s.woken_by_fd = get(stats_.woken_by_fd);
  s.woken_by_wake = get(stats_.woken_by_wake);
  s.woken_by_timeout = get(stats_.woken_by_timeout);
  s.wake_writes = get(stats_.wake_writes);
  s.asides = get(stats_.asides);
  return s;
}

}  // namespace softrdma::progress
