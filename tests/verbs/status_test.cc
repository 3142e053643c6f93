// `softrdma status` shows a running process's device, QPs and live counters, and
// removes the segment of a process that was killed (issue 6 "Live counters";
// runtime/status_segment.h). A child process connects a pair of QPs and moves
// data, then waits; the test runs the real command, as a user would.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

std::string run_status() {
  std::string out;
  FILE* p = popen(SOFTRDMA_TOOL " status 2>&1", "r");
  if (p == nullptr) return out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, p)) out.append(buffer, n);
  pclose(p);
  return out;
}

// The child: a connected pair over `transport` (SOFTRDMA_TRANSPORT), one WRITE of
// 4 KiB completed, and a third QP towards a left in RTR (as perftest's
// ib_write_bw server leaves its own); then the three QPNs to the parent, then it
// waits to be killed.
[[noreturn]] void child_main(int report_fd, const char* transport) {
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
  const std::string qpns = std::to_string(pair.a.qp->qp_num) + " " +
                           std::to_string(pair.b.qp->qp_num) + " " +
                           std::to_string(receiver->qp_num) + "\n";
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
  unsigned qpn_a = 0, qpn_b = 0, qpn_rtr = 0;
  ASSERT_EQ(std::sscanf(line, "%u %u %u", &qpn_a, &qpn_b, &qpn_rtr), 3);

  const std::string out = run_status();
  EXPECT_NE(out.find("process " + std::to_string(child) + "  device softrdma0"), std::string::npos)
      << out;
  for (unsigned qpn : {qpn_a, qpn_b}) {
    EXPECT_NE(out.find("qp " + std::to_string(qpn) + "  type RC  state RTS"), std::string::npos)
        << "qp " << qpn << " in\n" << out;
  }
  EXPECT_NE(out.find("engine.rx_packets"), std::string::npos) << "its traffic is counted\n" << out;
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
  // other softrdma process of this user may sweep it from now on (Node::open does,
  // and the parallel suite runs many): whoever removes it, `softrdma status` must
  // neither list the dead process nor leave its file. The sweep itself is tested
  // in a private directory (runtime/status_segment_test.cc).
  const std::string after = run_status();
  EXPECT_EQ(after.find("process " + std::to_string(child)), std::string::npos) << after;
  EXPECT_FALSE(std::filesystem::exists(segment)) << "the stale segment was removed";
}

}  // namespace
}  // namespace softrdma::verbs::testing
