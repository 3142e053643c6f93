#include "runtime/status_registry.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/status_file.h"

namespace softrdma::runtime::status_registry {

namespace {

// An entry is kFree (reusable), kBusy (one party owns its fields: add filling
// it, remove or an ending handler taking it) or kLive (a name this process
// holds). Only a compare-and-swap from kFree or kLive to kBusy takes an entry,
// so whoever holds it kBusy reads and writes its fields alone; the signal
// handler needs no lock.
enum State : int { kFree, kBusy, kLive };

struct Entry {
  std::atomic<int> state{kBusy};
  Entry* next = nullptr;  // fixed before the entry is on the list
  pid_t pid = 0;  // the process that made it: a forked child removes none of its parent's
  dev_t dev = 0;
  ino_t ino = 0;
  char path[PATH_MAX] = {};
};

// Never freed: the exit handler, a signal handler and a device closed from a
// static destructor (or a thread still running at exit) may walk it at any time.
std::atomic<Entry*> g_head{nullptr};
// Serialises add, remove and holds (ordinary calls) among themselves; the
// handlers below never take it.
std::mutex& calls_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

bool take(Entry& e, State from) {
  int expected = from;
  return e.state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire);
}

// Removes this process's names: lstat, unlink and atomics only, so that it may
// run in a signal handler (async-signal-safe), and no lock, so that it runs in
// a forked child whose parent held one.
void remove_mine() {
  const pid_t self = getpid();
  for (Entry* e = g_head.load(std::memory_order_acquire); e != nullptr; e = e->next) {
    if (!take(*e, kLive)) continue;
    if (e->pid != self) {
      e->state.store(kLive, std::memory_order_release);  // a parent's, in a forked child
      continue;
    }
    status_file::remove_if_same(e->path, e->dev, e->ino);
    e->state.store(kFree, std::memory_order_release);
  }
}

// The signals sent to ask a process to end (kill's default, Ctrl-C, a closed
// terminal), whose default action ends it without a core dump.
constexpr int kEndingSignals[] = {SIGTERM, SIGINT, SIGHUP};

// Runs only where the signal's action was the default (install below): the
// names go, then the default action ends the process, by this signal, as it
// would have without softrdma (the parent's waitpid sees WTERMSIG == sig).
void on_ending_signal(int sig) {
  const int saved = errno;
  remove_mine();
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(sig, &default_action, nullptr);
  // Blocked while this handler runs (no SA_NODEFER): delivered, with the
  // default action, as the handler returns.
  raise(sig);
  errno = saved;
}

// A library must not take an application's signals: a signal the application
// handles or ignores is left exactly as it is, and one it sets later replaces
// this handler (docs/decisions/exit-signals.md). The action is swapped rather
// than read and then set, so that a handler the application installs in
// between is never overwritten by ours (it is put back).
void install_ending_signal_handlers() {
  struct sigaction ours {};
  ours.sa_handler = on_ending_signal;
  sigemptyset(&ours.sa_mask);
  for (int sig : kEndingSignals) sigaddset(&ours.sa_mask, sig);
  ours.sa_flags = SA_RESTART;
  for (int sig : kEndingSignals) {
    struct sigaction previous {};
    if (sigaction(sig, nullptr, &previous) != 0) continue;
    if ((previous.sa_flags & SA_SIGINFO) != 0 || previous.sa_handler != SIG_DFL) continue;
    if (sigaction(sig, &ours, &previous) != 0) continue;
    if ((previous.sa_flags & SA_SIGINFO) != 0 || previous.sa_handler != SIG_DFL)
      sigaction(sig, &previous, nullptr);
  }
}

// Runs at exit() (atexit: after the static destructors of objects made later,
// before those of earlier ones).
void remove_at_exit() { remove_mine(); }

Entry& claim_entry() {
  for (Entry* e = g_head.load(std::memory_order_acquire); e != nullptr; e = e->next)
    if (take(*e, kFree)) return *e;
  auto* e = new Entry;  // kBusy: ours until it is filled
  e->next = g_head.load(std::memory_order_relaxed);
  while (!g_head.compare_exchange_weak(e->next, e, std::memory_order_release,
                                       std::memory_order_relaxed)) {
  }
  return *e;
}

}  // namespace

void add(const std::string& path, dev_t dev, ino_t ino) {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit(remove_at_exit);
    install_ending_signal_handlers();
  });
  if (path.size() >= PATH_MAX) return;  // no such path exists; the next sweep removes it
  std::lock_guard lock(calls_mutex());
  Entry& e = claim_entry();
  e.pid = getpid();
  e.dev = dev;
  e.ino = ino;
  std::memcpy(e.path, path.c_str(), path.size() + 1);
  e.state.store(kLive, std::memory_order_release);
}

// Under calls_mutex() an entry's fields change only by add (which fills only an
// entry it claimed from kFree): a kLive one may be read here without taking it.
bool is_mine(const Entry& e, const std::string& path) {
  return e.state.load(std::memory_order_acquire) == kLive && e.pid == getpid() && path == e.path;
}

bool remove(const std::string& path, dev_t& dev, ino_t& ino) {
  std::lock_guard lock(calls_mutex());
  for (Entry* e = g_head.load(std::memory_order_acquire); e != nullptr; e = e->next) {
    if (!is_mine(*e, path) || !take(*e, kLive)) continue;  // not it, or an ending handler's now
    dev = e->dev;
    ino = e->ino;
    e->state.store(kFree, std::memory_order_release);
    return true;
  }
  return false;
}

bool holds(const std::string& path) {
  std::lock_guard lock(calls_mutex());
  for (Entry* e = g_head.load(std::memory_order_acquire); e != nullptr; e = e->next)
    if (is_mine(*e, path)) return true;
  return false;
}

}  // namespace softrdma::runtime::status_registry
