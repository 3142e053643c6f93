// A mutex in memory that several processes map, and that a process killed while
// holding it, or while waiting for it, does not leave stuck.
#pragma once

#include <pthread.h>

namespace softrdma::samehost {

// Initialises `m` process-shared and robust (a holder that dies hands the next
// locker EOWNERDEAD instead of keeping it forever).
void init_shared_robust_mutex(pthread_mutex_t& m);

// Locks `m`; when its last holder died, marks it consistent and returns true (the
// caller's data may be half-changed; each user says why that is fine).
//
// Why not pthread_mutex_lock: an unlock wakes one waiter. A waiter woken that is
// killed before it retakes the word (a process ending with `_exit` or SIGKILL
// while one of its threads waits) takes that wake-up with it; when the word has
// meanwhile been taken by a locker that never waited, no later unlock wakes the
// others (the kernel's robust-list cleanup wakes one only when the word is free at
// that death). This was seen: a process opening a device slept forever in the
// registry's lock, the word free, its other users gone. So waits are bounded and
// retried: a lost wake-up costs at most one period, an uncontended lock nothing.
bool lock_shared_robust_mutex(pthread_mutex_t& m);

}  // namespace softrdma::samehost
