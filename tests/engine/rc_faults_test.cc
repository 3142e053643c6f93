// Loss, duplication, reordering and receiver-not-ready, each recovered as IBA 9.7
// prescribes, with the bytes and completions checked on both sides.
#include <cstring>

#include "engine/rc_fixture.h"
#include "wire/fields.h"
#include "wire/opcodes.h"
#include "wire/psn.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakePacket;
namespace match = transport::fake::match;
namespace op = wire::op;

constexpr size_t kDst = 128 * 1024;

bool sq_idle(Node& n) { return n.qp->sq().empty(); }

class LostRequestTest : public RcPairTest, public ::testing::WithParamInterface<int> {};
INSTANTIATE_TEST_SUITE_P(FirstMiddleLast, LostRequestTest, ::testing::Values(0, 1, 2));

// A 3-packet SEND loses its first, middle or last packet once. Expect: a gap is
// NAKed (PSN sequence error, IBA 9.7.5.1.3) or, for the last packet, the ACK
// timer fires; go-back-N resends; one receive completion with the right bytes.
TEST_P(LostRequestTest, SendRecoversFromOneLostPacket) {
  const int lost = GetParam();
  fill(a, 0, 3000, 10);
  post_recv(b, kDst, 4096, 1);
  net_.drop(match::psn(wire::psn_add(options_.a_psn, lost)));
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 3000, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].byte_len, 3000u);
  EXPECT_TRUE(same(a, 0, b, kDst, 3000));
  EXPECT_GE(a.counters().retransmitted_packets.load(), 1u);
  if (lost < 2) {
    EXPECT_EQ(b.counters().seq_naks_sent.load(), 1u);
    EXPECT_EQ(a.counters().seq_naks_received.load(), 1u);
  } else {
    EXPECT_EQ(a.counters().retransmit_timeouts.load(), 1u);
  }
}

// The same for a WRITE: the middle packet lost; resent from the middle, no RETH.
TEST_F(RcPairTest, WriteRecoversFromLostMiddlePacket) {
  fill(a, 0, 5000, 11);
  net_.drop(match::psn(wire::psn_add(options_.a_psn, 2)));
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 5000, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 5000));
}

// The ACK is lost. Expect: the requester times out and resends its one packet, twice
// (a restart of a lone packet, docs/decisions/retransmission.md "Resuming"); the
// responder sees duplicates, re-acknowledges and does not deliver twice (IBA 9.7.5.1.2).
TEST_F(RcPairTest, LostAckIsRecoveredByDuplicateReAck) {
  post_recv(b, kDst, 4096, 1);
  post_recv(b, kDst, 4096, 2);
  net_.drop(match::opcode(op::kRcAcknowledge));
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  pump();
  EXPECT_TRUE(poll(a.scq).empty());  // no ACK yet
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).size(), 1u);
  EXPECT_EQ(poll(b.rcq).size(), 1u);  // delivered once
  EXPECT_EQ(b.counters().duplicate_requests.load(), 2u);
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 1u);
}

// A READ response in the middle is lost. Expect: the requester asks again from the
// missing PSN (IBA 9.7.4.1.4) and the data arrives whole.
TEST_F(RcPairTest, LostReadResponseIsRequestedAgain) {
  fill(b, kDst, 3000, 12);
  net_.drop(match::opcode(op::kRcReadResponseMiddle));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 3000, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 3000));
  EXPECT_GE(b.counters().duplicate_reads.load(), 1u);
}

// The last READ response is lost: only the timer can tell. The READ is re-issued.
TEST_F(RcPairTest, LostLastReadResponseTimesOutAndRetries) {
  fill(b, kDst, 3000, 13);
  net_.drop(match::opcode(op::kRcReadResponseLast));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 3000, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 3000));
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 1u);
}

