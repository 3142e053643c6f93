// SENDs on the same-host path (engine/rc/host_send.cc,
// engine/host/qp_recv.cc): the sender places the message into the receiver's
// posted WQE, waits out the receiver's RNR timer when none is posted, and the
// receiver completes the WQE at its next turn. What
// both paths share (delivery, immediate data, a message too long, bad keys) is
// tested over both by RcOpsTest and RcErrorTest.
#include <array>
#include <cstring>
#include <string>

#include "engine/rc_fixture.h"
#include "samehost/peer_node.h"

namespace softrdma::engine::testing {
namespace {

constexpr size_t kDst = 128 * 1024;

using RcHostSendTest = RcHostPairTest;

TEST_F(RcHostSendTest, ASendIsPlacedWithoutAPacketAndCompletesAtTheReceiver) {
  fill(a, 0, 5000, 4);
  post_recv(b, kDst, 8192, 77);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 5000, 0, 1), 0);
  pump();
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].wr_id, 77u);
  EXPECT_EQ(got[0].byte_len, 5000u);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(got[0].src_qp, a.qp->qpn());
  EXPECT_TRUE(same(a, 0, b, kDst, 5000));
  EXPECT_EQ(a.counters().tx_packets.load(), 0u) << "nothing on the wire";
  EXPECT_EQ(a.counters().host_sends.load(), 1u);
  EXPECT_EQ(b.counters().host_receives.load(), 1u);
}

// A queue of at most samehost::kSharedSges scatter entries keeps a copy of its
// scatter lists, and its results, in the node segment: the sender reads the one
// and writes the other with loads and stores. A larger queue's are in the
// receiver's memory: one system call reads the scatter list, one writes the
// result. The payload goes by stores onto shared pages (samehost/shared_pages.h),
// by cross-memory attach without them (then with the result, in one call). Either
// way the message lands where the WQE says.
TEST_F(RcHostSendTest, ASmallQueuesScatterListIsReadFromTheSegment) {
  for (const bool pages : {true, false}) {
    for (const uint32_t depth : {16u, 512u}) {
      SCOPED_TRACE(std::to_string(depth) + (pages ? " shared pages" : " no shared pages"));
      RcOptions small;
      small.max_recv_wr = depth;
      small.max_recv_sge = 4;
      small.shared_pages = pages ? RcOptions{}.shared_pages : 0;
      connect(small);
      const bool in_segment = depth * 4 <= samehost::kSharedSges;
      for (uint64_t i = 0; i < 3 * depth / 2; ++i) {  // the ring wraps past its slots
        fill(a, 0, 64, uint32_t(i));
        post_recv(b, kDst + i % 4 * 256, 256, i);
        ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, i), 0);
        pump();
        const auto got = poll(b.rcq);
        ASSERT_EQ(got.size(), 1u);
        ASSERT_EQ(got[0].status, IBV_WC_SUCCESS);
        ASSERT_EQ(got[0].wr_id, i);
        ASSERT_EQ(got[0].byte_len, 64u);
        ASSERT_TRUE(same(a, 0, b, kDst + i % 4 * 256, 64));
        poll(a.scq);
      }
      const uint64_t sends = 3 * depth / 2;
      EXPECT_EQ(a.counters().host_sends.load(), sends);
      EXPECT_EQ(a.counters().host_mapped.load(), pages ? sends : 0);
      const uint64_t calls_each = (in_segment ? 0 : 2) + (pages || !in_segment ? 0 : 1);
      EXPECT_EQ(a.counters().host_calls.load(), calls_each * sends);
    }
  }
}

// A scatter list of three buffers takes the message in order (IBA 10.7.2.2).
TEST_F(RcHostSendTest, AScatterListIsFilledInOrder) {
  fill(a, 0, 3000, 8);
  std::array<ibv_sge, 3> sges{ibv_sge{b.addr(kDst), 1000, b.mr->key},
                              ibv_sge{b.addr(kDst + 4096), 1000, b.mr->key},
                              ibv_sge{b.addr(kDst + 8192), 1500, b.mr->key}};
  ibv_recv_wr wr{};
  wr.wr_id = 5;
  wr.sg_list = sges.data();
  wr.num_sge = 3;
  ASSERT_EQ(b.qp->post_recv(&wr, nullptr), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 3000, 0, 1), 0);
  pump();
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].byte_len, 3000u);
  EXPECT_TRUE(same(a, 0, b, kDst, 1000));
  EXPECT_TRUE(same(a, 1000, b, kDst + 4096, 1000));
  EXPECT_TRUE(same(a, 2000, b, kDst + 8192, 1000));
}

// IBA 9.7.5.1.4: no receive posted is RNR; the sender waits the receiver's
// min_rnr_timer and tries again, and the message arrives once one is posted.
TEST_F(RcHostSendTest, NoReceivePostedWaitsTheRnrTimerThenDelivers) {
  fill(a, 0, 100, 2);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  pump();
  EXPECT_TRUE(poll(a.scq).empty());
  EXPECT_EQ(a.counters().host_rnr_waits.load(), 1u);
  post_recv(b, kDst, 100, 3);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 3u);
  EXPECT_TRUE(same(a, 0, b, kDst, 100));
}

// rnr_retry 3: four tries, then IBV_WC_RNR_RETRY_EXC_ERR and the QP in Error.
TEST_F(RcHostSendTest, RnrRetriesExhaustedIsRnrRetryExceeded) {
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(a.counters().host_rnr_waits.load(), uint64_t(options_.rnr_retry) + 1);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
}

