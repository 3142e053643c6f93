// Shared receive queues (IBA 10.2.9, 11.2.3; ibv_create_srq(3), ibv_modify_srq(3),
// ibv_post_srq_recv(3)): many QPs consume one queue, the limit event, the last
// WQE event, and the errors the man pages give.
#include <gtest/gtest.h>

#include "engine/rc_fixture.h"

namespace softrdma::engine::testing {
namespace {

// Every body over both paths: the wire, and the same-host path, where the sender
// claims the SRQ's WQE and places the message itself (engine/host/srq_recv.cc).
class SrqTest : public RcPathTest {
 protected:
  void SetUp() override {
    take_path(GetParam());
    RcOptions o;
    o.srq_wrs = 8;
    connect(o);
  }
  bool host() const { return GetParam() != TestPath::kWire; }

  static int post_srq(Srq& srq, Node& n, size_t offset, uint32_t length, uint64_t wr_id,
                      int num_sge = 1) {
    ibv_sge sge{n.addr(offset), length, n.mr->key};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = num_sge;
    const ibv_recv_wr* bad = nullptr;
    return srq.post_recv(&wr, &bad);
  }

  // A second QP on each node, connected to each other; b's receives from b's SRQ.
  void add_second_pair() {
    int err = 0;
    QpInit init;
    init.send_cq = a.scq;
    init.recv_cq = a.rcq;
    init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
    a2_ = a.device->create_qp(a.pd, init, err);
    init.send_cq = b.scq;
    init.recv_cq = b.rcq;
    init.srq = b.srq;
    b2_ = b.device->create_qp(b.pd, init, err);
    ASSERT_TRUE(a2_ != nullptr && b2_ != nullptr);
    const int all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    connect_qp(*a2_, *b.device, b2_->qpn(), 7, 9, all, options_);
    connect_qp(*b2_, *a.device, a2_->qpn(), 9, 7, all, options_);
  }

  int send_on(Qp& qp, Node& n, size_t offset, uint32_t length, uint64_t wr_id) {
    ibv_sge sge{n.addr(offset), length, n.mr->key};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_send_wr* bad = nullptr;
    return qp.post_send(&wr, &bad);
  }

  std::vector<AsyncEvent> events(Device& d) {
    std::vector<AsyncEvent> out;
    AsyncEvent e;
    while (d.next_async_event(e)) out.push_back(e);
    return out;
  }

  Qp* a2_ = nullptr;
  Qp* b2_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Paths, SrqTest, ::testing::Values(TestPath::kWire, TestPath::kHost,
                                           TestPath::kSharedAddress),
                         path_name);

// IBA 10.2.9.3: each message takes the SRQ's oldest WQE, whichever QP it came on;
// its completion names that QP (ibv_wc.qp_num) on the QP's receive CQ.
TEST_P(SrqTest, TwoQpsConsumeOneQueueInOrder) {
  add_second_pair();
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_EQ(post_srq(*b.srq, b, 8192 * id, 4096, id), 0);
  fill(a, 0, 3000, 1);
  fill(a, 4096, 100, 2);
  fill(a, 8192, 2500, 3);
  ASSERT_EQ(send_on(*a.qp, a, 0, 3000, 11), 0);  // three packets at MTU 1024
  pump();
  ASSERT_EQ(send_on(*a2_, a, 4096, 100, 12), 0);
  pump();
  ASSERT_EQ(send_on(*a.qp, a, 8192, 2500, 13), 0);
  pump();
  const auto wcs = poll(b.rcq);
  ASSERT_EQ(wcs.size(), 3u);
  const uint32_t qpns[] = {b.qp->qpn(), b2_->qpn(), b.qp->qpn()};
  const uint32_t lengths[] = {3000, 100, 2500};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].qp_num, qpns[i]);
    EXPECT_EQ(wcs[i].byte_len, lengths[i]);
  }
  EXPECT_TRUE(same(a, 0, b, 8192, 3000));
  EXPECT_TRUE(same(a, 4096, b, 16384, 100));
  EXPECT_TRUE(same(a, 8192, b, 24576, 2500));
  // On one host the senders placed them: no packet, and b completed each.
  EXPECT_EQ(a.counters().tx_packets.load() == 0, host());
  EXPECT_EQ(b.counters().host_receives.load(), host() ? 3u : 0u);
}

// An empty SRQ is an RNR NAK (IBA 9.7.5.2.8) like an empty receive queue; the
// retry lands once a WQE is posted.
TEST_P(SrqTest, EmptyQueueIsReceiverNotReadyUntilAPost) {
  fill(a, 0, 64, 5);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 1), 0);
  pump();
  // Over the wire b answers RNR NAK; on one host a finds no WQE and waits b's
  // min_rnr_timer itself.
  EXPECT_GE(host() ? a.counters().host_rnr_waits.load() : b.counters().rnr_naks_sent.load(), 1u);
  ASSERT_EQ(post_srq(*b.srq, b, 4096, 64, 77), 0);
  ASSERT_TRUE(run_until([&] { return b.rcq->depth() == 1; }));
  const auto wcs = poll(b.rcq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 77u);
  EXPECT_TRUE(same(a, 0, b, 4096, 64));
}

