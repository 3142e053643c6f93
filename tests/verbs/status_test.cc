// `softrdma status` shows a running process's device, QPs and live counters, and
// removes the segment of a process that was killed (issue 6 "Live counters";
// runtime/status_segment.h). A child process connects a pair of QPs and moves
// data, then waits; the test runs the real command, as a user would.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

std::string run_tool(const char* arguments) {
  std::string out;
  FILE* p = popen((std::string(SOFTRDMA_TOOL " ") + arguments + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, p)) out.append(buffer, n);
  pclose(p);
  return out;
}

std::string run_status() { return run_tool("status"); }

// One version (CMake's project version), said by `softrdma --version` and by the
// device's fw_ver as ibv_devinfo shows it (issue 17).
TEST(SoftrdmaVersion, TheCommandAndTheDeviceSayTheProjectsVersion) {
  const std::string expected = "softrdma " SOFTRDMA_PROJECT_VERSION;
  EXPECT_EQ(run_tool("--version"), expected + "\n");
  EXPECT_EQ(run_tool("version"), expected + "\n");
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  ASSERT_NE(list, nullptr);
  ASSERT_GT(count, 0);
  ibv_context* context = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  ASSERT_NE(context, nullptr);
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(context, &attr), 0);
  EXPECT_EQ(std::string(attr.fw_ver), expected);
  ibv_close_device(context);
}