// A receiver whose QP went to Error flushes its WQEs and takes no more messages:
// the sender sees a QP that takes no request (as a lost one: RETRY_EXC_ERR).
TEST_F(RcHostSendTest, AReceiverInErrorTakesNothingMore) {
  post_recv(b, kDst, 100, 1);
  b.qp->enter_error(0);
  auto flushed = poll(b.rcq);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }, 10'000'000'000));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(poll(b.rcq).empty());
  EXPECT_EQ(b.counters().host_receives.load(), 0u);
}

// An SRQ's WQEs are claimed in order but filled by as many senders as it has
// QPs, each at its own pace (engine/host/srq_recv.cc): a result is written when
// its sender is done, and the owner completes results in claim order, so that
// every completed WQE's slot can be posted again at once (max_wr outstanding,
// never fewer). A WQE a sender claimed and then voided, or whose result names no
// QP of the SRQ, is consumed without a completion, and counted.
TEST_F(RcHostSendTest, AnSrqsResultsCompleteInClaimOrder) {
  RcOptions o;
  o.srq_wrs = 8;
  connect(o);
  auto post_srq = [&](uint64_t wr_id) {
    ibv_sge sge{b.addr(kDst + wr_id * 256), 256, b.mr->key};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return b.srq->post_recv(&wr, nullptr);
  };
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(post_srq(id), 0);
  samehost::RecvState& rq = *b.srq->host_recv();
  samehost::RecvResult* results = b.host->node().recv_results(b.srq->host_recv_queue() - 1);
  // Another sender took WQE 0 and is still filling it: inside its access.
  std::string why;
  auto other = samehost::PeerNode::open(b.device->gids()[1], why, node_directory_.path());
  ASSERT_NE(other, nullptr) << why;
  ASSERT_TRUE(other->join());
  other->begin_access();
  rq.claimed.store(1);
  fill(a, 0, 64, 6);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 1), 0);
  pump();
  b.srq->drain_host_receives(0);
  EXPECT_TRUE(poll(b.rcq).empty()) << "WQE 1 waits for WQE 0";
  EXPECT_TRUE(same(a, 0, b, kDst + 2 * 256, 64)) << "its data is there already";
  for (uint64_t id = 4; id <= 8; ++id) ASSERT_EQ(post_srq(id), 0);
  EXPECT_EQ(post_srq(9), ENOMEM) << "8 WQEs outstanding";
  // WQE 0 is voided; WQE 2, claimed by another sender, names a QP that is none of
  // the SRQ's.
  results[0] = samehost::RecvResult{};
  results[0].flags = samehost::RecvResult::kVoid;
  results[0].seq = 1;
  rq.claimed.store(3);
  results[2] = samehost::RecvResult{};
  results[2].qpn = 0xabcdef;
  results[2].seq = 3;
  other->end_access();
  EXPECT_TRUE(b.srq->drain_host_receives(0));
  const auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 2u);
  EXPECT_EQ(got[0].qp_num, b.qp->qpn());
  EXPECT_EQ(b.counters().host_receives_dropped.load(), 2u);
  for (uint64_t id = 9; id <= 11; ++id)
    EXPECT_EQ(post_srq(id), 0) << "the head moved past WQEs 0 to 2";
  EXPECT_EQ(post_srq(12), ENOMEM);
}

// A hostile peer that claims past what was posted and writes a complete-looking
// result there gets no completion out of the owner: there is no WQE.
TEST_F(RcHostSendTest, AResultPastWhatAnSrqPostedCompletesNothing) {
  RcOptions o;
  o.srq_wrs = 8;
  connect(o);
  ibv_sge sge{b.addr(kDst), 64, b.mr->key};
  ibv_recv_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ASSERT_EQ(b.srq->post_recv(&wr, nullptr), 0);  // index 0
  samehost::RecvState& rq = *b.srq->host_recv();
  samehost::RecvResult* results = b.host->node().recv_results(b.srq->host_recv_queue() - 1);
  rq.claimed.store(2);
  results[1] = samehost::RecvResult{};
  results[1].byte_len = 8;
  results[1].qpn = b.qp->qpn();
  results[1].seq = 2;  // "complete", for index 1, which was never posted
  b.srq->drain_host_receives(0);
  EXPECT_TRUE(poll(b.rcq).empty());
  EXPECT_EQ(b.counters().host_receives.load(), 0u);
}

// An SRQ whose results do not fit in the node segment is not published: SENDs to
// its QPs take the wire, and arrive.
TEST_F(RcHostSendTest, AnSrqTooLargeForTheSegmentTakesTheWire) {
  RcOptions o;
  o.srq_wrs = 2 * samehost::kSharedSges;
  wire_traffic_expected_ = true;
  connect(o);
  EXPECT_EQ(b.srq->host_recv_queue(), 0u);
  fill(a, 0, 64, 5);
  ibv_sge sge{b.addr(kDst), 64, b.mr->key};
  ibv_recv_wr wr{};
  wr.wr_id = 9;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ASSERT_EQ(b.srq->post_recv(&wr, nullptr), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.counters().host_sends.load(), 0u);
  EXPECT_GT(a.counters().tx_packets.load(), 0u);
  EXPECT_TRUE(same(a, 0, b, kDst, 64));
}

}  // namespace
}  // namespace softrdma::engine::testing