// A packet is duplicated by the network. Expect: executed once, acknowledged again.
TEST_F(RcPairTest, DuplicatedSendIsDeliveredOnce) {
  post_recv(b, kDst, 4096, 1);
  post_recv(b, kDst + 4096, 4096, 2);
  net_.duplicate(match::opcode(op::kRcSendOnly));
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 1), 0);
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u);
  EXPECT_EQ(poll(a.scq).size(), 1u);
  EXPECT_EQ(b.counters().duplicate_requests.load(), 1u);
  EXPECT_EQ(b.qp->rq().size(), 1u);  // the second receive is still there
}

// A duplicated FETCH_ADD must not add twice: the responder replays the saved result.
TEST_F(RcPairTest, DuplicateAtomicIsReplayedNotReexecuted) {
  store64(b, 256, 7);
  net_.drop(match::opcode(op::kRcAtomicAcknowledge));  // the first answer is lost
  ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 256, 5, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(load64(b, 256), 12u);  // added once
  EXPECT_EQ(load64(a, 0), 7u);
  // The retry sends the ATOMIC twice (a lone request): both copies are answered
  // from the cache.
  EXPECT_EQ(b.counters().duplicate_atomics_replayed.load(), 2u);
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
}

// A gentle restart resends two packets, each asking for an ACK: losing one of
// them does not waste the retry (docs/decisions/retransmission.md "Resuming").
// FIRST, MIDDLE, LAST at MTU 1024; the LAST is lost, then the restart's FIRST.
TEST_F(RcPairTest, RestartOutlivesTheLossOfOneOfItsTwoPackets) {
  fill(a, 0, 3000, 19);
  post_recv(b, kDst, 4096, 1);
  net_.drop(match::opcode(op::kRcSendLast));
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 3000, 0, 1), 0);
  pump();
  net_.drop(match::opcode(op::kRcSendFirst));  // the restart's first packet
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  ASSERT_EQ(poll(b.rcq).size(), 1u);
  EXPECT_TRUE(same(a, 0, b, kDst, 3000));
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 1u);
}

// A READ is one request: its restart is that request, sent twice. Losing the
// original and one copy of the resend costs one timeout, and the data arrives.
TEST_F(RcPairTest, ReadRetryOutlivesTheLossOfOneCopyOfItsRequest) {
  fill(b, kDst, 3000, 14);
  net_.drop(match::opcode(op::kRcReadRequest), 2);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 3000, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 3000));
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 1u);
}

// After a timeout the restart resends the oldest unacknowledged packets, two of
// them, each asking for an ACK, the first of them twice: the retry gets nowhere
// without it (docs/decisions/retransmission.md "Resuming").
TEST_F(RcPairTest, RestartAfterTimeoutSendsTwoPacketsWithAckReqTheFirstTwice) {
  post_recv(b, kDst, 8192, 1);
  net_.drop(match::opcode(op::kRcSendLast));
  net_.take_sent();
  // FIRST, MIDDLE, LAST at MTU 1024; without the LAST nothing is acknowledged and the
  // timer restarts the message from its FIRST.
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 3000, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 1u);
  EXPECT_EQ(a.counters().retries.load(), 1u);
  std::vector<uint8_t> sent_opcodes;
  for (const auto& p : net_.take_sent()) {
    if (!p.view().info().is(wire::kOpRequest)) continue;
    sent_opcodes.push_back(p.opcode());
    if (sent_opcodes.size() >= 4 && sent_opcodes.size() <= 6) {
      EXPECT_TRUE(p.ack_req()) << p.summary();
    }
  }
  EXPECT_EQ(sent_opcodes, (std::vector<uint8_t>{op::kRcSendFirst, op::kRcSendMiddle,
                                                op::kRcSendLast, op::kRcSendFirst, op::kRcSendFirst,
                                                op::kRcSendMiddle, op::kRcSendLast}));
  EXPECT_EQ(b.counters().duplicate_requests.load(), 3u);
}

// A retry after a PSN sequence NAK resends the window, its first packet twice, as
// every retry does.
TEST_F(RcPairTest, RestartAfterNakRepeatsItsFirstPacket) {
  post_recv(b, kDst, 8192, 1);
  net_.drop(match::opcode(op::kRcSendFirst));
  net_.take_sent();
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 3000, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(a.counters().seq_naks_received.load(), 1u);
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 0u);
  size_t firsts = 0;
  for (const auto& p : net_.take_sent()) firsts += p.opcode() == op::kRcSendFirst;
  EXPECT_EQ(firsts, 3u);  // the lost one and two copies of its resend
}

