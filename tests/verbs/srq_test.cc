// SRQs and XRC through the verbs API, as applications use them:
// ibv_create_srq(3), ibv_post_srq_recv(3), ibv_modify_srq(3) with its limit event,
// IBV_EVENT_QP_LAST_WQE_REACHED, ibv_create_srq_ex(3), ibv_get_srq_num(3),
// ibv_open_xrcd(3) and XRC QPs posted through ibv_wr_set_xrc_srqn(3).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

// Every RC QP of these tests on one context: a PD, one CQ, a buffer.
struct Host {
  Device dev;
  ibv_pd* pd = ibv_alloc_pd(dev.ctx());
  ibv_cq* cq = ibv_create_cq(dev.ctx(), 64, nullptr, nullptr, 0);
  std::vector<uint8_t> buf = std::vector<uint8_t>(64 * 1024);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), kAllAccess);
  ibv_gid gid{};

  Host() { EXPECT_EQ(ibv_query_gid(dev.ctx(), 1, 1, &gid), 0); }
  ~Host() {
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  }
  ibv_sge sge(size_t offset, uint32_t length) {
    return {uint64_t(uintptr_t(&buf[offset])), length, mr->lkey};
  }
  ibv_qp* rc_qp(ibv_srq* srq) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {8, 8, 1, 1, 0};
    ibv_qp* qp = ibv_create_qp(pd, &init);
    EXPECT_NE(qp, nullptr) << errno;
    return qp;
  }
  int post_srq(ibv_srq* srq, size_t offset, uint32_t length, uint64_t wr_id) {
    ibv_sge s = sge(offset, length);
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq, &wr, &bad);
  }
};

ibv_async_event next_event(ibv_context* ctx) {
  ibv_async_event event{};
  EXPECT_EQ(ibv_get_async_event(ctx, &event), 0);
  return event;
}

TEST(VerbsSrq, TwoQpsShareOneQueueAndTheLimitEventArrives) {
  Host h;
  ibv_srq_init_attr init{};
  init.attr = {8, 1, 0};
  ibv_srq* srq = ibv_create_srq(h.pd, &init);
  ASSERT_NE(srq, nullptr) << errno;
  ibv_qp* senders[2] = {h.rc_qp(nullptr), h.rc_qp(nullptr)};
  ibv_qp* receivers[2] = {h.rc_qp(srq), h.rc_qp(srq)};
  for (int i = 0; i < 2; ++i) {
    Pair::connect(senders[i], receivers[i]->qp_num, h.gid, 1);
    Pair::connect(receivers[i], senders[i]->qp_num, h.gid, 1);
  }
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_EQ(h.post_srq(srq, 4096 * id, 4096, id), 0);
  ibv_srq_attr limit{0, 0, 3};
  ASSERT_EQ(ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT), 0);
  std::memcpy(&h.buf[0], "first", 5);
  std::memcpy(&h.buf[100], "second", 6);
  ASSERT_EQ(post_send(senders[0], IBV_WR_SEND, h.sge(0, 5), 10), 0);
  ASSERT_EQ(post_send(senders[1], IBV_WR_SEND, h.sge(100, 6), 11), 0);
  std::vector<ibv_wc> wcs = poll_n(h.cq, 4);  // two sends, two receives
  ASSERT_EQ(wcs.size(), 4u);
  int received = 0;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    if (wc.opcode != IBV_WC_RECV) continue;
    ++received;
    const bool first = wc.qp_num == receivers[0]->qp_num;
    EXPECT_EQ(wc.byte_len, first ? 5u : 6u);
    EXPECT_EQ(std::memcmp(&h.buf[4096 * wc.wr_id], first ? "first" : "second", wc.byte_len), 0);
  }
  EXPECT_EQ(received, 2);
  ibv_async_event event = next_event(h.dev.ctx());
  EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event.element.srq, srq);
  ibv_ack_async_event(&event);
  ibv_srq_attr now{};
  ASSERT_EQ(ibv_query_srq(srq, &now), 0);
  EXPECT_EQ(now.srq_limit, 0u) << "disarmed once fired";
  EXPECT_EQ(now.max_wr, 8u);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY) << "QPs still use it";
  for (ibv_qp* qp : {senders[0], senders[1], receivers[0], receivers[1]})
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// IBA 11.6.3.1: a QP attached to an SRQ reports Last WQE Reached once in Error.
TEST(VerbsSrq, AQpInErrorReportsItsLastWqe) {
  Host h;
  ibv_srq_init_attr init{};
  init.attr = {4, 1, 0};
  ibv_srq* srq = ibv_create_srq(h.pd, &init);
  ASSERT_NE(srq, nullptr);
  ibv_qp* qp = h.rc_qp(srq);
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL) << "the SRQ is its receive queue";
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  ibv_async_event event = next_event(h.dev.ctx());
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(event.element.qp, qp);
  ibv_ack_async_event(&event);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// ibv_create_srq(3), ibv_modify_srq(3), ibv_create_srq_ex(3), ibv_open_xrcd(3).
