// XRC (IBA Annex A14; ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_create_qp_ex(3)):
// an XRC send QP on a reaches the XRC receive QP on b, and each request lands in
// the XRC SRQ its XRCETH names, completing on that SRQ's CQ.
#include <gtest/gtest.h>

#include "engine/xrc_fixture.h"

namespace softrdma::engine::testing {
namespace {

TEST_F(XrcTest, SendsLandInTheSrqTheirXrcethNames) {
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
}

// IBA A14: RDMA through an XRC receive QP is checked against the PD of the SRQ
// the request names; one in another PD than the MR is a remote access error.
TEST_F(XrcTest, RdmaIsCheckedAgainstTheNamedSrqsPd) {
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
TEST_F(XrcTest, AnSrqOutsideTheDomainIsAnInvalidRequest) {
  ASSERT_EQ(post_xrc(IBV_WR_SEND, 0, 8, 0xabcde, 1), 0);
  pump();
  const auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
}

// ibv_create_qp_ex(3), ibv_post_send(3), ibv_post_recv(3), ibv_open_xrcd(3),
// ibv_close_xrcd(3): what each XRC object needs, and what it refuses.
TEST_F(XrcTest, ObjectsRefuseWhatTheManPagesSay) {
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

}  // namespace
}  // namespace softrdma::engine::testing
