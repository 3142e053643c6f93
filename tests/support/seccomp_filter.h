// A seccomp filter for tests of the same-host path's fallback (issue 15): the
// process (and its children) get ENOSYS from process_vm_readv/writev, as under
// Docker's default profile on older kernels. Irreversible: call it in a child.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>

namespace softrdma::testing_support {

// Installs `filter` for this process and its children (no new privileges first,
// which an unprivileged process needs for a filter).
inline bool install_filter(sock_filter* filter, unsigned short length) {
  sock_fprog program{length, filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

inline bool forbid_cross_memory_attach() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
  };
  return install_filter(filter, sizeof filter / sizeof filter[0]);
}

// The same for unshare(2) (EPERM), as under Docker's default profile without
// CAP_SYS_ADMIN: `softrdma run` cannot make its namespaces.
inline bool forbid_unshare() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  return install_filter(filter, sizeof filter / sizeof filter[0]);
}

}  // namespace softrdma::testing_support
