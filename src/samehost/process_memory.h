// Another process's memory, reached by cross-memory attach (process_vm_readv(2),
// process_vm_writev(2)): one copy between the two address spaces, made by the
// calling thread while the other process need not run (docs/decisions/same-host.md).
//
// The kernel allows it when the caller may ptrace the target
// (PTRACE_MODE_ATTACH_REALCREDS): the same user, not made undumpable, and Yama's
// ptrace_scope 0 (or 1 with the target having named its tracers,
// PR_SET_PTRACER). A seccomp filter may forbid the calls (ENOSYS or EPERM).
// attach() tries once and says which of these stood in the way.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace softrdma::samehost {

// Why cross-memory attach to a process is (not) possible.
enum class Reach : uint8_t {
  kYes,
  kNotPermitted,  // EPERM: another user, ptrace_scope, an undumpable target
  kNoSyscall,     // ENOSYS: a seccomp profile forbids process_vm_readv
  kGone,          // ESRCH: no such process
  kWrongProcess,  // the probe read something else: the pid was reused
  kDisabled,      // SOFTRDMA_TRANSPORT=udp
};
const char* describe(Reach reach);

class ProcessMemory {
 public:
  // Attaches to `pid` and proves it is the process that published `probe_value`
  // at `probe_addr` in its memory. Null and the reason when it cannot.
  static std::unique_ptr<ProcessMemory> attach(pid_t pid, uint64_t probe_addr,
                                               uint64_t probe_value, Reach& why);
  ~ProcessMemory();
  ProcessMemory(const ProcessMemory&) = delete;
  ProcessMemory& operator=(const ProcessMemory&) = delete;

  pid_t pid() const { return pid_; }
  // Copies the `local` buffers, in order, to / from the `remote` ranges, in order
  // (the two lists may cut the bytes differently). 0, or the errno: EFAULT when a
  // remote range is not mapped (a region unmapped without ibv_dereg_mr), ESRCH
  // when the process is gone.
  int write(std::span<const iovec> local, std::span<const iovec> remote) const;
  int read(std::span<const iovec> local, std::span<const iovec> remote) const;
  // False once the process has exited (its pidfd became readable).
  bool alive() const;
  // The same, asked of the kernel at most once a millisecond (a system call per
  // store would cost what shared pages save): for accesses that need no system
  // call, which would otherwise never learn that the process died.
  bool alive_lately() const;
  // A copy of its descriptor `fd` here (pidfd_getfd(2), Linux 5.6: allowed on the
  // same terms as cross-memory attach); -1 when it cannot be had.
  int copy_descriptor(int fd) const;
  // A pidfd (pidfd_open(2)) for watching its exit, or -1 on kernels without it.
  int pidfd() const { return pidfd_; }

 private:
  ProcessMemory(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  int transfer(bool write, std::span<const iovec> local, std::span<const iovec> remote) const;

  pid_t pid_;
  int pidfd_;
  mutable std::atomic<int64_t> alive_checked_ns_{0};
  mutable std::atomic<bool> gone_{false};
};

}  // namespace softrdma::samehost
