// XRC (IBA Annex A14; ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_create_qp_ex(3)):
// an XRC send QP on a reaches the XRC receive QP on b, and each request lands in
// the XRC SRQ its XRCETH names, completing on that SRQ's CQ.
#include <gtest/gtest.h>

#include "engine/rc_fixture.h"

namespace softrdma::engine::testing {
namespace {

class XrcTest : public RcPairTest {
 protected:
  void SetUp() override {
    RcPairTest::SetUp();
    int err = 0;
    xrcd_ = b.device->open_xrcd(0, true, err);
    ASSERT_NE(xrcd_, nullptr);
    cq2_ = b.device->create_cq(64, err);
    srq1_ = make_srq(b.pd, b.rcq);
    srq2_ = make_srq(b.pd, cq2_);
    QpInit send;
    send.type = IBV_QPT_XRC_SEND;
    send.send_cq = a.scq;
    send.cap = ibv_qp_cap{16, 0, 1, 0, 0};
    xsend_ = a.device->create_qp(a.pd, send, err);
    ASSERT_NE(xsend_, nullptr) << err;
    QpInit recv;
    recv.type = IBV_QPT_XRC_RECV;
    recv.xrcd = xrcd_;
    xrecv_ = b.device->create_qp(nullptr, recv, err);
    ASSERT_NE(xrecv_, nullptr) << err;
    const int all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    connect_qp(*xsend_, *b.device, xrecv_->qpn(), 300, 400, 0, options_);
    connect_qp(*xrecv_, *a.device, xsend_->qpn(), 400, 300, all, options_);
  }

  Srq* make_srq(Pd* pd, Cq* cq) {
    SrqInit init;
    init.type = IBV_SRQT_XRC;
    init.attr = ibv_srq_attr{16, 1, 0};
    init.cq = cq;
    init.xrcd = xrcd_;
    int err = 0;
    Srq* srq = b.device->create_srq(pd, init, err);
    EXPECT_NE(srq, nullptr) << err;
    return srq;
  }

  void post_srq(Srq& srq, size_t offset, uint32_t length, uint64_t wr_id) {
    ibv_sge sge{b.addr(offset), length, b.mr->key};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(srq.post_recv(&wr, &bad), 0);
  }

  int post_xrc(ibv_wr_opcode opcode, size_t offset, uint32_t length, uint32_t srqn,
               uint64_t wr_id, size_t remote_offset = 0) {
    ibv_sge sge{a.addr(offset), length, a.mr->key};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = b.addr(remote_offset);
    wr.wr.rdma.rkey = b.mr->key;
    wr.qp_type.xrc.remote_srqn = srqn;
    const ibv_send_wr* bad = nullptr;
    return xsend_->post_send(&wr, &bad);
  }

  Xrcd* xrcd_ = nullptr;
  Cq* cq2_ = nullptr;
  Srq* srq1_ = nullptr;
  Srq* srq2_ = nullptr;
  Qp* xsend_ = nullptr;
  Qp* xrecv_ = nullptr;
};

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
