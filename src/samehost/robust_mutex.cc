#include "samehost/robust_mutex.h"

#include <cerrno>
#include <ctime>

namespace softrdma::samehost {

namespace {

// Long beside what the lock guards (a few stores, a scan of the slots), short beside
// what a stuck waiter would cost (a device that never opens).
constexpr long kWaitPeriodNs = 10'000'000;

timespec period_from_now() {
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_nsec += kWaitPeriodNs;
  if (deadline.tv_nsec >= 1'000'000'000) {
    deadline.tv_nsec -= 1'000'000'000;
    ++deadline.tv_sec;
  }
  return deadline;
}

}  // namespace

void init_shared_robust_mutex(pthread_mutex_t& m) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&m, &attr);
  pthread_mutexattr_destroy(&attr);
}

bool lock_shared_robust_mutex(pthread_mutex_t& m) {
  int rc = pthread_mutex_trylock(&m);
  while (rc == EBUSY) {
    const timespec deadline = period_from_now();
    rc = pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &deadline);
    if (rc == ETIMEDOUT) rc = EBUSY;
  }
  if (rc != EOWNERDEAD) return false;
  pthread_mutex_consistent(&m);
  return true;
}

}  // namespace softrdma::samehost
