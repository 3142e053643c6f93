// `softrdma doctor` (tools/doctor/) on this machine's real conditions: the real
// command, run as a user would, its verdicts compared with what this test finds
// by its own means (its own unshare, its own process_vm_readv between siblings,
// its own getrlimit). Conditions the machine does not have by default are made
// for real, for the doctor's process only: a seccomp filter that forbids
// cross-memory attach or unshare, a UDP port 4791 this test holds, an address
// that is not the host's.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "runtime/open_device.h"
#include "runtime/settings.h"
#include "support/seccomp_filter.h"

namespace {

struct Finding {
  std::string verdict, text;
};

struct DoctorRun {
  int exit_code = -1;
  std::string out;
  std::map<std::string, Finding> findings;  // by topic
};

// Its report: "VERDICT  TOPIC  text", the verdict in columns 0-8 and the topic
// in 9-24; wrapped lines (and "change:" lines) start with spaces and continue it.
std::map<std::string, Finding> parse(const std::string& out) {
  std::map<std::string, Finding> findings;
  std::istringstream in(out);
  std::string line, topic;
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    return s;
  };
  while (std::getline(in, line)) {
    if (line.size() < 26 || line.rfind("softrdma doctor", 0) == 0) continue;
    if (line[0] != ' ') {
      topic = trim(line.substr(9, 16));
      findings[topic] = {trim(line.substr(0, 9)), trim(line.substr(25))};
    } else if (!topic.empty()) {
      findings[topic].text.append(" ").append(trim(line));
    }
  }
  return findings;
}

// Runs `softrdma doctor` with `environment` added and `prepare` run in the child
// just before exec (a seccomp filter, say).
DoctorRun run_doctor(const std::map<std::string, std::string>& environment = {},
                     const std::function<bool()>& prepare = {}) {
  DoctorRun run;
  int fds[2];
  if (pipe(fds) != 0) return run;
  const pid_t child = fork();
  if (child == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    if (prepare && !prepare()) _exit(125);
    execl(SOFTRDMA_TOOL, SOFTRDMA_TOOL, "doctor", nullptr);
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) run.out.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.findings = parse(run.out);
  return run;
}

