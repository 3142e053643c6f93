// An XRC pair on the RC pair's devices (IBA Annex A14): an XRC send QP on a,
// connected to an XRC receive QP on b whose domain holds two XRC SRQs, the first
// completing on b's receive CQ, the second on a CQ of its own.
#pragma once

#include "engine/rc_fixture.h"

namespace softrdma::engine::testing {

class XrcPairTest : public RcPairTest {
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

  bool host() const { return same_host_; }

  Srq* make_srq(Pd* pd, Cq* cq, Xrcd* xrcd = nullptr) {
    SrqInit init;
    init.type = IBV_SRQT_XRC;
    init.attr = ibv_srq_attr{16, 1, 0};
    init.cq = cq;
    init.xrcd = xrcd != nullptr ? xrcd : xrcd_;
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
    if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = b.addr(remote_offset);
      wr.wr.atomic.rkey = b.mr->key;
      wr.wr.atomic.compare_add = 1;
    } else {
      wr.wr.rdma.remote_addr = b.addr(remote_offset);
      wr.wr.rdma.rkey = b.mr->key;
    }
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

// Over both paths (RcPathTest's TestPath): the wire, and the same-host path, where
// the XRC send QP's requester places SENDs in the named SRQ itself and executes
// RDMA against the named SRQ's PD (docs/decisions/same-host.md, "XRC").
class XrcTest : public XrcPairTest, public ::testing::WithParamInterface<TestPath> {
 protected:
  void SetUp() override {
    take_path(GetParam());
    XrcPairTest::SetUp();
  }
};

}  // namespace softrdma::engine::testing
