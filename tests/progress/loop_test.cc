// The progress loop: it sleeps when idle, and every way of waking it (wake(), a
// readable fd, a deadline) leads to a progress() call. Correctness, not speed: no
// assertion depends on how fast this machine is.
#include "progress/loop.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "support/eventually.h"

namespace softrdma::progress {
namespace {

using namespace std::chrono_literals;

using testing_support::eventually;

// CPU time a thread of this process has used, in ns: /proc/self/task/TID/schedstat
// (first field: ns on a CPU), else utime + stime of .../stat in clock ticks.
int64_t thread_cpu_ns(pid_t tid) {
  const std::string task = "/proc/self/task/" + std::to_string(tid);
  std::ifstream schedstat(task + "/schedstat");
  int64_t on_cpu_ns = 0;
  if (schedstat >> on_cpu_ns) return on_cpu_ns;
  std::ifstream stat(task + "/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // field numbers as proc(5) counts
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * (1'000'000'000 / sysconf(_SC_CLK_TCK));
}

// A progress() that never has work, counting its calls.
struct IdleEngine {
  std::atomic<uint64_t> calls{0};
  ProgressHooks hooks() {
    return ProgressHooks{[this] {
                           calls.fetch_add(1);
                           return false;
                         },
                         nullptr, {}};
  }
};

// A thread of this process has ended (the kernel reaps it just after join() returns).
bool thread_gone(pid_t tid) {
  return syscall(SYS_tgkill, getpid(), tid, 0) == -1 && errno == ESRCH;
}

bool blocked_at_least(const ProgressLoop& loop, uint64_t blocks) {
  return loop.stats().blocks >= blocks;
}

TEST(ProgressLoop, IdleLoopSleepsInsteadOfBurningACore) {
  IdleEngine engine;
  ProgressLoop loop(engine.hooks());
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1) && loop.thread_tid() != 0; }));
  const pid_t tid = loop.thread_tid();
  const uint64_t calls_before = engine.calls.load();
  const int64_t cpu_before = thread_cpu_ns(tid);
  const auto wall_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(300ms);  // not an event: the idle spell whose CPU time is measured
  const int64_t cpu_ns = thread_cpu_ns(tid) - cpu_before;
  const auto wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - wall_before).count();
  EXPECT_LT(cpu_ns, wall_ns / 10) << "the idle loop used " << cpu_ns << " ns of CPU in "
                                  << wall_ns << " ns";
  EXPECT_EQ(engine.calls.load(), calls_before) << "nothing woke it: progress() not called";
  EXPECT_EQ(loop.stats().blocks, 1u) << "it stayed in one blocking wait";
  RecordProperty("idle_cpu_ns_over_300ms", std::to_string(cpu_ns));
}

TEST(ProgressLoop, WakeMakesTheVeryNextIterationCallProgress) {
  std::atomic<bool> woken{false};
  std::atomic<uint64_t> iteration_of_first_call_after_wake{0};
  ProgressLoop* loop_ptr = nullptr;
  auto record_first_call_after_wake = [&] {
    if (woken.load() && iteration_of_first_call_after_wake == 0)
      iteration_of_first_call_after_wake = loop_ptr->stats().iterations;
    return false;
  };
  ProgressLoop loop(ProgressHooks{record_first_call_after_wake, nullptr, {}});
  loop_ptr = &loop;
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1); }));
  // Not an event: time passes with the loop blocked, so that a spurious turn would
  // show in the count of iterations before the wake.
  std::this_thread::sleep_for(5ms);
  const uint64_t iterations_blocked = loop.stats().iterations;
  woken = true;
  loop.wake();
  ASSERT_TRUE(eventually([&] { return iteration_of_first_call_after_wake != 0; }));
  EXPECT_EQ(iteration_of_first_call_after_wake, iterations_blocked + 1);
  const auto stats = loop.stats();
  EXPECT_EQ(stats.wake_writes, 1u);
  EXPECT_EQ(stats.woken_by_wake, 1u);
}

TEST(ProgressLoop, WakeWhileRunningCostsNoSystemCallButIsNotLost) {
  std::atomic<uint64_t> calls{0};
  ProgressLoop* loop_ptr = nullptr;
  ProgressLoop loop(ProgressHooks{[&] {
                                    // The engine queues work from inside progress().
                                    if (calls.fetch_add(1) == 0) loop_ptr->wake();
                                    return false;
                                  },
                                  nullptr, {}},
                    ProgressOptions{.spin = 0ns});
  loop_ptr = &loop;
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1); }));
  EXPECT_EQ(loop.stats().wake_writes, 0u) << "the loop was running: no eventfd write";
  EXPECT_GE(calls.load(), 2u) << "the wake made the loop go round again before blocking";
}

