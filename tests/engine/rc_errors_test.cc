// Protection and protocol errors: each ends with the completion status and the QP
// state that IBA 9.9 / 10.8.3 and ibv_poll_cq(3) prescribe, on both sides.
#include <cstring>

#include "engine/rc_fixture.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakePacket;
namespace match = transport::fake::match;
namespace op = wire::op;

constexpr size_t kDst = 128 * 1024;

bool has_event(Device& d, ibv_event_type type) {
  AsyncEvent e;
  while (d.next_async_event(e))
    if (e.type == type) return true;
  return false;
}


class RcErrorTest : public RcPathTest {
 protected:
  void expect_both_failed(ibv_wc_status requester_status) {
    ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
    auto wcs = poll(a.scq);
    ASSERT_GE(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, requester_status);
    for (size_t i = 1; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
    EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
  }
};

INSTANTIATE_TEST_SUITE_P(Paths, RcErrorTest, ::testing::Values(TestPath::kWire, TestPath::kHost,
                                           TestPath::kSharedAddress),
                         path_name);

// A WRITE with an rkey that names no MR: NAK remote access error (IBA 9.7.5.1.5 C9-?),
// IBV_WC_REM_ACCESS_ERR at the requester, both QPs to Error, async event at b.
TEST_P(RcErrorTest, BadRkeyIsRemoteAccessError) {
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1,
                      [&](ibv_send_wr& wr, ibv_sge&) { wr.wr.rdma.rkey = b.mr->key ^ 0x5a5a; }),
            0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 8, 0, 2), 0);
  expect_both_failed(IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(b.mem[kDst], 0);
  EXPECT_TRUE(has_event(*b.device, IBV_EVENT_QP_ACCESS_ERR));
  // Refused once: by b's responder (a NAK), or by a acting as b's RNIC.
  EXPECT_EQ(b.counters().error_naks_sent.load() + a.counters().host_refused.load(), 1u);
}

// A READ reaching past the end of the MR: remote access error, nothing read.
TEST_P(RcErrorTest, OutOfBoundsReadIsRemoteAccessError) {
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 4096, b.mem.size() - 100, 1), 0);
  expect_both_failed(IBV_WC_REM_ACCESS_ERR);
}

// An MR registered without remote write refuses a WRITE (IBA 10.6.3.1).
TEST_P(RcErrorTest, MrWithoutRemoteWriteRefusesWrite) {
  RcOptions o;
  o.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  connect(o);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1), 0);
  expect_both_failed(IBV_WC_REM_ACCESS_ERR);
}

// A QP whose access flags lack remote read refuses READ: invalid request NAK
// (IBA 10.2.4.2), IBV_WC_REM_INV_REQ_ERR.
TEST_P(RcErrorTest, QpWithoutRemoteReadIsInvalidRequest) {
  RcOptions o;
  o.b_qp_access = IBV_ACCESS_REMOTE_WRITE;
  connect(o);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 100, kDst, 1), 0);
  expect_both_failed(IBV_WC_REM_INV_REQ_ERR);
  EXPECT_TRUE(has_event(*b.device, IBV_EVENT_QP_REQ_ERR));
}

// An ATOMIC to an address that is not 8-byte aligned: invalid request (IBA 9.4.5).
TEST_P(RcErrorTest, MisalignedAtomicIsInvalidRequest) {
  ASSERT_EQ(post(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 4, 1), 0);
  expect_both_failed(IBV_WC_REM_INV_REQ_ERR);
}

// A SEND longer than the receive buffer: the receive completes IBV_WC_LOC_LEN_ERR,
// the requester IBV_WC_REM_INV_REQ_ERR; the receives behind it are flushed.
TEST_P(RcErrorTest, SendTooLongForReceiveBuffer) {
  post_recv(b, kDst, 10, 1);
  post_recv(b, kDst, 4096, 2);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  expect_both_failed(IBV_WC_REM_INV_REQ_ERR);
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[1].status, IBV_WC_WR_FLUSH_ERR);
}

// A local buffer with a wrong lkey: IBV_WC_LOC_PROT_ERR, QP to Error, nothing sent.
TEST_P(RcErrorTest, BadLkeyIsLocalProtectionError) {
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1,
                      [&](ibv_send_wr&, ibv_sge& sge) { sge.lkey = a.mr->key + 1; }),
            0);
  pump();
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(net_.take_sent().size(), 0u);
}

