// `softrdma run` and the sysfs and /dev view it gives the program it starts
// (tools/run/mount_view.h, docs/decisions/ucx.md): the files agree with the
// device's verbs, an unprivileged user keeps its uid, and where namespaces are
// forbidden or the view is turned off the program still runs, without it.
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Outcome {
  int status = -1;     // exit status, or -1 when killed
  std::string output;  // stdout and stderr together
};

// Runs `softrdma run ARGS...` (the build tree's, or `tool`) in a child; `prepare`
// runs in the child before exec.
Outcome run_tool(const std::vector<std::string>& args,
                 const std::function<void()>& prepare = [] {},
                 const std::string& tool = SOFTRDMA_TOOL) {
  std::vector<std::string> argv = {tool, "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    prepare();
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    std::perror("execv");
    _exit(126);
  }
  close(out[1]);
  Outcome result;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    result.output.append(buffer, size_t(n));
  }
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

const char* const kHasView =
    "test -c /dev/infiniband/uverbs0 && cat /sys/class/infiniband/softrdma0/ports/1/gid_attrs/"
    "types/0 || echo no-view";

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A seccomp filter that makes unshare(2) fail with EPERM, as on a machine whose
// policy forbids namespaces (container runtimes' default profiles do).
void forbid_unshare() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unshare, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    std::perror("seccomp");
    _exit(125);
  }
}

// Every file of the view says what this process's device answers through verbs,
// and /sys/class and /dev keep their original entries (sysfs_view_check.cc).
TEST(SysfsView, AgreesWithTheDevicesVerbs) {
  const Outcome r = run_tool({"--", SYSFS_VIEW_CHECK});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
}

// build/tools/softrdma and build/lib copied to a fresh directory every user may
// read and search (the tool finds lib/ beside its own directory); its path.
std::string readable_copy_of_tool() {
  namespace fs = std::filesystem;
  char templ[] = "/tmp/softrdma-run-XXXXXX";
  if (mkdtemp(templ) == nullptr) return {};
  const fs::path root = templ;
  const fs::path built = fs::path(SOFTRDMA_TOOL);
  std::error_code ec;
  fs::create_directory(root / "tools", ec);
  fs::copy(built, root / "tools" / built.filename(), ec);
  fs::copy(built.parent_path().parent_path() / "lib", root / "lib", fs::copy_options::recursive, ec);
  if (ec) return {};
  for (const fs::path& dir : {root, root / "tools", root / "lib"})
    fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec, ec);
  return ec ? std::string() : (root / "tools" / built.filename()).string();
}

// Without privileges the view comes from a user namespace: the program runs as
// the same uid and gid, and still sees the device's files.
TEST(SysfsView, AnUnprivilegedUserKeepsItsIdentity) {
  const uid_t uid = geteuid() == 0 ? 65534 : geteuid();
  const gid_t gid = geteuid() == 0 ? 65534 : getegid();
  // As root, the test becomes nobody, who may not reach the build tree (a checkout
  // under /root): it runs a copy of the tool and its lib/ that anyone can read.
  const std::string tool = geteuid() == 0 ? readable_copy_of_tool() : SOFTRDMA_TOOL;
  ASSERT_FALSE(tool.empty());
  const Outcome r = run_tool({"--", "/bin/sh", "-c", std::string("id -u; id -g; ") + kHasView},
                             [&] {
                               if (geteuid() != 0) return;
                               // An address of nobody's own: root's processes of
                               // the suite hold the shared ones (DESIGN.md §6).
                               unsetenv("SOFTRDMA_ADDR");
                               setenv("SOFTRDMA_SHARE_ADDRESS", "0", 1);
                               if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 ||
                                   setuid(uid) != 0)
                                 _exit(124);
                             }, tool);
  if (tool != SOFTRDMA_TOOL) std::filesystem::remove_all(std::filesystem::path(tool).parent_path().parent_path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, std::to_string(uid) + "\n" + std::to_string(gid) + "\nRoCE v2\n");
}

// Where namespaces are forbidden, one line says so and the program runs anyway.
TEST(SysfsView, FallsBackWithOneNoticeWhereNamespacesAreForbidden) {
  const Outcome r = run_tool({"--", "/bin/sh", "-c", kHasView}, forbid_unshare);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("no-view"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "softrdma: running without the sysfs view (unshare("), 1u) << r.output;
  EXPECT_EQ(count(r.output, "\n"), 2u) << r.output;  // the notice and the program's line
}

// SOFTRDMA_SYSFS_VIEW=off and --no-sysfs-view turn the view off, silently.
TEST(SysfsView, TurnedOffBySettingOrFlag) {
  const Outcome by_flag = run_tool({"--no-sysfs-view", "--", "/bin/sh", "-c", kHasView});
  EXPECT_EQ(by_flag.status, 0);
  EXPECT_EQ(by_flag.output, "no-view\n");
  const Outcome by_setting = run_tool({"--", "/bin/sh", "-c", kHasView},
                                      [] { setenv("SOFTRDMA_SYSFS_VIEW", "off", 1); });
  EXPECT_EQ(by_setting.status, 0);
  EXPECT_EQ(by_setting.output, "no-view\n");
}

// A malformed setting is named; the program still runs (without the view).
TEST(SysfsView, AMalformedSettingIsNamed) {
  const Outcome r = run_tool({"--", "/bin/sh", "-c", kHasView},
                             [] { setenv("SOFTRDMA_SYSFS_VIEW", "maybe", 1); });
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("SOFTRDMA_SYSFS_VIEW must be \"on\" or \"off\", not \"maybe\""),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("no-view"), std::string::npos) << r.output;
}

// The view is the program's alone: the host's /sys/class is unchanged.
TEST(SysfsView, TheHostDoesNotSeeIt) {
  const Outcome r = run_tool({"--", "/bin/true"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(access("/sys/class/infiniband/softrdma0", F_OK), 0);
}

}  // namespace
