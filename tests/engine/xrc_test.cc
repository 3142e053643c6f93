// XRC (IBA Annex A14; ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_create_qp_ex(3)):
// an XRC send QP on a reaches the XRC receive QP on b, and each request lands in
// the XRC SRQ its XRCETH names, completing on that SRQ's CQ.
#include <gtest/gtest.h>

#include "engine/xrc_fixture.h"

namespace softrdma::engine::testing {
namespace {

TEST_P(XrcTest, SendsLandInTheSrqTheirXrcethNames) {
  post_srq(*srq1_, 0, 4096, 1);
  post_srq(*srq2_, 8192, 4096, 2);
  fill(a, 0, 3000, 1);
  fill(a, 4096, 200, 2);
  ASSERT_EQ(post_xrc(IBV_WR_SEND, 0, 3000, srq1_->srqn(), 11), 0);
  ASSERT_EQ(post_xrc(IBV_WR_SEND, 4096, 200, srq2_->srqn(), 12), 0);
  pump();
  const auto on1 = poll(b.rcq);
  const auto on2 = poll(cq2_);
  ASSERT_EQ(on1.size(), 1u);
  ASSERT_EQ(on2.size(), 1u);
  EXPECT_EQ(on1[0].wr_id, 1u);
  EXPECT_EQ(on1[0].byte_len, 3000u);
  EXPECT_EQ(on1[0].qp_num, xrecv_->qpn());
  EXPECT_EQ(on2[0].wr_id, 2u);
  EXPECT_EQ(on2[0].byte_len, 200u);
  EXPECT_TRUE(same(a, 0, b, 0, 3000));
  EXPECT_TRUE(same(a, 4096, b, 8192, 200));
  const auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b.counters().host_receives.load(), host() ? 2u : 0u);
  EXPECT_EQ(a.counters().tx_packets.load() == 0, host());
}

// IBA A14: RDMA through an XRC receive QP is checked against the PD of the SRQ
// the request names; one in another PD than the MR is a remote access error.
TEST_P(XrcTest, RdmaIsCheckedAgainstTheNamedSrqsPd) {
  fill(a, 0, 512, 3);
  ASSERT_EQ(post_xrc(IBV_WR_RDMA_WRITE, 0, 512, srq1_->srqn(), 1, 16384), 0);
  ASSERT_EQ(post_xrc(IBV_WR_RDMA_READ, 4096, 512, srq1_->srqn(), 2, 16384), 0);
  pump();
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, 16384, 512));
  EXPECT_TRUE(same(a, 4096, b, 16384, 512));
  EXPECT_EQ(a.counters().host_writes.load(), host() ? 1u : 0u);
  EXPECT_EQ(a.counters().host_reads.load(), host() ? 1u : 0u);
  int err = 0;
  Pd* other = b.device->alloc_pd(err);
  Srq* foreign = make_srq(other, cq2_);
  ASSERT_EQ(post_xrc(IBV_WR_RDMA_WRITE, 0, 512, foreign->srqn(), 3, 16384), 0);
  pump();
  wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
}

// An SRQ number outside the receive QP's XRC domain is an invalid request.
TEST_P(XrcTest, AnSrqOutsideTheDomainIsAnInvalidRequest) {
  wire_traffic_expected_ = true;  // an unpublished SRQ number: the SEND takes the wire
  ASSERT_EQ(post_xrc(IBV_WR_SEND, 0, 8, 0xabcde, 1), 0);
  pump();
  const auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
}

// The same for an XRC SRQ of another domain of the same process, which has a WQE
// the request would take: it stays.
TEST_P(XrcTest, AnXrcSrqOfAnotherDomainIsAnInvalidRequest) {
  for (ibv_wr_opcode op : {IBV_WR_SEND, IBV_WR_RDMA_WRITE}) {
    SCOPED_TRACE(op);
    if (op != IBV_WR_SEND) {  // the SEND ended both QPs
      SetUp();  // connect() tears the old pair down
    }
    int err = 0;
    Xrcd* other = b.device->open_xrcd(7, true, err);
    ASSERT_NE(other, nullptr);
    Srq* foreign = make_srq(b.pd, cq2_, other);
    post_srq(*foreign, 0, 64, 9);
    ASSERT_EQ(post_xrc(op, 0, 8, foreign->srqn(), 2, 16384), 0);
    pump();
    const auto wcs = poll(a.scq);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_TRUE(poll(cq2_).empty()) << "the foreign SRQ's WQE stays";
    EXPECT_EQ(a.counters().tx_packets.load() == 0, host());
  }
}