TEST(ProgressLoop, ManyWakesOfABlockedLoopWriteOncePerBlock) {
  IdleEngine engine;
  ProgressLoop loop(engine.hooks());
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1); }));
  for (int i = 0; i < 100; ++i) loop.wake();
  ASSERT_TRUE(eventually([&] { return loop.stats().woken_by_wake >= 1; }));
  const auto stats = loop.stats();
  EXPECT_GE(stats.wake_writes, 1u);
  EXPECT_LE(stats.wake_writes, stats.blocks);
}

TEST(ProgressLoop, ReadableFdCallsProgress) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::atomic<uint64_t> consumed{0};
  ProgressLoop loop(ProgressHooks{[&] {
                                    uint64_t value;
                                    if (read(fd, &value, sizeof value) != sizeof value)
                                      return false;
                                    consumed += value;
                                    return true;
                                  },
                                  nullptr, {fd}});
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1); }));
  const uint64_t three = 3;
  ASSERT_EQ(write(fd, &three, sizeof three), ssize_t(sizeof three));
  ASSERT_TRUE(eventually([&] { return consumed.load() == 3; }));
  EXPECT_GE(loop.stats().woken_by_fd, 1u);
  EXPECT_GE(loop.stats().productive, 1u);
  loop.stop();
  close(fd);
}

// A timer armed while the loop sleeps: wake() makes it re-read the deadline, and
// it then wakes up by itself when the deadline passes.
TEST(ProgressLoop, DeadlineArmedLaterWakesTheLoopWhenDue) {
  std::atomic<int64_t> deadline{kNoDeadline};
  std::atomic<bool> fired{false};
  std::atomic<bool> woken{false};
  // When the loop first looked after the wake, and whether the deadline had passed
  // then: a loop delayed past it (a loaded machine) fires without sleeping, and the
  // timeout wake-up is then not what is tested.
  std::atomic<bool> looked_before_due{false};
  std::atomic<bool> looked{false};
  ProgressLoop loop(ProgressHooks{[&] {
                                    const int64_t now = monotonic_now_ns();
                                    if (woken.load() && !looked.exchange(true))
                                      looked_before_due = now < deadline.load();
                                    if (now < deadline.load()) return false;
                                    deadline = kNoDeadline;  // the timer fires once
                                    fired = true;
                                    return true;
                                  },
                                  [&] { return deadline.load(); }, {}});
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1); }));
  deadline = monotonic_now_ns() + 20'000'000;
  woken = true;
  loop.wake();
  ASSERT_TRUE(eventually([&] { return fired.load(); }));
  if (looked_before_due.load()) {
    EXPECT_GE(loop.stats().woken_by_timeout, 1u) << "it slept until the deadline, no longer";
  }
  EXPECT_TRUE(eventually([&] { return blocked_at_least(loop, 3); }))
      << "after the timer, back to sleep";
}

TEST(ProgressLoop, RunOnceDrivesProgressInline) {
  int calls = 0;
  ProgressLoop loop(ProgressHooks{[&] { return ++calls == 1; }, nullptr, {}});
  EXPECT_TRUE(loop.run_once());
  EXPECT_FALSE(loop.run_once());
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(loop.running());
}

TEST(ProgressLoop, RunOnceStepsAsideWhileTheLoopThreadProgresses) {
  std::mutex m;
  std::condition_variable cv;
  bool inside = false, release = false;
  std::atomic<int> calls{0};
  ProgressLoop loop(ProgressHooks{[&] {
                                    calls++;
                                    std::unique_lock lock(m);
                                    inside = true;
                                    cv.notify_all();
                                    cv.wait(lock, [&] { return release; });
                                    return false;
                                  },
                                  nullptr, {}});
  loop.start();
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return inside; }));
  }
  EXPECT_FALSE(loop.run_once()) << "progress() never runs on two threads at once";
  EXPECT_EQ(calls.load(), 1);
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  loop.stop();
}

// A progress() that counts the calls made on the test's thread apart.
struct CountingByThread {
  std::atomic<uint64_t> loop_calls{0}, other_calls{0};
  const pid_t test_tid = gettid();
  ProgressHooks hooks() {
    return ProgressHooks{[this] {
                           (gettid() == test_tid ? other_calls : loop_calls)++;
                           return false;
                         },
                         nullptr, {}};
  }
};

