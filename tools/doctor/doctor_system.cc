// The kernel's side of `softrdma doctor`: namespaces (the sysfs view), cross-memory
// attach (the same-host path), /dev/shm and the memlock limit. Each probe that
// changes the process (unshare, prctl) runs in a child, so the doctor itself stays
// as it was.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "doctor/doctor.h"
#include "doctor/doctor_text.h"
#include "run/device_query.h"
#include "run/mount_view.h"
#include "run/sysfs_files.h"
#include "samehost/host.h"
#include "samehost/process_memory.h"

namespace softrdma::tools {
namespace {

// Runs `body` in a forked child and returns what it wrote; "" when the child wrote
// nothing or died. The child never returns into the doctor.
std::string answer_of_child(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    const std::string answer = body();
    (void)!write(fds[1], answer.data(), answer.size());
    _exit(0);
  }
  close(fds[1]);
  std::string answer;
  char buf[512];
  ssize_t n;
  while (child > 0 && (n = read(fds[0], buf, sizeof buf)) > 0) answer.append(buf, size_t(n));
  close(fds[0]);
  if (child > 0) waitpid(child, nullptr, 0);
  return answer;
}

// Why the view may be refused: a root that is not a mount point, else the
// settings that refuse user namespaces.
std::string namespace_advice(const std::string& error) {
  // mount(2) refuses to change the propagation of what is not a mount point:
  // in a chroot whose directory was not mounted on itself, "/" is not one.
  if (error.find("private") != std::string::npos && error.find("Invalid argument") != std::string::npos)
    return "this process's / is not a mount point (a chroot): bind-mount the root directory onto "
           "itself before chroot (mount --bind DIR DIR), or use a container";
  if (read_first_line("/proc/sys/kernel/unprivileged_userns_clone") == "0")
    return "unprivileged user namespaces are off: sysctl kernel.unprivileged_userns_clone=1";
  if (read_first_line("/proc/sys/user/max_user_namespaces") == "0")
    return "user namespaces are off: sysctl user.max_user_namespaces=15000";
  if (read_first_line("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1")
    return "AppArmor restricts user namespaces: sysctl "
           "kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for the program";
  return "a container's seccomp profile may forbid unshare (Docker's default does without "
         "CAP_SYS_ADMIN): allow unshare and mount, or set SOFTRDMA_SYSFS_VIEW=off";
}

// Two children: the target does what a softrdma process does (names its tracers
// under Yama scope 1) and publishes a value; its sibling attaches as a peer would.
std::string reach_between_siblings() {
  static volatile uint64_t probe = 0;
  probe = 0x736f667472646d61ull ^ uint64_t(getpid());
  int ready[2];
  if (pipe(ready) != 0) return "no pipe for the probe";
  const pid_t target = fork();
  if (target == 0) {
    close(ready[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a doctor killed meanwhile
    samehost::allow_same_user_peers();
    (void)!write(ready[1], "r", 1);
    pause();  // until the doctor kills it
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  const bool up = target > 0 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  std::string answer = "the probe could not start";
  if (up) {
    answer = answer_of_child([&] {
      samehost::Reach why = samehost::Reach::kYes;
      samehost::ProcessMemory::attach(target, uint64_t(uintptr_t(&probe)), probe, why);
      return std::string(samehost::describe(why));
    });
  }
  if (target > 0) {
    kill(target, SIGKILL);
    waitpid(target, nullptr, 0);
  }
  return answer;
}

}  // namespace

Finding check_sysfs_view(const DeviceSnapshot* device) {
  Finding f{"sysfs view", Verdict::kOk, "", ""};
  if (device == nullptr) {
    f.verdict = Verdict::kNote;
    f.found = "not tried: the device did not open (above)";
    return f;
  }
  const std::string error = answer_of_child([&] {
    std::string why;
    return enter_view(class_files(*device), device->dev_name, why) ? std::string() : why;
  });
  if (error.empty()) {
    f.found = "`softrdma run` can show programs /sys/class/infiniband/" + device->name +
              " and /dev/infiniband/" + device->dev_name +
              " (a mount namespace of their own), as UCX needs to find the device";
    return f;
  }
  f.verdict = Verdict::kNote;
  f.found = "`softrdma run` cannot make the view (" + error +
            "): programs that find devices through ibv_get_device_list work, UCX does not "
            "see the device";
  f.advice = namespace_advice(error);
  return f;
}

Finding check_same_host() {
  Finding f{"same-host path", Verdict::kOk, "", ""};
  const std::string yama = read_first_line("/proc/sys/kernel/yama/ptrace_scope");
  const std::string seccomp = status_field("Seccomp");
  const std::string context =
      "Yama ptrace_scope " + (yama.empty() ? std::string("absent") : yama) + ", seccomp " +
      (seccomp == "0" ? std::string("off") : "mode " + seccomp);
  // A target and an attacher that are siblings, not parent and child: scope 1
  // admits descendants, so only siblings show what two programs of a user meet.
  const std::string reach = reach_between_siblings();
  if (reach == samehost::describe(samehost::Reach::kYes)) {
    f.found = "processes of this user on this host place data in each other's memory "
              "(cross-memory attach; " + context + ")";
    return f;
  }
  f.verdict = Verdict::kNote;
  f.found = "peers on this host fall back to UDP loopback, several times slower: " + reach +
            " (" + context + ")";
  if (yama == "2" || yama == "3")
    f.advice = "sysctl kernel.yama.ptrace_scope=1 (softrdma then names its peers as tracers)";
  else if (seccomp != "0")
    f.advice = "allow process_vm_readv and process_vm_writev in the seccomp profile "
               "(Docker's default allows them from 19.03 on kernels >= 4.8)";
  else
    f.advice = "run the processes as the same user, and not made undumpable";
  return f;
}

Finding check_dev_shm() {
  Finding f{"/dev/shm", Verdict::kOk, "", ""};
  struct statfs fs {};
  const std::string name = "/dev/shm/softrdma-doctor-" + std::to_string(getpid());
  const int fd = open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
  const int open_errno = errno;
  if (fd >= 0) {
    close(fd);
    unlink(name.c_str());
  }
  if (fd < 0 || statfs("/dev/shm", &fs) != 0) {
    f.verdict = Verdict::kNote;
    f.found = std::string("cannot create a file there (") + std::strerror(open_errno) +
              "): no `softrdma status` counters and no same-host path (UDP instead)";
    f.advice = "mount a tmpfs on /dev/shm writable by the user (a container: --shm-size)";
    return f;
  }
  const unsigned long long free_mib =
      (unsigned long long)fs.f_bavail * (unsigned long long)fs.f_bsize >> 20;
  f.found = std::string(fs.f_type == TMPFS_MAGIC ? "a tmpfs" : "not a tmpfs (still usable)") +
            ", writable, " + std::to_string(free_mib) +
            " MiB free: status segments and same-host node segments live there";
  if (free_mib < 16) {
    f.verdict = Verdict::kNote;
    f.advice = "little room: give /dev/shm more (a container: --shm-size=256m)";
  }
  return f;
}

Finding check_memlock() {
  rlimit limit{};
  getrlimit(RLIMIT_MEMLOCK, &limit);
  const std::string value = limit.rlim_cur == RLIM_INFINITY
                                ? std::string("unlimited")
                                : std::to_string(limit.rlim_cur >> 10) + " KiB";
  return {"memlock limit", Verdict::kOk,
          value + ": softrdma pins no memory, so it does not bound memory registration "
                  "here (on an RDMA NIC it would; raise it there with ulimit -l)",
          ""};
}

}  // namespace softrdma::tools