// IBA 10.2.9.2: an armed limit fires once when fewer WQEs than it remain, then
// reads back as 0 (disarmed) until armed again.
TEST_P(SrqTest, LimitFiresOnceWhenFewerRemain) {
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_EQ(post_srq(*b.srq, b, 64 * id, 64, id), 0);
  ASSERT_EQ(b.srq->modify(ibv_srq_attr{0, 0, 4}, IBV_SRQ_LIMIT), 0);
  EXPECT_EQ(b.srq->query().srq_limit, 4u);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 8, 0, 1), 0);  // 4 left: not below
  pump();
  EXPECT_TRUE(events(*b.device).empty());
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 8, 0, 2), 0);  // 3 left
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 8, 0, 3), 0);  // 2 left: fired already
  pump();
  const auto fired = events(*b.device);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(fired[0].srq, b.srq);
  EXPECT_EQ(b.srq->query().srq_limit, 0u);
  EXPECT_EQ(poll(b.rcq).size(), 3u);
}

// ibv_modify_srq(3) / ibv_post_srq_recv(3) / ibv_create_srq(3) refusals.
TEST_P(SrqTest, ModifyPostAndCreateRefuseWhatTheManPagesSay) {
  EXPECT_EQ(b.srq->modify(ibv_srq_attr{0, 0, 9}, IBV_SRQ_LIMIT), EINVAL);  // > max_wr 8
  EXPECT_EQ(b.srq->modify(ibv_srq_attr{16, 0, 0}, IBV_SRQ_MAX_WR), EINVAL);  // no resize
  EXPECT_EQ(b.srq->modify(ibv_srq_attr{}, 1 << 5), EINVAL);
  EXPECT_EQ(post_srq(*b.srq, b, 0, 8, 1, 5), EINVAL);  // 5 SGEs > max_sge 4
  for (int i = 0; i < 8; ++i) ASSERT_EQ(post_srq(*b.srq, b, 0, 8, i), 0);
  EXPECT_EQ(post_srq(*b.srq, b, 0, 8, 9), ENOMEM);
  const ibv_srq_attr got = b.srq->query();
  EXPECT_EQ(got.max_wr, 8u);
  EXPECT_EQ(got.max_sge, 4u);
  int err = 0;
  SrqInit init;
  init.attr = ibv_srq_attr{0, 1, 0};
  EXPECT_EQ(b.device->create_srq(b.pd, init, err), nullptr);
  EXPECT_EQ(err, EINVAL);
  init.attr = ibv_srq_attr{b.device->limits().max_srq_wr + 1, 1, 0};
  EXPECT_EQ(b.device->create_srq(b.pd, init, err), nullptr);
  EXPECT_EQ(err, EINVAL);
  init.attr = ibv_srq_attr{4, 1, 0};
  init.type = IBV_SRQT_TM;  // without its CQ and tag list size
  EXPECT_EQ(b.device->create_srq(b.pd, init, err), nullptr);
  EXPECT_EQ(err, EINVAL);
  // A QP attached to an SRQ has no receive queue of its own (ibv_post_recv(3)).
  ibv_sge sge{b.addr(0), 8, b.mr->key};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(b.qp->post_recv(&wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

// ibv_destroy_srq(3): EBUSY while a QP uses it; a stale handle is EINVAL.
TEST_P(SrqTest, DestroyWaitsForItsQps) {
  EXPECT_EQ(b.device->destroy_srq(b.srq), EBUSY);
  EXPECT_EQ(b.device->dealloc_pd(b.pd), EBUSY);
  ASSERT_EQ(b.device->destroy_qp(b.qp), 0);
  b.qp = nullptr;
  EXPECT_EQ(b.device->destroy_srq(b.srq), 0);
  EXPECT_EQ(b.device->destroy_srq(b.srq), EINVAL);
  b.srq = nullptr;
}

// IBA 10.2.9.4 / 11.6.3.1: a QP in Error flushes only the WQE it took, reports
// Last WQE Reached, and leaves the SRQ's other WQEs to the other QPs.
TEST_P(SrqTest, ErrorFlushesOnlyTheTakenWqeAndReportsLastWqe) {
  add_second_pair();
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(post_srq(*b.srq, b, 4096 * id, 4096, id), 0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(b.qp->modify(attr, IBV_QP_STATE), 0);
  pump();
  const auto fired = events(*b.device);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(fired[0].qpn, b.qp->qpn());
  EXPECT_TRUE(poll(b.rcq).empty()) << "no WQE was taken: nothing to flush";
  ASSERT_EQ(send_on(*a2_, a, 0, 16, 5), 0);
  pump();
  const auto wcs = poll(b.rcq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].qp_num, b2_->qpn());
}

// UD receives from an SRQ too (IBA 10.2.9: RC, UC, UD and XRC may use one).
TEST_P(SrqTest, UdQpReceivesFromTheSrq) {
  RcOptions o;
  o.type = IBV_QPT_UD;
  o.srq_wrs = 4;
  connect(o);
  ASSERT_EQ(post_srq(*b.srq, b, 0, 40 + 256, 31), 0);
  Ah* ah = make_ah(a, b);
  fill(a, 4096, 256, 9);
  ASSERT_EQ(post_ud(a, ah, IBV_WR_SEND, 4096, 256, 1, o.qkey), 0);
  pump();
  const auto wcs = poll(b.rcq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 31u);
  EXPECT_EQ(wcs[0].byte_len, 40u + 256u);
  EXPECT_TRUE(same(a, 4096, b, 40, 256));
}

}  // namespace
}  // namespace softrdma::engine::testing