// DESIGN.md §5: while an application thread polls (run_once), the loop thread
// sleeps without calling progress() and without watching the fds; a poller that
// hands over (poller_satisfied(true)) wakes it at once, one that does not
// (poller_satisfied(false)) does not. Every wait here is for an event; the hour
// long stand-aside means only the hand-over can end it.
TEST(ProgressLoop, StandsAsideForAPollerUntilHandedOver) {
  CountingByThread engine;
  ProgressLoop loop(engine.hooks(), ProgressOptions{.spin = 0ns,
                                                    .aside_while_waiting = 3600s});
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1) && loop.thread_tid() != 0; }));
  loop.run_once();
  loop.wake();  // the loop goes round, sees the poller and stands aside
  ASSERT_TRUE(eventually([&] { return loop.stats().asides >= 1; }));
  const uint64_t loop_calls = engine.loop_calls.load();
  for (int i = 0; i < 1000; ++i) loop.run_once();
  EXPECT_EQ(engine.other_calls.load(), 1001u);
  const uint64_t writes = loop.stats().wake_writes;
  loop.poller_satisfied(false);
  EXPECT_EQ(loop.stats().wake_writes, writes) << "no hand-over: the loop is left asleep";
  EXPECT_EQ(engine.loop_calls.load(), loop_calls) << "the loop called progress() while aside";
  loop.run_once();
  loop.poller_satisfied(true);
  EXPECT_EQ(loop.stats().wake_writes, writes + 1);
  ASSERT_TRUE(eventually([&] { return engine.loop_calls.load() > loop_calls; }))
      << "handed over, the loop drives the engine again";
}

// Same-host peers wake a loop through its wake words in shared memory
// (share_wake_word, wake_loop): from another process, a sleeping loop is woken
// with one eventfd write, and a loop standing aside for a poller is not woken at
// all (the poller runs the engine). The child reports whether it wrote.
int wake_from_child(WakeWord& word, int fd) {
  const pid_t child = fork();
  if (child == 0) _exit(wake_loop(word, fd) ? 1 : 0);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ProgressLoop, AnotherProcessWakesItThroughSharedWakeWords) {
  void* shared = mmap(nullptr, sizeof(WakeWord), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  WakeWord& word = *new (shared) WakeWord{};
  CountingByThread engine;
  ProgressLoop loop(engine.hooks(), ProgressOptions{.spin = 0ns,
                                                    .aside_while_waiting = 3600s});
  loop.share_wake_word(&word);
  loop.start();
  ASSERT_TRUE(eventually([&] { return word.state.load() == uint32_t(LoopState::kBlocked); }));
  const uint64_t calls_asleep = engine.loop_calls.load();
  EXPECT_EQ(wake_from_child(word, loop.wake_fd()), 1) << "asleep: the doorbell is written";
  ASSERT_TRUE(eventually([&] { return engine.loop_calls.load() > calls_asleep; }));
  EXPECT_EQ(loop.stats().woken_by_wake, 1u);

  loop.run_once();  // a poller: the loop stands aside at its next turn
  loop.wake();
  ASSERT_TRUE(eventually([&] { return word.state.load() == uint32_t(LoopState::kAside); }));
  const uint64_t calls_aside = engine.loop_calls.load();
  EXPECT_EQ(wake_from_child(word, loop.wake_fd()), 0) << "aside: no system call";
  EXPECT_EQ(word.pending.load(), 1u) << "but the work is not lost: the loop sees it next";
  EXPECT_EQ(engine.loop_calls.load(), calls_aside);
  loop.stop();
  munmap(shared, sizeof(WakeWord));
}

TEST(ProgressLoop, StopJoinsABlockedLoopAndIsIdempotent) {
  IdleEngine engine;
  ProgressLoop loop(engine.hooks());
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1) && loop.thread_tid() != 0; }));
  const pid_t tid = loop.thread_tid();
  EXPECT_TRUE(loop.running());
  EXPECT_FALSE(thread_gone(tid));
  loop.stop();
  EXPECT_FALSE(loop.running());
  loop.stop();
  const uint64_t calls = engine.calls.load();
  // stop() joined the loop's thread: it is gone, so nothing can call progress().
  EXPECT_TRUE(eventually([&] { return thread_gone(tid); })) << "the loop's thread outlived stop()";
  EXPECT_EQ(engine.calls.load(), calls) << "no progress after stop";
}

TEST(ProgressLoop, BusyEngineIsCalledUntilItRunsOutOfWork) {
  std::atomic<int> work{1000};
  ProgressLoop loop(ProgressHooks{[&] { return work.fetch_sub(1) > 0; }, nullptr, {}});
  loop.start();
  ASSERT_TRUE(eventually([&] { return blocked_at_least(loop, 1); }));
  EXPECT_LE(work.load(), 0);
  EXPECT_EQ(loop.stats().productive, 1000u);
}

}  // namespace
}  // namespace softrdma::progress
