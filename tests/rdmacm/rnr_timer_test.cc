// The RNR NAK timer rdma_cm gives a connected QP (rdma_init_qp_attr(3) for RTR,
// and the QPs rdma_connect(3) / rdma_accept(3) move themselves). The kernel's
// CM sets min_rnr_timer 0 for RC (cm_init_qp_rtr_attr in
// drivers/infiniband/core/cm.c), which IBA Table 45 reads as 655.36 ms: a
// requester with rnr_retry 5 (pyverbs' ConnParam default) keeps resending for
// about 3.9 s before RNR_RETRY_EXC_ERR, and programs rely on that window to post
// their receive after the peer's SEND (rdma-core's
// test_rdmacm_async_traffic_external_qp). 0.64 ms would leave them about 4 ms.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "rdmacm/connecting.h"

namespace softrdma::rdmacm::testing {
namespace {

using Clock = std::chrono::steady_clock;

// One completion of `cq` within `limit` (a hang guard; nothing is timed).
bool poll_one(ibv_cq* cq, ibv_wc& wc, std::chrono::seconds limit = std::chrono::seconds(15)) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n != 0) return n == 1;
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // not an event: a poll's pace
  }
  return false;
}

// An established connection between c.client.id and the returned child, with
// `rnr_retry` asked for by the client; no receive is posted on either side.
rdma_cm_id* establish(Connecting& c, uint8_t rnr_retry) {
  EXPECT_EQ(c.connect("rnr", rnr_retry), 0);
  rdma_cm_event* request = expect_event(c.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  if (request == nullptr) return nullptr;
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  ibv_qp_init_attr attr = rc_attr();
  EXPECT_EQ(rdma_create_qp(child, nullptr, &attr), 0);
  rdma_conn_param accept{};
  accept.responder_resources = accept.initiator_depth = 1;
  accept.retry_count = 7;
  accept.rnr_retry_count = rnr_retry;
  EXPECT_EQ(rdma_accept(child, &accept), 0);
  rdma_ack_cm_event(expect_event(c.client.channel, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(expect_event(c.server.channel, RDMA_CM_EVENT_ESTABLISHED));
  return child;
}

void finish(Connecting& c, rdma_cm_id* child) {
  rdma_disconnect(c.client.id);
  rdma_ack_cm_event(expect_event(c.server.channel, RDMA_CM_EVENT_DISCONNECTED));
  rdma_ack_cm_event(expect_event(c.client.channel, RDMA_CM_EVENT_DISCONNECTED));
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
}

TEST(RnrTimer, RtrAttributesCarryTheKernelCmsTimer) {
  Connecting c;
  rdma_cm_id* child = establish(c, 5);
  ASSERT_NE(child, nullptr);
  for (rdma_cm_id* id : {c.client.id, child}) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    int mask = 0;
    ASSERT_EQ(rdma_init_qp_attr(id, &attr, &mask), 0);
    EXPECT_TRUE(mask & IBV_QP_MIN_RNR_TIMER);
    EXPECT_EQ(attr.min_rnr_timer, 0) << "IBA Table 45: 0 is 655.36 ms";
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(id->qp, &attr, IBV_QP_MIN_RNR_TIMER, &init), 0);
    EXPECT_EQ(attr.min_rnr_timer, 0) << "the QP rdma_connect/rdma_accept moved";
  }
  finish(c, child);
}

// The receiver posts its receive 50 ms after the SEND arrived (a busy or
// descheduled process): within the RNR retry budget of 5 retries of 655.36 ms,
// the SEND is delivered and both sides complete successfully.
TEST(RnrTimer, ReceivePostedLateWithinTheRetryBudgetGetsTheSend) {
  Connecting c;
  rdma_cm_id* child = establish(c, 5);
  ASSERT_NE(child, nullptr);
  std::vector<char> inbox(64), outbox(64, 'r');
  ibv_mr* in_mr = ibv_reg_mr(child->pd, inbox.data(), inbox.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* out_mr = ibv_reg_mr(c.client.id->pd, outbox.data(), outbox.size(), 0);
  ASSERT_NE(in_mr, nullptr);
  ASSERT_NE(out_mr, nullptr);

  ASSERT_EQ(post_send_from(c.client.id->qp, outbox.data(), 64, out_mr), 0);
  // Not an event: the receiver is late on purpose, past what the RNR retries of a
  // 0.64 ms timer would wait (about 4 ms), well within those of 655.36 ms.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(post_recv_into(child->qp, inbox.data(), 64, in_mr), 0);

  ibv_wc wc{};
  ASSERT_TRUE(poll_one(c.client.id->send_cq, wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  ASSERT_TRUE(poll_one(child->recv_cq, wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(std::memcmp(inbox.data(), outbox.data(), inbox.size()), 0);
  ibv_dereg_mr(in_mr);
  ibv_dereg_mr(out_mr);
  finish(c, child);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
