// Scale (issue 6): 65 536 RC QPs in one process, a sample of them connected to a
// second process and used. Reports the memory and the time each QP costs with the
// queue sizes of ibv_rc_pingpong's defaults (gtest properties and stdout).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

constexpr uint32_t kQps = 65536;
constexpr uint32_t kSample = 64;  // connected and used: every kQps / kSample-th QP

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {16, 16, 1, 1, 0};  // ibv_rc_pingpong: rx depth and tx depth of this order
  return ibv_create_qp(pd, &init);
}

struct Endpoint {
  uint32_t qpns[kSample];
  ibv_gid gid;
};

// The second process: kSample QPs, connected to the first's sample, each receives
// one SEND; exits 0 when all arrived intact.
[[noreturn]] void peer_main(int to_parent, int from_parent) {
  Device dev;
  ibv_pd* pd = ibv_alloc_pd(dev.ctx());
  ibv_cq* cq = ibv_create_cq(dev.ctx(), 1024, nullptr, nullptr, 0);
  std::vector<uint8_t> buf(kSample * 64);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  Endpoint mine{};
  std::vector<ibv_qp*> qps;
  for (uint32_t i = 0; i < kSample; ++i) {
    qps.push_back(make_qp(pd, cq));
    if (qps.back() == nullptr) _exit(2);
    mine.qpns[i] = qps.back()->qp_num;
  }
  ibv_query_gid(dev.ctx(), 1, 1, &mine.gid);
  Endpoint theirs{};
  if (write(to_parent, &mine, sizeof mine) != ssize_t(sizeof mine) ||
      read(from_parent, &theirs, sizeof theirs) != ssize_t(sizeof theirs))
    _exit(3);
  for (uint32_t i = 0; i < kSample; ++i) {
    Pair::connect(qps[i], theirs.qpns[i], theirs.gid, 1);
    if (post_recv(qps[i], {uint64_t(uintptr_t(&buf[i * 64])), 64, mr->lkey}, i) != 0) _exit(4);
  }
  const char ready = 'r';
  if (write(to_parent, &ready, 1) != 1) _exit(5);
  const auto wcs = poll_n(cq, kSample);
  bool ok = wcs.size() == kSample;
  for (const ibv_wc& wc : wcs) ok = ok && wc.status == IBV_WC_SUCCESS && wc.byte_len == 8;
  for (uint32_t i = 0; i < kSample; ++i) ok = ok && buf[i * 64] == uint8_t(i + 1);
  _exit(ok ? 0 : 6);
}

TEST(Scale, SixtyFiveThousandRcQpsInOneProcessASampleConnectedToAnother) {
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t peer = fork();
  ASSERT_GE(peer, 0);
  if (peer == 0) peer_main(up[1], down[0]);

  Device dev;
  ibv_pd* pd = ibv_alloc_pd(dev.ctx());
  ibv_cq* cq = ibv_create_cq(dev.ctx(), 4096, nullptr, nullptr, 0);
  ASSERT_TRUE(pd && cq);
  std::vector<ibv_qp*> qps;
  qps.reserve(kQps);
  const long rss_before = resident_bytes();
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < kQps; ++i) {
    ibv_qp* qp = make_qp(pd, cq);
    ASSERT_NE(qp, nullptr) << "QP " << i << ": errno " << errno;
    qps.push_back(qp);
  }
  const double us = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - start).count() / kQps;
  const long bytes = (resident_bytes() - rss_before) / long(kQps);
  std::printf("scale: %u RC QPs, %ld bytes and %.2f us each (RSS, creation)\n", kQps, bytes, us);
  RecordProperty("bytes_per_qp", std::to_string(bytes));
  RecordProperty("us_per_qp", std::to_string(us));

  Endpoint mine{}, theirs{};
  ibv_query_gid(dev.ctx(), 1, 1, &mine.gid);
  for (uint32_t i = 0; i < kSample; ++i) mine.qpns[i] = qps[i * (kQps / kSample)]->qp_num;
  ASSERT_EQ(read(up[0], &theirs, sizeof theirs), ssize_t(sizeof theirs));
  ASSERT_EQ(write(down[1], &mine, sizeof mine), ssize_t(sizeof mine));
  std::vector<uint8_t> buf(kSample * 8);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i < kSample; ++i)
    Pair::connect(qps[i * (kQps / kSample)], theirs.qpns[i], theirs.gid, 1);
  char ready = 0;
  ASSERT_EQ(read(up[0], &ready, 1), 1);
  for (uint32_t i = 0; i < kSample; ++i) {
    buf[i * 8] = uint8_t(i + 1);
    ASSERT_EQ(post_send(qps[i * (kQps / kSample)], IBV_WR_SEND,
                        {uint64_t(uintptr_t(&buf[i * 8])), 8, mr->lkey}, i), 0);
  }
  const auto sent = poll_n(cq, kSample);
  ASSERT_EQ(sent.size(), kSample);
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  int status = 0;
  ASSERT_EQ(waitpid(peer, &status, 0), peer);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the second process: status " << status;
  for (ibv_qp* qp : qps) ASSERT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

}  // namespace
}  // namespace softrdma::verbs::testing
