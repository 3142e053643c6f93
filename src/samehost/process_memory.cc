#include "samehost/process_memory.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <vector>

namespace softrdma::samehost {

const char* describe(Reach reach) {
  switch (reach) {
    case Reach::kYes: return "cross-memory attach works";
    case Reach::kNotPermitted:
      return "cross-memory attach is not permitted (another user, Yama ptrace_scope, or an "
             "undumpable process)";
    case Reach::kNoSyscall: return "process_vm_readv is forbidden here (a seccomp profile)";
    case Reach::kGone: return "the process has exited";
    case Reach::kWrongProcess: return "the process is not the one that published the segment";
    case Reach::kDisabled: return "SOFTRDMA_TRANSPORT=udp";
  }
  return "?";
}

namespace {

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return int(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

size_t total(std::span<const iovec> list) {
  size_t n = 0;
  for (const iovec& v : list) n += v.iov_len;
  return n;
}

// `list` without its first `skip` bytes.
std::vector<iovec> advanced(std::span<const iovec> list, size_t skip) {
  std::vector<iovec> out;
  for (const iovec& v : list) {
    if (skip >= v.iov_len) {
      skip -= v.iov_len;
      continue;
    }
    out.push_back({static_cast<char*>(v.iov_base) + skip, v.iov_len - skip});
    skip = 0;
  }
  return out;
}

}  // namespace

std::unique_ptr<ProcessMemory> ProcessMemory::attach(pid_t pid, uint64_t probe_addr,
                                                     uint64_t probe_value, Reach& why) {
  uint64_t seen = 0;
  iovec local{&seen, sizeof seen};
  iovec remote{reinterpret_cast<void*>(probe_addr), sizeof seen};
  if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != ssize_t(sizeof seen)) {
    why = errno == ENOSYS ? Reach::kNoSyscall
          : errno == ESRCH ? Reach::kGone
          : errno == EFAULT ? Reach::kWrongProcess
                            : Reach::kNotPermitted;
    return nullptr;
  }
  if (seen != probe_value) {
    why = Reach::kWrongProcess;
    return nullptr;
  }
  why = Reach::kYes;
  return std::unique_ptr<ProcessMemory>(new ProcessMemory(pid, open_pidfd(pid)));
}

ProcessMemory::~ProcessMemory() {
  if (pidfd_ >= 0) close(pidfd_);
}

bool ProcessMemory::alive() const {
  if (pidfd_ < 0) return kill(pid_, 0) == 0 || errno != ESRCH;
  pollfd p{pidfd_, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

bool ProcessMemory::alive_lately() const {
  if (gone_.load(std::memory_order_relaxed)) return false;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const int64_t now = int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  if (now - alive_checked_ns_.load(std::memory_order_relaxed) < 1'000'000) return true;
  alive_checked_ns_.store(now, std::memory_order_relaxed);
  if (alive()) return true;
  gone_.store(true, std::memory_order_relaxed);
  return false;
}

int ProcessMemory::write(std::span<const iovec> local, std::span<const iovec> remote) const {
  return transfer(true, local, remote);
}

int ProcessMemory::read(std::span<const iovec> local, std::span<const iovec> remote) const {
  return transfer(false, local, remote);
}

// The kernel may stop at a remote range that faults and report the bytes before it:
// the rest is tried again, so the errno is the one of the range that really fails.
int ProcessMemory::transfer(bool write, std::span<const iovec> local,
                            std::span<const iovec> remote) const {
  const size_t want = total(local);
  if (want != total(remote) || local.size() > IOV_MAX || remote.size() > IOV_MAX) return EINVAL;
  size_t done = 0;
  std::vector<iovec> rest_local, rest_remote;
  while (done < want) {
    ssize_t n = write ? process_vm_writev(pid_, local.data(), local.size(), remote.data(),
                                          remote.size(), 0)
                      : process_vm_readv(pid_, local.data(), local.size(), remote.data(),
                                         remote.size(), 0);
    if (n < 0) return errno;
    if (n == 0) return EFAULT;
    done += size_t(n);
    if (done == want) break;
    std::vector<iovec> next_local = advanced(local, size_t(n));
    std::vector<iovec> next_remote = advanced(remote, size_t(n));
    rest_local.swap(next_local);
    rest_remote.swap(next_remote);
    local = rest_local;
    remote = rest_remote;
  }
  return 0;
}

int ProcessMemory::copy_descriptor(int fd) const {
#ifdef SYS_pidfd_getfd
  if (pidfd_ < 0 || fd < 0) return -1;
  return int(syscall(SYS_pidfd_getfd, pidfd_, fd, 0));
#else
  (void)fd;
  return -1;
#endif
}

}  // namespace softrdma::samehost