// The test's own probe: can a child enter a mount namespace (with a user
// namespace when unprivileged), as `softrdma run` does?
bool namespaces_allowed() {
  const pid_t child = fork();
  if (child == 0) {
    if (unshare(CLONE_NEWNS) == 0) _exit(0);
    _exit(unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The test's own probe: can one child read a sibling's memory with
// process_vm_readv? (Siblings: Yama's scope 1 admits descendants only.)
bool siblings_can_attach() {
  static volatile long value = 0x5eed;
  int ready[2];
  if (pipe(ready) != 0) return false;
  const pid_t target = fork();
  if (target == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0) { /* no Yama: fine */ }
    (void)!write(ready[1], "r", 1);
    pause();
    _exit(0);
  }
  char byte;
  close(ready[1]);
  (void)!read(ready[0], &byte, 1);
  close(ready[0]);
  const pid_t reader = fork();
  if (reader == 0) {
    long seen = 0;
    iovec local{&seen, sizeof seen};
    iovec remote{const_cast<long*>(&value), sizeof value};
    _exit(process_vm_readv(target, &local, 1, &remote, 1, 0) == sizeof seen && seen == value ? 0 : 1);
  }
  int status = 0;
  waitpid(reader, &status, 0);
  kill(target, SIGKILL);
  waitpid(target, nullptr, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(Doctor, OnThisMachineEveryVerdictAgreesWithTheTestsOwnProbe) {
  const DoctorRun run = run_doctor();
  for (const char* topic : {"address", "device", "sysfs view", "same-host path", "/dev/shm",
                            "memlock limit", "rdma-core", "UCX", "libfabric"})
    ASSERT_EQ(run.findings.count(topic), 1u) << "no finding on " << topic << "\n" << run.out;
  EXPECT_EQ(run.exit_code, run.out.find("\nPROBLEM") == std::string::npos ? 0 : 1) << run.out;
  EXPECT_EQ(run.findings.at("device").verdict, "ok") << run.out;
  EXPECT_EQ(run.findings.at("sysfs view").verdict, namespaces_allowed() ? "ok" : "note") << run.out;
  EXPECT_EQ(run.findings.at("same-host path").verdict, siblings_can_attach() ? "ok" : "note")
      << run.out;
  EXPECT_EQ(run.findings.at("/dev/shm").verdict, access("/dev/shm", W_OK) == 0 ? "ok" : "note")
      << run.out;
  rlimit memlock{};
  getrlimit(RLIMIT_MEMLOCK, &memlock);
  const std::string limit = memlock.rlim_cur == RLIM_INFINITY
                                ? "unlimited"
                                : std::to_string(memlock.rlim_cur >> 10) + " KiB";
  EXPECT_EQ(run.findings.at("memlock limit").text.rfind(limit, 0), 0u) << run.out;
  const bool ucx = access("/usr/lib/" SOFTRDMA_MULTIARCH "/libucp.so.0", F_OK) == 0;
  EXPECT_EQ(run.findings.at("UCX").text.find("not installed") == std::string::npos, ucx) << run.out;
}

TEST(Doctor, ASeccompFilterOnCrossMemoryAttachIsANoteWithItsFix) {
  const DoctorRun run = run_doctor({}, softrdma::testing_support::forbid_cross_memory_attach);
  ASSERT_EQ(run.findings.count("same-host path"), 1u) << run.out;
  const Finding& f = run.findings.at("same-host path");
  EXPECT_EQ(f.verdict, "note") << run.out;
  EXPECT_NE(f.text.find("fall back to UDP"), std::string::npos) << run.out;
  EXPECT_NE(f.text.find("seccomp mode 2"), std::string::npos) << run.out;
  EXPECT_NE(f.text.find("process_vm_readv and process_vm_writev"), std::string::npos) << run.out;
  EXPECT_EQ(run.exit_code, 0) << "a slower path is not a problem\n" << run.out;
}

TEST(Doctor, ForbiddenNamespacesAreANoteSayingWhatUcxLoses) {
  const DoctorRun run = run_doctor({}, softrdma::testing_support::forbid_unshare);
  ASSERT_EQ(run.findings.count("sysfs view"), 1u) << run.out;
  const Finding& f = run.findings.at("sysfs view");
  EXPECT_EQ(f.verdict, "note") << run.out;
  EXPECT_NE(f.text.find("UCX does not see the device"), std::string::npos) << run.out;
  EXPECT_NE(f.text.find("change:"), std::string::npos) << run.out;
}

TEST(Doctor, APortThisTestHoldsIsAProblemNamingWhoMayHoldIt) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(4791);
  inet_pton(AF_INET, "127.0.0.77", &at.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at), 0) << "cannot hold the port";
  const DoctorRun run =
      run_doctor({{"SOFTRDMA_ADDR", "127.0.0.77"}, {"SOFTRDMA_SHARE_ADDRESS", "0"}});
  // Shared (the default), the port is still refused: this socket did not join a group.
  const DoctorRun shared =
      run_doctor({{"SOFTRDMA_ADDR", "127.0.0.77"}, {"SOFTRDMA_SHARE_ADDRESS", ""}});
  close(fd);
  ASSERT_EQ(run.findings.count("address"), 1u) << run.out;
  EXPECT_EQ(run.findings.at("address").verdict, "PROBLEM") << run.out;
  EXPECT_NE(run.findings.at("address").text.find("another process holds it"), std::string::npos)
      << run.out;
  EXPECT_EQ(run.exit_code, 1) << run.out;
  ASSERT_EQ(shared.findings.count("address"), 1u) << shared.out;
  EXPECT_EQ(shared.findings.at("address").verdict, "PROBLEM") << shared.out;
  EXPECT_NE(shared.findings.at("address").text.find("kernel RoCE device holds it"),
            std::string::npos)
      << shared.out;
}

// Issue 27: an address this user's devices serve can be shared (SOFTRDMA_SHARE_ADDRESS=1,
// the default: the doctor counts them in the address's registry, without joining
// their group), not taken alone (=0); iWARP holds no UDP port at all.
TEST(Doctor, AnAddressThisUsersDevicesServeCanBeSharedAndIwarpNeedsNone) {
  softrdma::runtime::Settings settings;
  settings.address = "127.0.0.78";
  settings.same_host = false;
  std::string error;
  auto device = softrdma::runtime::OpenDevice::open(settings, error);
  ASSERT_NE(device, nullptr) << error;
  const DoctorRun shared =
      run_doctor({{"SOFTRDMA_ADDR", "127.0.0.78"}, {"SOFTRDMA_SHARE_ADDRESS", "1"}});
  const DoctorRun alone =
      run_doctor({{"SOFTRDMA_ADDR", "127.0.0.78"}, {"SOFTRDMA_SHARE_ADDRESS", "0"}});
  const DoctorRun iwarp = run_doctor({{"SOFTRDMA_ADDR", "127.0.0.78"}, {"SOFTRDMA_WIRE", "iwarp"}});
  device.reset();
  ASSERT_EQ(shared.findings.count("address"), 1u) << shared.out;
  EXPECT_EQ(shared.findings.at("address").verdict, "ok") << shared.out;
  EXPECT_NE(shared.findings.at("address").text.find("shared by "), std::string::npos)
      << shared.out;
  EXPECT_NE(shared.findings.at("address").text.find("of this user"), std::string::npos)
      << shared.out;
  ASSERT_EQ(alone.findings.count("address"), 1u) << alone.out;
  EXPECT_EQ(alone.findings.at("address").verdict, "PROBLEM") << alone.out;
  EXPECT_NE(alone.findings.at("address").text.find("SOFTRDMA_SHARE_ADDRESS=0"), std::string::npos)
      << alone.out;
  ASSERT_EQ(iwarp.findings.count("address"), 1u) << iwarp.out;
  EXPECT_EQ(iwarp.findings.at("address").verdict, "ok") << iwarp.out;
  EXPECT_NE(iwarp.findings.at("address").text.find("no UDP port"), std::string::npos) << iwarp.out;
}

// Nothing set (an empty variable is unset): the host's address, named, shared.
TEST(Doctor, NothingSetNamesTheHostsAddress) {
  const DoctorRun run = run_doctor({{"SOFTRDMA_ADDR", ""}, {"SOFTRDMA_SHARE_ADDRESS", ""}});
  ASSERT_EQ(run.findings.count("address"), 1u) << run.out;
  const Finding& f = run.findings.at("address");
  EXPECT_NE(f.text.find("the host's address " + softrdma::runtime::Settings::host_address() +
                        " (SOFTRDMA_ADDR unset)"),
            std::string::npos)
      << run.out;
  // Free, or already served by this user's processes (a test of the suite running
  // beside this one may hold a device on the host's address): either way it can
  // be shared, in the doctor's two wordings.
  if (f.verdict == "ok") {
    EXPECT_TRUE(f.text.find("can be shared") != std::string::npos ||
                f.text.find("shared by") != std::string::npos)
        << run.out;
  }
}

TEST(Doctor, AnAddressThatIsNotTheHostsIsAProblem) {
  // 198.51.100.0/24 (TEST-NET-2, RFC 5737) is never a host's address.
  const DoctorRun run = run_doctor({{"SOFTRDMA_ADDR", "198.51.100.77"}});
  ASSERT_EQ(run.findings.count("address"), 1u) << run.out;
  EXPECT_EQ(run.findings.at("address").verdict, "PROBLEM") << run.out;
  EXPECT_NE(run.findings.at("address").text.find("not an address of this host"), std::string::npos)
      << run.out;
  EXPECT_EQ(run.exit_code, 1) << run.out;
}

TEST(Doctor, UcxSettingsThatLeaveOutVerbsAreNamed) {
  if (access("/usr/lib/" SOFTRDMA_MULTIARCH "/libucp.so.0", F_OK) != 0) {
    const DoctorRun run = run_doctor({{"UCX_TLS", "tcp"}});
    EXPECT_NE(run.findings.at("UCX").text.find("not installed"), std::string::npos) << run.out;
    return;
  }
  const DoctorRun run = run_doctor({{"UCX_TLS", "tcp,self"}});
  EXPECT_EQ(run.findings.at("UCX").verdict, "note") << run.out;
  EXPECT_NE(run.findings.at("UCX").text.find("UCX_TLS=tcp,self leaves out"), std::string::npos)
      << run.out;
  const DoctorRun fine = run_doctor({{"UCX_TLS", "rc_verbs,ud_verbs"}});
  EXPECT_EQ(fine.findings.at("UCX").verdict, "ok") << fine.out;
}

}  // namespace