// The packets of a 4-packet SEND arrive in reverse order. Expect: out-of-order ones
// draw one NAK; go-back-N brings them in order; the data is whole.
TEST_F(RcPairTest, ReorderedPacketsAreRecovered) {
  fill(a, 0, 4000, 14);
  post_recv(b, kDst, 4096, 1);
  net_.hold(match::to(b.device->gids()[1]), 4);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 4000, 0, 1), 0);
  ASSERT_EQ(net_.held_count(), 4u);
  net_.release_held_reversed();
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  ASSERT_EQ(poll(b.rcq).size(), 1u);
  EXPECT_TRUE(same(a, 0, b, kDst, 4000));
  EXPECT_EQ(b.counters().seq_naks_sent.load(), 1u);
}

// No receive is posted: RNR NAK with the responder's min_rnr_timer (IBA 9.7.5.2.8);
// once a receive is posted the retry succeeds.
TEST_F(RcPairTest, RnrNakThenSuccess) {
  fill(a, 0, 100, 15);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  pump();
  EXPECT_EQ(b.counters().rnr_naks_sent.load(), 1u);
  EXPECT_EQ(a.counters().rnr_naks_received.load(), 1u);
  EXPECT_TRUE(poll(a.scq).empty());
  post_recv(b, kDst, 4096, 1);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 100));
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
}

// Receives never come: after rnr_retry retries the requester fails with
// IBV_WC_RNR_RETRY_EXC_ERR and its QP goes to Error; the responder stays in RTS.
TEST_F(RcPairTest, RnrRetriesExhausted) {
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 2), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(a.counters().rnr_naks_received.load(), options_.rnr_retry + 1u);
}

// The peer vanishes (every packet lost): after retry_cnt retransmissions the WQE
// fails with IBV_WC_RETRY_EXC_ERR and the QP goes to Error (IBA 9.7.6.1.3).
TEST_F(RcPairTest, TransportRetriesExhausted) {
  net_.drop(match::from(a.device->gids()[1]), transport::fake::FakeNetwork::kEvery);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 100, kDst, 2), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), options_.retry_cnt + 1u);
  EXPECT_EQ(a.counters().retries.load(), options_.retry_cnt);
  EXPECT_EQ(a.counters().retry_streak_max.load(), options_.retry_cnt + 1u);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
}

// PSNs wrap from 0xffffff to 0 inside messages of every kind (IBA 9.7.1).
TEST_F(RcPairTest, PsnWrapAround) {
  RcOptions o;
  o.a_psn = 0xfffffe;
  o.b_psn = 0xffffff;
  connect(o);
  fill(a, 0, 5000, 16);
  fill(b, 64 * 1024, 5000, 17);
  post_recv(b, kDst, 8192, 1);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 5000, 0, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 8192, 5000, 64 * 1024, 2), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 5000, kDst + 8192, 3), 0);
  ASSERT_EQ(post(b, IBV_WR_RDMA_WRITE, 64 * 1024, 3000, 16384, 4), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a) && sq_idle(b); }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 3u);
  for (auto& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 5000));
  EXPECT_TRUE(same(a, 8192, b, 64 * 1024, 5000));
  EXPECT_TRUE(same(a, 0, b, kDst + 8192, 5000));
  EXPECT_TRUE(same(b, 64 * 1024, a, 16384, 3000));
  EXPECT_EQ(a.counters().retransmitted_packets.load(), 0u);
}

// Wrap-around with loss: the lost packet is the one at PSN 0.
TEST_F(RcPairTest, PsnWrapAroundWithLossAtZero) {
  RcOptions o;
  o.a_psn = 0xfffffe;
  connect(o);
  fill(a, 0, 5000, 18);
  net_.drop(match::psn(0));
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 5000, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 5000));
}

}  // namespace
}  // namespace softrdma::engine::testing