// `softrdma env` (issue 17): after eval of its output, an unmodified Debian
// program (ibverbs-utils' ibv_devinfo) finds softrdma's device, and what
// LD_LIBRARY_PATH held before is kept after it.
TEST(SoftrdmaEnv, AfterEvalAnUnwrappedProgramFindsTheDevice) {
  const std::string out = run_tool(
      "env > /dev/null && LD_LIBRARY_PATH=/kept sh -c 'eval \"$(" SOFTRDMA_TOOL
      " env)\"; echo \"path=$LD_LIBRARY_PATH\"; ibv_devinfo'");
  EXPECT_NE(out.find("fw_ver:\t\t\t\tsoftrdma " SOFTRDMA_PROJECT_VERSION), std::string::npos) << out;
  EXPECT_NE(out.find(":/kept\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("path=/kept"), std::string::npos) << out;
}

// A UD QP on `side`'s context and PD, in RTS with Q_Key 0x11, its receive posted
// into the side's buffer at `offset`; null when something failed.
ibv_qp* make_ud(Side& side, size_t offset) {
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = side.cq;
  init.qp_type = IBV_QPT_UD;
  init.cap = {4, 4, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(side.pd, &init);
  if (qp == nullptr) return nullptr;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qkey = 0x11;
  int fail = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  attr.qp_state = IBV_QPS_RTR;
  fail |= ibv_modify_qp(qp, &attr, IBV_QP_STATE);
  attr.qp_state = IBV_QPS_RTS;
  fail |= ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
  fail |= post_recv(qp, {side.addr(offset), 4096, side.mr->lkey}, 7);
  return fail == 0 ? qp : nullptr;
}

// One datagram from `from` to `to` (on b's GID), received; false when it failed.
bool send_datagram(Pair& pair, ibv_qp* from, ibv_qp* to) {
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.sgid_index = 1;
  if (ibv_query_gid(pair.b.ctx, 1, 1, &attr.grh.dgid) != 0) return false;
  ibv_ah* ah = ibv_create_ah(pair.a.pd, &attr);
  if (ah == nullptr) return false;
  ibv_sge sge{pair.a.addr(8192), 64, pair.a.mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.ud = {ah, to->qp_num, 0x11};
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(from, &wr, &bad) == 0 && poll_n(pair.a.cq, 1).size() == 1 &&
         poll_n(pair.b.cq, 1).size() == 1;
}

// The child: a connected pair over `transport` (SOFTRDMA_TRANSPORT), one WRITE of
// 4 KiB completed, and a third QP towards a left in RTR (as perftest's
// ib_write_bw server leaves its own), and a UD QP of a that sent one datagram to
// one of b; then the four QPNs to the parent, then it waits to be killed.
[[noreturn]] void child_main(int report_fd, const char* transport) {
  // Dies with the test process: a failed ASSERT before the kill must not leave it
  // holding ctest's output pipe (ctest then waits for its timeout).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setenv("SOFTRDMA_TRANSPORT", transport, 1);
  Pair pair;
  ibv_sge sge{pair.a.addr(0), 4096, pair.a.mr->lkey};
  if (post_send(pair.a.qp, IBV_WR_RDMA_WRITE, sge, 1, pair.b.addr(0), pair.b.mr->rkey) != 0 ||
      poll_n(pair.a.cq, 1).size() != 1)
    _exit(2);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = pair.b.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {4, 4, 1, 1, 0};
  ibv_qp* receiver = ibv_create_qp(pair.b.pd, &init);
  ibv_gid gid_a{};
  if (receiver == nullptr || ibv_query_gid(pair.a.ctx, 1, 1, &gid_a) != 0) _exit(4);
  Pair::connect(receiver, pair.a.qp->qp_num, gid_a, 1, IBV_QPS_RTR);
  ibv_qp* ud_a = make_ud(pair.a, 16384);
  ibv_qp* ud_b = make_ud(pair.b, 16384);
  if (ud_a == nullptr || ud_b == nullptr || !send_datagram(pair, ud_a, ud_b)) _exit(5);
  const std::string qpns = std::to_string(pair.a.qp->qp_num) + " " +
                           std::to_string(pair.b.qp->qp_num) + " " +
                           std::to_string(receiver->qp_num) + " " +
                           std::to_string(ud_a->qp_num) + "\n";
  if (write(report_fd, qpns.data(), qpns.size()) != ssize_t(qpns.size())) _exit(3);
  for (;;) pause();
}

// Over the wire and over the same-host path: each QP row says which it takes and
// counts what it did (packets; operations executed on the peer's memory).
class SoftrdmaStatus : public ::testing::TestWithParam<const char*> {
 protected:
  bool wire() const { return std::string(GetParam()) == "udp"; }
};
INSTANTIATE_TEST_SUITE_P(Paths, SoftrdmaStatus, ::testing::Values("udp", "auto"));

TEST_P(SoftrdmaStatus, ShowsARunningProcessAndForgetsAKilledOne) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    child_main(fds[1], GetParam());
  }
  close(fds[1]);
  char line[64] = {};
  ASSERT_GT(read(fds[0], line, sizeof line - 1), 0) << "the child never connected";
  close(fds[0]);
  unsigned qpn_a = 0, qpn_b = 0, qpn_rtr = 0, qpn_ud = 0;
  ASSERT_EQ(std::sscanf(line, "%u %u %u %u", &qpn_a, &qpn_b, &qpn_rtr, &qpn_ud), 4);

  const std::string all = run_status();
  const size_t block = all.find("process " + std::to_string(child) + "  device softrdma0");
  ASSERT_NE(block, std::string::npos) << all;
  // The child's block only: other processes of the parallel suite are listed too,
  // and their QPNs may be the child's numbers.
  const size_t next_block = all.find("\nprocess ", block);
  const std::string out = all.substr(
      block, next_block == std::string::npos ? std::string::npos : next_block + 1 - block);
  // The version the child's library wrote into its segment (issue 17).
  const std::string process_line = out.substr(0, out.find('\n'));
  EXPECT_NE(process_line.find("  softrdma " SOFTRDMA_PROJECT_VERSION), std::string::npos)
      << process_line;
  for (unsigned qpn : {qpn_a, qpn_b}) {
    EXPECT_NE(out.find("qp " + std::to_string(qpn) + "  type RC  state RTS"), std::string::npos)
        << "qp " << qpn << " in\n" << out;
  }
  // Its traffic is counted: packets on the wire, operations on the same-host path
  // (which sends none: the CI failure of 66062a0 was this test finding another
  // process's rx_packets, or, with none running, nothing).
  EXPECT_NE(out.find(wire() ? "engine.rx_packets" : "engine.host_writes"), std::string::npos)
      << "its traffic is counted\n" << out;
  const size_t row_b = out.find("  qp " + std::to_string(qpn_b) + "  type");
  ASSERT_NE(row_b, std::string::npos);
  const std::string line_b = out.substr(row_b, out.find('\n', row_b) - row_b);
  const size_t row_a = out.find("  qp " + std::to_string(qpn_a) + "  type");
  ASSERT_NE(row_a, std::string::npos);
  const std::string line_a = out.substr(row_a, out.find('\n', row_a) - row_a);
  // The path is chosen at RTR, and the row says so before RTS.
  const size_t row_rtr = out.find("  qp " + std::to_string(qpn_rtr) + "  type RC  state RTR");
  ASSERT_NE(row_rtr, std::string::npos) << out;
  const std::string line_rtr = out.substr(row_rtr, out.find('\n', row_rtr) - row_rtr);
  EXPECT_NE(line_rtr.find(wire() ? "path udp" : "path host"), std::string::npos) << line_rtr;
  // A UD QP's path is per destination: the row shows the one its datagram took.
  const size_t row_ud = out.find("  qp " + std::to_string(qpn_ud) + "  type UD  state RTS");
  ASSERT_NE(row_ud, std::string::npos) << out;
  const std::string line_ud = out.substr(row_ud, out.find('\n', row_ud) - row_ud);
  EXPECT_NE(line_ud.find(wire() ? "path udp  tx 1 " : "path host  tx 0 "), std::string::npos)
      << line_ud;
  if (wire()) {
    // Per QP: the 4 KiB WRITE is 4 packets at the pair's 1024-byte MTU, a sends
    // them and b receives them (and ACKs at least once).
    EXPECT_NE(line_b.find("path udp"), std::string::npos) << line_b;
    EXPECT_NE(line_b.find("rx 4 "), std::string::npos) << line_b;
    EXPECT_NE(line_a.find("tx 4 "), std::string::npos) << line_a;
  } else {
    // a executed the WRITE on b's memory itself: no packet, one operation.
    EXPECT_NE(line_a.find("path host"), std::string::npos) << line_a;
    EXPECT_NE(line_a.find("tx 0  rx 0  retx 0  host_ops 1"), std::string::npos) << line_a;
    EXPECT_NE(line_b.find("rx 0 "), std::string::npos) << line_b;
    EXPECT_NE(out.find("engine.host_writes"), std::string::npos) << out;
  }

  const std::string segment = "/dev/shm/softrdma-" + std::to_string(child) + "-softrdma0";
  EXPECT_TRUE(std::filesystem::exists(segment));
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // A killed process leaves its segment behind (no exit handler ran), but any
  // other softrdma process of this user may sweep it from now on (OpenDevice::open does,
  // and the parallel suite runs many): whoever removes it, `softrdma status` must
  // neither list the dead process nor leave its file. The sweep itself is tested
  // in a private directory (runtime/status_segment_test.cc).
  const std::string after = run_status();
  EXPECT_EQ(after.find("process " + std::to_string(child)), std::string::npos) << after;
  EXPECT_FALSE(std::filesystem::exists(segment)) << "the stale segment was removed";
}

// The calling (single-threaded, forked) process in a mount namespace of its own
// with a fresh tmpfs on /dev/shm, so that no other test's process sweeps what is
// left there; "" or why it could not. Not root: a user namespace maps it to root.
std::string private_dev_shm() {
  auto write_file = [](const char* path, const std::string& text) {
    const int fd = open(path, O_WRONLY | O_CLOEXEC);
    const bool ok = fd >= 0 && write(fd, text.data(), text.size()) == ssize_t(text.size());
    if (fd >= 0) close(fd);
    return ok;
  };
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (uid != 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return std::string("unshare(CLONE_NEWUSER|CLONE_NEWNS): ") + std::strerror(errno);
    if (!write_file("/proc/self/setgroups", "deny") ||
        !write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
      return "cannot map the user namespace";
  } else if (unshare(CLONE_NEWNS) != 0) {
    return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
  }
  // Private first: a mount under a shared / would show in the test's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("making / private: ") + std::strerror(errno);
  if (mount("softrdma-status-test", "/dev/shm", "tmpfs", 0, "mode=1777") != 0)
    return std::string("tmpfs on /dev/shm: ") + std::strerror(errno);
  return "";
}

size_t entries_of_dev_shm() {
  return size_t(std::distance(std::filesystem::directory_iterator("/dev/shm"),
                              std::filesystem::directory_iterator()));
}

// In the private /dev/shm: a process holding a device is killed (SIGKILL: no
// handler of any kind runs), then `softrdma status` runs. Writes to `report`
// "skip <why>", or "<files left> <removed, as the command says> <files after>"
// and the command's output.
[[noreturn]] void count_after_a_kill(int report) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto say = [report](const std::string& text) {
    if (write(report, text.data(), text.size()) != ssize_t(text.size())) _exit(3);
  };
  if (std::string why = private_dev_shm(); !why.empty()) {
    say("skip " + why);
    _exit(0);
  }
  // With a /dev/shm of its own, no shared address of this network namespace can be
  // joined (its registry is in the other /dev/shm): an address of its own.
  unsetenv("SOFTRDMA_ADDR");
  setenv("SOFTRDMA_SHARE_ADDRESS", "0", 1);
  int ready[2];
  if (pipe(ready) != 0) _exit(4);
  const pid_t holder = fork();
  if (holder < 0) _exit(5);
  if (holder == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    ibv_context* context = list != nullptr && count > 0 ? ibv_open_device(list[0]) : nullptr;
    const char byte = context != nullptr ? 'r' : 'x';
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    for (;;) pause();
  }
  char byte = 0;
  if (read(ready[0], &byte, 1) != 1 || byte != 'r') _exit(6);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  const size_t left = entries_of_dev_shm();
  const std::string out = run_status();
  const size_t at = out.find("stale segments removed: ");
  const int removed = at == std::string::npos ? -1 : std::atoi(out.c_str() + at + 24);
  say(std::to_string(left) + " " + std::to_string(removed) + " " +
      std::to_string(entries_of_dev_shm()) + "\n" + out);
  _exit(0);
}

// Issue 27 finding 6: `softrdma status` said "stale segments removed: 0" after
// removing a killed process's segments — the device it opens first had removed
// them before its reader looked. It counts every segment it removed, whoever of
// the two removed it.
TEST(SoftrdmaStatusStale, CountsTheSegmentsOfAKilledProcessItRemoved) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    count_after_a_kill(fds[1]);
  }
  close(fds[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, size_t(n));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  if (report.rfind("skip ", 0) == 0) GTEST_SKIP() << "no private /dev/shm: " << report.substr(5);
  unsigned long left = 0, after = 0;
  int removed = -2;
  ASSERT_EQ(std::sscanf(report.c_str(), "%lu %d %lu", &left, &removed, &after), 3) << report;
  // Its status segment, and its node segment unless SOFTRDMA_TRANSPORT=udp.
  EXPECT_GE(left, 1u) << report;
  EXPECT_EQ(removed, int(left)) << report;
  EXPECT_EQ(after, 0u) << "the command removed them all, and its own at exit\n" << report;
}

}  // namespace
}  // namespace softrdma::verbs::testing
