// The lock of memory several processes share (samehost/robust_mutex.h): a holder
// that dies, and a wake-up lost with a waiter that was killed.
#include "samehost/robust_mutex.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>

namespace softrdma::samehost {
namespace {

// Whether thread `tid` of this process is in futex(2) (/proc's syscall file
// starts with the number), as a thread waiting for a lock is.
bool sleeps_in_futex(pid_t tid) {
  std::ifstream file("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  return bool(file >> number) && number == SYS_futex;
}

class RobustMutexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* memory = mmap(nullptr, sizeof(pthread_mutex_t), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(memory, MAP_FAILED);
    mutex_ = static_cast<pthread_mutex_t*>(memory);
    init_shared_robust_mutex(*mutex_);
  }
  void TearDown() override { munmap(mutex_, sizeof(pthread_mutex_t)); }

  pthread_mutex_t* mutex_ = nullptr;
};

TEST_F(RobustMutexTest, AHolderThatDiedHandsTheLockOnConsistent) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    lock_shared_robust_mutex(*mutex_);
    _exit(0);  // holding it
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(lock_shared_robust_mutex(*mutex_)) << "the holder died";
  pthread_mutex_unlock(mutex_);
  EXPECT_FALSE(lock_shared_robust_mutex(*mutex_)) << "consistent again";
  pthread_mutex_unlock(mutex_);
}

// The state a waiter woken and killed leaves (issue 28's session: a device opening
// slept forever in the host registry's lock): the lock word free, its waiters
// asleep, nobody left to wake them. Made here by hand: the word says "held by
// another, with waiters" while a thread waits, then becomes free with no wake-up.
// pthread_mutex_lock would sleep on; the lock must be taken anyway.
TEST_F(RobustMutexTest, AWaiterWhoseWakeUpWasLostTakesTheLock) {
  // glibc's word: the owner's TID and FUTEX_WAITERS (linux/futex.h); this test's
  // main thread stands for the holder (a live TID, not the waiting thread's).
  constexpr int kFutexWaiters = int(0x80000000u);
  std::atomic_ref<int> word(mutex_->__data.__lock);
  word.store(int(getpid()) | kFutexWaiters);
  std::atomic<pid_t> waiter_tid{0};
  std::promise<void> locked;
  std::future<void> done = locked.get_future();
  std::thread waiter([&] {
    waiter_tid.store(gettid());
    lock_shared_robust_mutex(*mutex_);
    locked.set_value();
    pthread_mutex_unlock(mutex_);
  });
  // Until the thread sleeps on the word; then the word is freed with no wake-up.
  while (waiter_tid.load() == 0) std::this_thread::yield();
  while (!sleeps_in_futex(waiter_tid.load())) std::this_thread::yield();
  word.store(0);
  const bool taken = done.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  EXPECT_TRUE(taken) << "the waiter still sleeps on a free lock";
  if (!taken) {
    std::quick_exit(1);  // it would never end: do not hang the suite
  }
  waiter.join();
}

}  // namespace
}  // namespace softrdma::samehost
