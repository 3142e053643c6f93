#include "engine/guarded_memory.h"

#include <csetjmp>
#include <csignal>
#include <cstring>
#include <atomic>
#include <mutex>

namespace softrdma::engine {

namespace {

// The guarded routine running on this thread, or null. initial-exec: the handler
// reads it, and a lazily allocated (dynamic TLS) variable could call malloc there.
[[gnu::tls_model("initial-exec")]] thread_local sigjmp_buf* t_guard = nullptr;

struct sigaction g_previous_segv {};
struct sigaction g_previous_bus {};
std::atomic<uint64_t> g_faults{0};

// What the handler that was installed before ours would have done with the signal.
void chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& previous = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // Default action (SIG_IGN is no choice for a real fault: it would fault forever).
  // Returning re-executes the faulting instruction, which now dies as it would
  // have without softrdma, with its core dump; a signal sent by kill() is re-raised.
  signal(sig, SIG_DFL);
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  sigjmp_buf* guard = t_guard;
  // A fault of the guarded routine itself, not a signal another thread sent us.
  if (guard != nullptr && info != nullptr && info->si_code > 0) {
    t_guard = nullptr;
    siglongjmp(*guard, 1);
  }
  chain(sig, info, context);
}

void install_now() {
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  // SA_NODEFER: the jump out skips the kernel's mask restore, so the signal must
  // not be blocked while the handler runs (a blocked SIGSEGV kills at the next
  // fault). SA_ONSTACK: a handler the application runs on an alternate stack
  // keeps running there when chained.
  action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous_segv);
  sigaction(SIGBUS, &action, &g_previous_bus);
}

// Marks the thread inside a guarded routine; the signal fences keep the compiler
// from moving the routine's memory accesses out of the marked stretch.
inline void enter(sigjmp_buf* guard) {
  t_guard = guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void leave() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
}

[[gnu::cold]] bool faulted() {
  g_faults.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace

void install_memory_fault_handler() {
  static std::once_flag once;
  std::call_once(once, install_now);
}

// sigsetjmp(env, 0) saves registers only (no sigprocmask system call); it and the
// two marker stores are the whole cost on the data path (memory-faults.md).
[[gnu::noinline]] bool guarded_copy(void* dst, const void* src, size_t n) {
  sigjmp_buf env;
  if (sigsetjmp(env, 0) != 0) return faulted();
  enter(&env);
  std::memcpy(dst, src, n);
  leave();
  return true;
}

[[gnu::noinline]] bool guarded_atomic(AtomicOp op, uint64_t* word, uint64_t compare,
                                      uint64_t swap_add, uint64_t& original) {
  sigjmp_buf env;
  if (sigsetjmp(env, 0) != 0) return faulted();
  enter(&env);
  std::atomic_ref<uint64_t> target(*word);
  uint64_t before = compare;
  if (op == AtomicOp::kCompareSwap) {
    target.compare_exchange_strong(before, swap_add);
  } else if (op == AtomicOp::kStore) {
    before = target.exchange(swap_add);
  } else {
    before = target.fetch_add(swap_add);
  }
  leave();
  original = before;
  return true;
}

uint64_t guarded_faults() { return g_faults.load(std::memory_order_relaxed); }

}  // namespace softrdma::engine