// IBA 9.7.5.1.4: an XRC SRQ without a WQE is Receiver Not Ready; the SEND lands
// once one is posted.
TEST_P(XrcTest, AnEmptySrqIsReceiverNotReady) {
  fill(a, 0, 100, 4);
  ASSERT_EQ(post_xrc(IBV_WR_SEND_WITH_IMM, 0, 100, srq2_->srqn(), 1), 0);
  pump();
  EXPECT_TRUE(poll(a.scq).empty());
  post_srq(*srq2_, 4096, 128, 5);
  ASSERT_TRUE(run_until([&] { return cq2_->depth() > 0; }));
  const auto got = poll(cq2_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wc_flags & IBV_WC_WITH_IMM, unsigned(IBV_WC_WITH_IMM));
  EXPECT_TRUE(same(a, 0, b, 4096, 100));
  ASSERT_TRUE(run_until([&] { return a.scq->depth() > 0; }));
  const auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_GE(host() ? a.counters().host_rnr_waits.load() : b.counters().rnr_naks_sent.load(), 1u);
}

// ibv_create_qp_ex(3), ibv_post_send(3), ibv_post_recv(3), ibv_open_xrcd(3),
// ibv_close_xrcd(3): what each XRC object needs, and what it refuses.
TEST_P(XrcTest, ObjectsRefuseWhatTheManPagesSay) {
  int err = 0;
  QpInit recv;
  recv.type = IBV_QPT_XRC_RECV;  // no domain
  EXPECT_EQ(b.device->create_qp(nullptr, recv, err), nullptr);
  EXPECT_EQ(err, EINVAL);
  QpInit send;
  send.type = IBV_QPT_XRC_SEND;  // no send CQ
  EXPECT_EQ(a.device->create_qp(a.pd, send, err), nullptr);
  EXPECT_EQ(err, EINVAL);
  ibv_send_wr swr{};
  const ibv_send_wr* sbad = nullptr;
  EXPECT_EQ(xrecv_->post_send(&swr, &sbad), EINVAL);  // no send queue
  ibv_recv_wr rwr{};
  const ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(xsend_->post_recv(&rwr, &rbad), EINVAL);  // no receive queue
  SrqInit no_cq;
  no_cq.type = IBV_SRQT_XRC;
  no_cq.attr = ibv_srq_attr{4, 1, 0};
  no_cq.xrcd = xrcd_;
  EXPECT_EQ(b.device->create_srq(b.pd, no_cq, err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(b.device->close_xrcd(xrcd_), EBUSY);  // SRQs and a QP in it
  EXPECT_EQ(b.device->open_xrcd(42, false, err), nullptr);
  EXPECT_EQ(err, ENOENT);
  Xrcd* first = b.device->open_xrcd(42, true, err);
  EXPECT_EQ(b.device->open_xrcd(42, false, err), first) << "one domain per file";
  EXPECT_EQ(b.device->close_xrcd(first), 0);
  EXPECT_EQ(b.device->close_xrcd(first), 0);
  EXPECT_EQ(b.device->close_xrcd(first), EINVAL);
}

// The same-host path only (the wire would lose the request to the Error state).
class XrcHostTest : public XrcTest {};

// IBA 10.2.9.4 / A14: what a peer placed in an XRC SRQ for the receive QP before
// it entered Error completes as placed, on the SRQ's CQ, before Last WQE Reached.
TEST_P(XrcHostTest, WhatWasPlacedCompletesWhenTheReceiveQpEntersError) {
  post_srq(*srq2_, 8192, 4096, 21);
  fill(a, 0, 300, 6);
  ASSERT_EQ(post_xrc(IBV_WR_SEND, 0, 300, srq2_->srqn(), 1), 0);
  for (int i = 0; i < 8; ++i) a.device->progress();  // b's engine does not run
  ASSERT_EQ(b.counters().host_receives.load(), 0u);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(xrecv_->modify(attr, IBV_QP_STATE), 0);
  // Before Last WQE Reached, after which the application may destroy the QP.
  const auto wcs = poll(cq2_);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 21u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].byte_len, 300u);
  EXPECT_EQ(wcs[0].qp_num, xrecv_->qpn());
  EXPECT_TRUE(same(a, 0, b, 8192, 300));
  std::vector<AsyncEvent> fired;
  for (AsyncEvent e; b.device->next_async_event(e);) fired.push_back(e);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].type, IBV_EVENT_QP_LAST_WQE_REACHED);
  ASSERT_EQ(b.device->destroy_qp(xrecv_), 0);
  xrecv_ = nullptr;
  pump();
  EXPECT_EQ(b.counters().host_receives_dropped.load(), 0u);
  EXPECT_TRUE(poll(cq2_).empty());
}

INSTANTIATE_TEST_SUITE_P(SameHost, XrcHostTest, ::testing::Values(TestPath::kHost), path_name);

INSTANTIATE_TEST_SUITE_P(Paths, XrcTest, ::testing::Values(TestPath::kWire, TestPath::kHost,
                                           TestPath::kSharedAddress),
                         path_name);

}  // namespace
}  // namespace softrdma::engine::testing