// A local buffer beyond its MR (bounds), and a READ into a buffer without local
// write: both local protection errors.
TEST_P(RcErrorTest, LocalBoundsAndLocalWriteAreChecked) {
  ASSERT_EQ(post(a, IBV_WR_SEND, a.mem.size() - 10, 100, 0, 1), 0);
  pump();
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_LOC_PROT_ERR);
  RcOptions o;
  o.mr_access = IBV_ACCESS_REMOTE_READ;  // no local write on a's buffer
  connect(o);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 100, kDst, 1), 0);
  pump();
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_LOC_PROT_ERR);
}

// Deregistering an MR revokes remote access at once (DESIGN.md §7).
TEST_P(RcErrorTest, DeregisteredMrIsNoLongerReachable) {
  const uint32_t old_rkey = b.mr->key;
  const uint64_t remote = b.addr(kDst);
  ASSERT_EQ(b.device->dereg_mr(b.mr), 0);
  b.mr = nullptr;  // gone: the WR below names it only by its old rkey
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1,
                      [&](ibv_send_wr& wr, ibv_sge&) {
                        wr.wr.rdma.remote_addr = remote;
                        wr.wr.rdma.rkey = old_rkey;
                      }),
            0);
  expect_both_failed(IBV_WC_REM_ACCESS_ERR);
}

// An MR of another PD is out of reach of the QP (IBA 10.2.3).
TEST_P(RcErrorTest, MrOfAnotherPdIsRemoteAccessError) {
  int err = 0;
  Pd* other = b.device->alloc_pd(err);
  Mr* foreign = b.device->reg_mr(other, b.mem.data(), b.mem.size(), b.addr(0),
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, err);
  ASSERT_NE(foreign, nullptr);
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1,
                      [&](ibv_send_wr& wr, ibv_sge&) { wr.wr.rdma.rkey = foreign->key; }),
            0);
  expect_both_failed(IBV_WC_REM_ACCESS_ERR);
}

// Fence (IBA 10.8.3.3): a fenced SEND waits until the READ before it completes.
TEST_F(RcPairTest, FencedSendWaitsForEarlierRead) {
  post_recv(b, kDst, 4096, 1);
  net_.hold(match::opcode(op::kRcReadResponseOnly));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 100, kDst, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 8, 0, 2, IBV_SEND_SIGNALED | IBV_SEND_FENCE), 0);
  pump();
  for (const FakePacket& p : net_.take_sent()) EXPECT_NE(p.opcode(), op::kRcSendOnly);
  net_.clear_rules();
  net_.release_held();
  pump();
  bool send_seen = false;
  for (const FakePacket& p : net_.take_sent()) send_seen |= p.opcode() == op::kRcSendOnly;
  EXPECT_TRUE(send_seen);
  EXPECT_EQ(poll(a.scq).size(), 2u);
}

// max_rd_atomic = 1: a second READ is not sent while the first is outstanding.
TEST_F(RcPairTest, MaxRdAtomicLimitsOutstandingReads) {
  RcOptions o;
  o.max_rd_atomic = 1;
  connect(o);
  net_.hold(match::opcode(op::kRcReadResponseOnly));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 100, kDst, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 200, 100, kDst, 2), 0);
  pump();
  size_t requests = 0;
  for (const FakePacket& p : net_.take_sent()) requests += p.opcode() == op::kRcReadRequest;
  EXPECT_EQ(requests, 1u);
  net_.clear_rules();
  net_.release_held();
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  EXPECT_EQ(poll(a.scq).size(), 2u);
}

}  // namespace
}  // namespace softrdma::engine::testing

namespace softrdma::engine::testing {
namespace {

// Back to Reset, a QP's unpolled completions leave its CQs (as RDMA NICs'
// providers clean their CQs), so a QP restated after an error does not hand its
// next user the flushes of its previous life; other QPs' completions stay.
TEST_F(RcPairTest, ResetRemovesTheQpsUnpolledCompletions) {
  post_recv(b, 0, 64, 1);
  post_recv(b, 64, 64, 2);
  ibv_wc other{};
  other.wr_id = 99;
  other.qp_num = b.qp->qpn() + 1000;
  ASSERT_TRUE(b.rcq->push(other));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(b.qp->modify(attr, IBV_QP_STATE), 0);
  EXPECT_EQ(b.rcq->depth(), 3u) << "two flushed receives beside the other QP's";
  attr.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(b.qp->modify(attr, IBV_QP_STATE), 0);
  const auto left = poll(b.rcq);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].wr_id, 99u);
}

}  // namespace
}  // namespace softrdma::engine::testing
