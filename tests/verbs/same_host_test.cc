// The same-host path through the verbs API, between processes (issue 15,
// docs/decisions/same-host.md): where cross-memory attach is refused the wire
// carries the traffic and the process says why in one line; a peer killed in the
// middle of a stream of WRITEs ends the survivor's QP in bounded time and leaves
// nothing in /dev/shm. Each child sets SOFTRDMA_TRANSPORT=auto itself: these tests
// are about the same-host path whatever the suite's variant.
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "support/seccomp_filter.h"
#include "verbs/same_host_support.h"
#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

// What a child wrote on stderr, and its exit code, once it ended.
struct ChildResult {
  int exit_code = -1;
  std::string stderr_text;
};

template <typename Body>
ChildResult run_child(Body body) {
  int err[2];
  if (pipe(err) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(err[0]);
    dup2(err[1], STDERR_FILENO);
    setenv("SOFTRDMA_TRANSPORT", "auto", 1);
    _exit(body());
  }
  close(err[1]);
  ChildResult r;
  char buffer[4096];
  for (ssize_t n; (n = read(err[0], buffer, sizeof buffer)) > 0;) r.stderr_text.append(buffer, size_t(n));
  close(err[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

// A 4 KiB WRITE from a to b of a pair inside this process; 0 when the bytes arrived.
int write_through_a_pair() {
  Pair pair;
  if (pair.a.qp == nullptr || pair.b.qp == nullptr) return 10;
  for (size_t i = 0; i < 4096; ++i) pair.a.buf[i] = uint8_t(i * 7);
  ibv_sge sge{pair.a.addr(0), 4096, pair.a.mr->lkey};
  if (post_send(pair.a.qp, IBV_WR_RDMA_WRITE, sge, 1, pair.b.addr(0), pair.b.mr->rkey) != 0)
    return 11;
  const auto wcs = poll_n(pair.a.cq, 1);
  if (wcs.size() != 1 || wcs[0].status != IBV_WC_SUCCESS) return 12;
  return std::memcmp(pair.a.buf.data(), pair.b.buf.data(), 4096) == 0 ? 0 : 13;
}

using testing_support::forbid_cross_memory_attach;

TEST(SameHost, ASeccompProfileThatForbidsItFallsBackToUdpAndSaysSoOnce) {
  const ChildResult r = run_child([] {
    if (!forbid_cross_memory_attach()) return 20;
    const int first = write_through_a_pair();
    return first != 0 ? first : write_through_a_pair();
  });
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::string line = "reached by UDP: process_vm_readv is forbidden here (a seccomp profile)";
  const size_t at = r.stderr_text.find(line);
  EXPECT_NE(at, std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find(line, at + 1), std::string::npos) << "said once\n" << r.stderr_text;
}

// Without the restriction the same pair says nothing: the line above is about it.
TEST(SameHost, APermittedPairSaysNothing) {
  const ChildResult r = run_child(write_through_a_pair);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find("reached by UDP"), std::string::npos) << r.stderr_text;
}

std::string gid_hex(const ibv_gid& gid) {
  char text[33];
  for (int i = 0; i < 16; ++i) std::snprintf(text + 2 * i, 3, "%02x", gid.raw[i]);
  return text;
}

// A child killed, and reaped, once: by now(), or at the latest when this ends.
struct Killed {
  pid_t pid;
  bool done = false;
  void now() {
    if (std::exchange(done, true)) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  ~Killed() { now(); }
};

// A target killed while its peer WRITEs into it: the survivor's QP ends with an
// error completion, the rest flushed, in bounded time; and what the dead process
// had in /dev/shm is gone once the survivor noticed.
TEST(SameHost, APeerKilledInTheMiddleOfWritesEndsTheQpAndLeavesNothing) {
  setenv("SOFTRDMA_TRANSPORT", "auto", 1);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const pid_t test_process = getpid();
  const pid_t target = fork();
  if (target == 0) {
    // Gone with the test process, whatever ends it (a ctest timeout's SIGKILL).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != test_process) _exit(1);
    close(sv[0]);
    Ends ends;
    Endpoint other{};
    if (!ends.open() || !connect_over(sv[1], ends, other)) _exit(1);
    char ready = 'r';
    (void)!write(sv[1], &ready, 1);
    for (;;) pause();
  }
  close(sv[1]);
  // The target dies on every way out of this test, a failed ASSERT's too: alive,
  // it would hold the test's output pipe, and ctest waits for that to close.
  Killed killed{target};
  Ends ends;
  ASSERT_TRUE(ends.open());
  Endpoint other{};
  ASSERT_TRUE(connect_over(sv[0], ends, other));
  char ready;
  ASSERT_EQ(read(sv[0], &ready, 1), 1);
  // The node segment's name (samehost/node_segment.h): by network namespace and GID,
  // and on a shared address (the default) by the QPN's block too (host-rnic.md).
  struct stat netns {};
  ASSERT_EQ(stat("/proc/self/ns/net", &netns), 0);
  std::string node =
      "/dev/shm/softrdma-node-" + std::to_string(netns.st_ino) + "-" + gid_hex(other.gid);
  if (!std::filesystem::exists(node)) node += "-block" + std::to_string(other.qpn >> 14);
  ASSERT_TRUE(std::filesystem::exists(node)) << node;
  // The file, not the name: a process taking the dead one's slot later names its
  // own segment the same way.
  struct stat node_file {};
  ASSERT_EQ(stat(node.c_str(), &node_file), 0);

  ibv_sge sge{uint64_t(uintptr_t(ends.buf.data())), 4096, ends.mr->lkey};
  int posted = 0, completed = 0, errors = 0, completed_at_kill = 0;
  ibv_wc_status first_error = IBV_WC_SUCCESS;
  auto killed_at = std::chrono::steady_clock::time_point{};
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < guard && (errors == 0 || completed < posted)) {
    // At least 200, not exactly: one poll below may take several completions and
    // step over 200 (up to 16 are outstanding), and then the target lived on.
    if (completed >= 200 && killed_at == std::chrono::steady_clock::time_point{}) {
      killed.now();
      killed_at = std::chrono::steady_clock::now();
      completed_at_kill = completed;
    }
    if (errors == 0 && posted - completed < 16 &&
        post_send(ends.qp, IBV_WR_RDMA_WRITE, sge, uint64_t(posted), other.addr, other.rkey) == 0)
      ++posted;
    ibv_wc wc{};
    while (ibv_poll_cq(ends.cq, 1, &wc) == 1) {
      ++completed;
      if (wc.status != IBV_WC_SUCCESS && errors++ == 0) first_error = wc.status;
    }
  }
  ASSERT_GT(errors, 0) << "the survivor never noticed";
  EXPECT_EQ(first_error, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(completed, posted) << "every WRITE completed, the rest flushed";
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(ends.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
  const double noticed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("the survivor's QP ended %.1f ms after the kill (after %d completions)\n",
              noticed_ms, completed_at_kill);
  // As over the wire: the request the dead peer could not take was retried
  // retry_cnt (7) times before it failed, never failed at once (it would overtake
  // the completions of requests the peer took just before it died).
  EXPECT_EQ(own_engine_counter("host_peer_not_ready"), 8u);
  EXPECT_GT(own_engine_counter("host_mapped"), 0u) << "the WRITEs went by stores";
  struct stat now {};
  EXPECT_FALSE(stat(node.c_str(), &now) == 0 && now.st_ino == node_file.st_ino)
      << "the dead peer's node segment is gone";
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/softrdma-" + std::to_string(target) + "-softrdma0"))
      << "and its status segment";
  close(sv[0]);
}

// its WRITE goes over UDP, lands all the same, and it says why once.
TEST(SameHost, AnotherUsersProcessIsReachedByUdpAndSaysSo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a peer as another user (CI runs as root)";
  setenv("SOFTRDMA_TRANSPORT", "auto", 1);
  // Both with nothing set: this process serves the host's address, the other
  // user's cannot join it (DESIGN.md §6) and takes a loopback address of its own.
  struct Unset {
    const char* name;
    std::string saved;
    bool had = false;
    explicit Unset(const char* variable) : name(variable) {
      if (const char* v = getenv(name)) saved = v, had = true;
      unsetenv(name);
    }
    ~Unset() {
      if (had) setenv(name, saved.c_str(), 1);
    }
  } address("SOFTRDMA_ADDR"), share("SOFTRDMA_SHARE_ADDRESS");
  int sv[2], err[2], opened[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(pipe(err), 0);
  ASSERT_EQ(pipe(opened), 0);
  const pid_t writer = fork();
  if (writer == 0) {
    close(sv[0]);
    dup2(err[1], STDERR_FILENO);
    char byte = 0;
    if (read(opened[0], &byte, 1) != 1) _exit(6);  // this user's device holds the address
    const passwd* nobody = getpwnam("nobody");
    if (setgid(nobody != nullptr ? nobody->pw_gid : 65534) != 0 ||
        setuid(nobody != nullptr ? nobody->pw_uid : 65534) != 0)
      _exit(2);
    // The device closes (its segments go) before _exit, which runs no exit handler.
    const int code = [&] {
      Ends ends;
      Endpoint other{};
      if (!ends.open() || !connect_over(sv[1], ends, other)) return 3;
      for (size_t i = 0; i < 4096; ++i) ends.buf[i] = uint8_t(i * 13);
      ibv_sge sge{uint64_t(uintptr_t(ends.buf.data())), 4096, ends.mr->lkey};
      if (post_send(ends.qp, IBV_WR_RDMA_WRITE, sge, 1, other.addr, other.rkey) != 0) return 4;
      const auto wcs = poll_n(ends.cq, 1);
      return wcs.size() == 1 && wcs[0].status == IBV_WC_SUCCESS ? 0 : 5;
    }();
    _exit(code);
  }
  close(sv[1]);
  close(err[1]);
  Ends ends;
  ASSERT_TRUE(ends.open());
  ASSERT_EQ(write(opened[1], "o", 1), 1);
  close(opened[1]);
  close(opened[0]);
  Endpoint other{};
  ASSERT_TRUE(connect_over(sv[0], ends, other));
  std::string said;
  char buffer[4096];
  for (ssize_t n; (n = read(err[0], buffer, sizeof buffer)) > 0;) said.append(buffer, size_t(n));
  int status = 0;
  ASSERT_EQ(waitpid(writer, &status, 0), writer);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << said;
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(ends.buf[i], uint8_t(i * 13)) << i;
  EXPECT_NE(said.find("reached by UDP: its node segment belongs to another user"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("cannot be shared with this process"), std::string::npos) << said;
  close(sv[0]);
  close(err[0]);
}

}  // namespace
}  // namespace softrdma::verbs::testing