TEST(VerbsSrq, MisuseIsRefused) {
  Host h;
  ibv_srq_init_attr init{};
  init.attr = {0, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv_create_srq(h.pd, &init), nullptr);
  EXPECT_EQ(errno, EINVAL) << "max_wr 0";
  ibv_device_attr dattr{};
  ASSERT_EQ(ibv_query_device(h.dev.ctx(), &dattr), 0);
  init.attr = {uint32_t(dattr.max_srq_wr) + 1, 1, 0};
  EXPECT_EQ(ibv_create_srq(h.pd, &init), nullptr);
  EXPECT_EQ(errno, EINVAL) << "beyond max_srq_wr";
  init.attr = {4, 1, 0};
  ibv_srq* srq = ibv_create_srq(h.pd, &init);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr attr{16, 0, 0};
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR), EINVAL) << "no SRQ resize";
  attr.srq_limit = 5;
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), EINVAL) << "above max_wr";
  uint32_t srqn = 0;
  EXPECT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  EXPECT_NE(srqn, 0u);
  EXPECT_EQ(ibv_dealloc_pd(h.pd), EBUSY) << "the SRQ uses it";
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  ibv_srq_init_attr_ex ex{};
  ex.attr = {4, 1, 0};
  ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  ex.srq_type = IBV_SRQT_TM;
  ex.pd = h.pd;
  EXPECT_EQ(ibv_create_srq_ex(h.dev.ctx(), &ex), nullptr);
  EXPECT_EQ(errno, EINVAL) << "tag matching without its CQ and IBV_SRQ_INIT_ATTR_TM";
  ex.srq_type = IBV_SRQT_XRC;
  EXPECT_EQ(ibv_create_srq_ex(h.dev.ctx(), &ex), nullptr);
  EXPECT_EQ(errno, EINVAL) << "XRC without domain and CQ";
  ibv_xrcd_init_attr xattr{};
  xattr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xattr.fd = -1;
  xattr.oflags = O_APPEND;
  EXPECT_EQ(ibv_open_xrcd(h.dev.ctx(), &xattr), nullptr);
  EXPECT_EQ(errno, EINVAL) << "only O_CREAT and O_EXCL";
}

// ibv_xsrq_pingpong's objects, one process: a domain opened by a file, an XRC SRQ
// with its own CQ, an XRC send QP (posting through ibv_wr_set_xrc_srqn) and an
// XRC receive QP.
TEST(VerbsXrc, ASendReachesTheXrcSrqItNames) {
  Host h;
  char path[] = "/tmp/softrdma-xrcd-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ibv_xrcd_init_attr xattr{};
  xattr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xattr.fd = fd;
  xattr.oflags = O_CREAT;
  ibv_xrcd* xrcd = ibv_open_xrcd(h.dev.ctx(), &xattr);
  ASSERT_NE(xrcd, nullptr) << errno;
  ibv_cq* srq_cq = ibv_create_cq(h.dev.ctx(), 8, nullptr, nullptr, 0);
  ibv_srq_init_attr_ex sattr{};
  sattr.attr = {8, 1, 0};
  sattr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                    IBV_SRQ_INIT_ATTR_CQ;
  sattr.srq_type = IBV_SRQT_XRC;
  sattr.pd = h.pd;
  sattr.xrcd = xrcd;
  sattr.cq = srq_cq;
  ibv_srq* srq = ibv_create_srq_ex(h.dev.ctx(), &sattr);
  ASSERT_NE(srq, nullptr) << errno;
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);

  ibv_qp_init_attr_ex qattr{};
  qattr.qp_type = IBV_QPT_XRC_RECV;
  qattr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  qattr.xrcd = xrcd;
  ibv_qp* recv = ibv_create_qp_ex(h.dev.ctx(), &qattr);
  ASSERT_NE(recv, nullptr) << errno;
  qattr = ibv_qp_init_attr_ex{};
  qattr.qp_type = IBV_QPT_XRC_SEND;
  qattr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qattr.pd = h.pd;
  qattr.send_cq = h.cq;
  qattr.cap = {8, 0, 1, 0, 0};
  qattr.send_ops_flags = IBV_QP_EX_WITH_SEND;
  ibv_qp* send = ibv_create_qp_ex(h.dev.ctx(), &qattr);
  ASSERT_NE(send, nullptr) << errno;
  Pair::connect(send, recv->qp_num, h.gid, 1);
  Pair::connect(recv, send->qp_num, h.gid, 1);

  ASSERT_EQ(h.post_srq(srq, 8192, 1024, 77), 0);
  std::memcpy(&h.buf[0], "xrc!", 4);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(send);
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 5;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_xrc_srqn(qpx, srqn);
  ibv_wr_set_sge(qpx, h.mr->lkey, uint64_t(uintptr_t(h.buf.data())), 4);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  auto got = poll_n(srq_cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].wr_id, 77u);
  EXPECT_EQ(got[0].byte_len, 4u);
  EXPECT_EQ(std::memcmp(&h.buf[8192], "xrc!", 4), 0);
  auto sent = poll_n(h.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);

  EXPECT_EQ(ibv_close_xrcd(xrcd), EBUSY) << "its SRQ and QP";
  EXPECT_EQ(ibv_destroy_qp(send), 0);
  EXPECT_EQ(ibv_destroy_qp(recv), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_destroy_cq(srq_cq), 0);
  EXPECT_EQ(ibv_close_xrcd(xrcd), 0);
  close(fd);
}

}  // namespace
}  // namespace softrdma::verbs::testing
