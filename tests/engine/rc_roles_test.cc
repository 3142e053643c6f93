// One RC role at a time, driven by packets the test builds and judged by the
// packets it sends back (rc_role_fixture.h): the responder's answers to duplicate
// requests (IBA 9.7.5.1.2), the completer's NAK and RNR handling (IBA 9.7.5.2).
#include <algorithm>
#include <cstring>

#include "engine/rc_role_fixture.h"
#include "wire/fields.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakePacket;
namespace op = wire::op;
namespace syndrome = wire::syndrome;

std::vector<uint32_t> psns(const std::vector<FakePacket>& packets) {
  std::vector<uint32_t> out;
  for (const FakePacket& p : packets) out.push_back(p.psn());
  return out;
}

std::vector<uint8_t> opcodes(const std::vector<FakePacket>& packets) {
  std::vector<uint8_t> out;
  for (const FakePacket& p : packets) out.push_back(p.opcode());
  return out;
}

std::vector<uint8_t> payload(const FakePacket& p) {
  const auto bytes = p.view().payload();
  return {bytes.begin(), bytes.end()};
}

// ---- the responder ----

// The peer READs 3000 bytes: three responses of at most one MTU (1024).
// The same READ request arrives again, as a requester that lost the responses
// sends it. Expect: the responder re-executes it from its PSN (IBA 9.7.5.1.2: a
// READ is idempotent): the same three responses with the same bytes, the first
// of them twice (docs/decisions/retransmission.md "A retry's first packet and its
// answer"), and its expected PSN unchanged.
TEST_F(RcRoleTest, ResponderReplaysADuplicateReadFromItsPsn) {
  for (size_t i = 0; i < 3000; ++i) mem_[i] = uint8_t(i * 7);
  const std::vector<FakePacket> first = deliver(read_request(5000, 0, 3000));
  ASSERT_EQ(psns(first), (std::vector<uint32_t>{5000, 5001, 5002}));
  EXPECT_EQ(opcodes(first), (std::vector<uint8_t>{op::kRcReadResponseFirst,
                                                  op::kRcReadResponseMiddle,
                                                  op::kRcReadResponseLast}));

  const std::vector<FakePacket> again = deliver(read_request(5000, 0, 3000));
  ASSERT_EQ(psns(again), (std::vector<uint32_t>{5000, 5000, 5001, 5002}));
  EXPECT_EQ(payload(again[0]), payload(first[0]));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(again[i + 1].opcode(), first[i].opcode()) << again[i + 1].summary();
    EXPECT_EQ(payload(again[i + 1]), payload(first[i])) << "response " << i;
  }
  EXPECT_EQ(counters().duplicate_reads.load(), 1u);

  // A new request still takes the next PSN: the duplicate moved nothing on.
  const std::vector<FakePacket> next = deliver(read_request(5003, 0, 8));
  ASSERT_EQ(psns(next), (std::vector<uint32_t>{5003}));
  EXPECT_EQ(next[0].opcode(), op::kRcReadResponseOnly);
}

// The requester lacks only the last two responses and asks again from the first
// of them, for the rest of the range (IBA 9.7.4.1.4). Expect: responses from that
// PSN, with the bytes of that part of the range.
TEST_F(RcRoleTest, ResponderReplaysADuplicateReadFromTheMiddle) {
  for (size_t i = 0; i < 3000; ++i) mem_[i] = uint8_t(i * 13);
  const std::vector<FakePacket> first = deliver(read_request(5000, 0, 3000));
  ASSERT_EQ(first.size(), 3u);

  const std::vector<FakePacket> rest = deliver(read_request(5001, 1024, 3000 - 1024));
  ASSERT_FALSE(rest.empty());
  std::vector<FakePacket> unique = rest;
  unique.erase(std::unique(unique.begin(), unique.end(),
                           [](const FakePacket& x, const FakePacket& y) {
                             return x.psn() == y.psn();
                           }),
               unique.end());
  ASSERT_EQ(psns(unique), (std::vector<uint32_t>{5001, 5002}));
  EXPECT_EQ(payload(unique[0]), payload(first[1]));
  EXPECT_EQ(payload(unique[1]), payload(first[2]));
}

// The peer adds 5 to the 8 bytes at 512, which hold 100. Expect an ATOMIC
// acknowledge with the original 100, and 105 in memory.
// The same FETCH_ADD arrives again (its acknowledge was lost). Expect: the
// result cache answers it with the original 100 again (IBA 9.7.5.1.2: an ATOMIC
// is not executed twice); memory still holds 105.
TEST_F(RcRoleTest, AtomicResultCacheAnswersADuplicateWithoutExecutingIt) {
  store64(512, 100);
  const std::vector<FakePacket> first = deliver(fetch_add(5000, 512, 5));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].opcode(), op::kRcAtomicAcknowledge);
  EXPECT_EQ(first[0].psn(), 5000u);
  EXPECT_EQ(first[0].view().get(wire::atomic_ack_eth::kOriginalData), 100u);
  EXPECT_EQ(load64(512), 105u);

  const std::vector<FakePacket> again = deliver(fetch_add(5000, 512, 5));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].opcode(), op::kRcAtomicAcknowledge);
  EXPECT_EQ(again[0].psn(), 5000u);
  EXPECT_EQ(again[0].view().get(wire::atomic_ack_eth::kOriginalData), 100u);
  EXPECT_EQ(load64(512), 105u) << "the duplicate was executed";
  EXPECT_EQ(counters().duplicate_atomics_replayed.load(), 1u);
}

// A peer with more READ/ATOMICs outstanding than it may have (the QP allows
// max_dest_rd_atomic 16; under go-back-N 2 x 16 + 2 are served): a CNP has cut
// the responder's rate, so the first 64 KiB READ's responses wait for the pacer
// (the clock stands still) and 34 READs wait in the queue; then a FETCH_ADD.
// Expect: an Invalid Request NAK at the FETCH_ADD's PSN (IBA 9.5), its add not
// executed (memory keeps 100), and the refusal counted.
TEST_F(RcRoleTest, AnAtomicPastTheOutstandingLimitIsRefusedBeforeItExecutes) {
  RoleOptions options;
  options.line_rate_bytes_per_ns = 0.125;
  open(options);
  deliver(PeerPacket(op::kCnp, qp_->qpn(), 0, op::kCnpReservedBytes));
  store64(512, 100);
  constexpr uint32_t kReads = 2 * 16 + 2, kReadPackets = 64;
  uint32_t psn = 5000;
  std::vector<FakePacket> out;
  for (uint32_t i = 0; i < kReads; ++i, psn += kReadPackets) {
    for (FakePacket& p : deliver(read_request(psn, 0, kReadPackets * 1024)))
      out.push_back(std::move(p));
  }
  ASSERT_LT(out.size(), size_t(kReadPackets)) << "the first READ is still being answered";
  EXPECT_EQ(counters().responses_refused.load(), 0u);
  out = deliver(fetch_add(psn, 512, 5));
  for (FakePacket& p : advance(100'000'000, 1'000'000)) out.push_back(std::move(p));
  bool refused = false;
  for (const FakePacket& p : out)
    if (p.opcode() == op::kRcAcknowledge && p.psn() == psn)
      refused = syndrome_of(p) == syndrome::nak(syndrome::kNakInvalidRequest);
  EXPECT_TRUE(refused) << out.size() << " packets, none the NAK";
  EXPECT_EQ(load64(512), 100u) << "the refused FETCH_ADD was executed";
  EXPECT_EQ(counters().responses_refused.load(), 1u);
}

// Two receives are posted; a SEND arrives and takes the first. The same SEND
// arrives again (its ACK was lost). Expect: the responder acknowledges it again,
// with the same PSN, and completes nothing; the second receive is still there
// for the next SEND.
TEST_F(RcRoleTest, DuplicateSendIsReAcknowledgedWithoutASecondCompletion) {
  post_recv(0, 256, 1);
  post_recv(256, 256, 2);
  const std::vector<FakePacket> first = deliver(send_only(5000, 64));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].opcode(), op::kRcAcknowledge);
  EXPECT_EQ(first[0].psn(), 5000u);
  EXPECT_EQ(syndrome::type(syndrome_of(first[0])), syndrome::kAck);
  std::vector<ibv_wc> got = poll(rcq_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].byte_len, 64u);

  const std::vector<FakePacket> again = deliver(send_only(5000, 64));
  ASSERT_FALSE(again.empty());
  for (const FakePacket& p : again) {
    EXPECT_EQ(p.opcode(), op::kRcAcknowledge) << p.summary();
    EXPECT_EQ(p.psn(), 5000u) << p.summary();
    EXPECT_EQ(syndrome::type(syndrome_of(p)), syndrome::kAck) << p.summary();
    EXPECT_EQ(msn_of(p), msn_of(first[0])) << "the MSN moved on: a second message?";
  }
  EXPECT_TRUE(poll(rcq_).empty()) << "the duplicate completed a receive";
  EXPECT_EQ(counters().duplicate_requests.load(), 1u);

  ASSERT_EQ(deliver(send_only(5001, 32)).size(), 1u);
  got = poll(rcq_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 2u);
  EXPECT_EQ(got[0].byte_len, 32u);
}

// The SEND at 5000 is lost; 5001 and 5002 arrive. Expect: one NAK (PSN sequence
// error, naming 5000) for the gap, and silence for the packet after it (IBA
// 9.7.5.1.3: NAK once, then drop until the expected PSN comes). Then 5000
// arrives: it is taken and acknowledged.
TEST_F(RcRoleTest, ResponderNaksAGapOnceThenDropsUntilTheExpectedPsn) {
  post_recv(0, 256, 1);
  const std::vector<FakePacket> nak = deliver(send_only(5001, 16));
  ASSERT_EQ(nak.size(), 1u);
  EXPECT_EQ(nak[0].opcode(), op::kRcAcknowledge);
  EXPECT_EQ(nak[0].psn(), 5000u);
  EXPECT_EQ(syndrome_of(nak[0]), syndrome::nak(syndrome::kNakPsnSequence));
  EXPECT_TRUE(deliver(send_only(5002, 16)).empty()) << "a second NAK for the same gap";
  EXPECT_TRUE(poll(rcq_).empty());

  const std::vector<FakePacket> acked = deliver(send_only(5000, 16));
  ASSERT_EQ(acked.size(), 1u);
  EXPECT_EQ(acked[0].psn(), 5000u);
  EXPECT_EQ(syndrome::type(syndrome_of(acked[0])), syndrome::kAck);
  EXPECT_EQ(poll(rcq_).size(), 1u);
  EXPECT_EQ(counters().seq_naks_sent.load(), 1u);
}

// A SEND arrives with no receive posted. Expect: an RNR NAK naming its PSN and
// this QP's min_rnr_timer (IBA 9.7.5.1.4; code 1 here), nothing completed. The
// receive is posted and the requester resends. Expect: an ACK and one completion.
TEST_F(RcRoleTest, ResponderWithoutAReceiveAnswersRnrNakThenTakesTheResend) {
  const std::vector<FakePacket> rnr = deliver(send_only(5000, 16));
  ASSERT_EQ(rnr.size(), 1u);
  EXPECT_EQ(rnr[0].psn(), 5000u);
  EXPECT_EQ(syndrome_of(rnr[0]), syndrome::rnr_nak(options_.min_rnr_timer));
  EXPECT_EQ(counters().rnr_naks_sent.load(), 1u);

  post_recv(0, 256, 7);
  const std::vector<FakePacket> acked = deliver(send_only(5000, 16));
  ASSERT_EQ(acked.size(), 1u);
  EXPECT_EQ(syndrome::type(syndrome_of(acked[0])), syndrome::kAck);
  const std::vector<ibv_wc> got = poll(rcq_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 7u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
}

// ---- the requester and the completer ----

class RcRequesterRoleTest : public RcRoleTest {
 protected:
  // Posts `count` one-packet SENDs (wr_id 1, 2 ...) and returns what went out.
  std::vector<FakePacket> send(int count) {
    for (int i = 0; i < count; ++i) EXPECT_EQ(post_send(size_t(i) * 64, 64, uint64_t(i + 1)), 0);
    return run();
  }
};

// retry_cnt 1. Three SENDs leave (PSN 100..102); the peer NAKs a PSN sequence
// error at 100 (it saw 101 first). Expect: one retry, the window resent from 100
// (go-back-N, IBA 9.7.5.2.2), its first packet twice (docs/decisions/
// retransmission.md "A retry's first packet and its answer"). The same NAK comes
// again: no progress since the last retry, and the one retry allowed is spent.
// Expect: nothing resent; the first SEND completes with RETRY_EXC_ERR (IBA
// 9.7.6.1.3), the others are flushed, and the QP is in the error state.
TEST_F(RcRequesterRoleTest, NakAfterNakWithoutProgressExhaustsRetryCount) {
  RoleOptions o;
  o.retry_cnt = 1;
  open(o);
  ASSERT_EQ(psns(send(3)), (std::vector<uint32_t>{100, 101, 102}));

  const std::vector<FakePacket> retry = deliver(nak(100, syndrome::kNakPsnSequence));
  EXPECT_EQ(psns(retry), (std::vector<uint32_t>{100, 100, 101, 102}));
  EXPECT_TRUE(poll(scq_).empty());
  EXPECT_EQ(counters().retries.load(), 1u);

  EXPECT_TRUE(deliver(nak(100, syndrome::kNakPsnSequence)).empty()) << "a second retry";
  const std::vector<ibv_wc> done = poll(scq_);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, IBV_WC_RETRY_EXC_ERR) << int(done[0].status);
  EXPECT_EQ(done[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(done[2].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(qp_->state(), IBV_QPS_ERR);
  EXPECT_EQ(counters().seq_naks_received.load(), 2u);
}

// retry_cnt 1 again, but the second NAK names a later PSN: it acknowledges 100
// (IBA 9.7.5.2.2: a NAK acknowledges what precedes its PSN), which is progress
// and gives the retry count back (IBA 9.7.6.1.3 counts retries in a row).
// Expect: one retry per gap (each first packet twice, as above): 100..102 resent
// after the first NAK, 101..102 after the second; the first SEND completes, the
// other two wait for their ACK.
TEST_F(RcRequesterRoleTest, NakAfterNakWithProgressBetweenRetriesEachGap) {
  RoleOptions o;
  o.retry_cnt = 1;
  open(o);
  ASSERT_EQ(psns(send(3)), (std::vector<uint32_t>{100, 101, 102}));

  EXPECT_EQ(psns(deliver(nak(100, syndrome::kNakPsnSequence))),
            (std::vector<uint32_t>{100, 100, 101, 102}));
  EXPECT_EQ(psns(deliver(nak(101, syndrome::kNakPsnSequence))),
            (std::vector<uint32_t>{101, 101, 102}));
  std::vector<ibv_wc> done = poll(scq_);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(counters().retries.load(), 2u);

  EXPECT_TRUE(deliver(ack(102)).empty());
  done = poll(scq_);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].wr_id, 3u);
  EXPECT_EQ(done[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(qp_->state(), IBV_QPS_RTS);
}

// A SEND leaves; the peer has no receive and answers an RNR NAK asking for timer
// code 14. Expect: nothing is resent until the requester has paused 1280 us (IBA
// 9.7.5.2.8 Table 45), then the SEND again with the same PSN; its ACK completes it.
TEST_F(RcRequesterRoleTest, RnrNakPausesForTheTimerOfTheTableThenResends) {
  ASSERT_EQ(psns(send(1)), (std::vector<uint32_t>{100}));
  constexpr uint8_t kTimerCode = 14;
  constexpr Nanos kPause = Nanos(wire::kRnrTimerMicros[kTimerCode]) * 1000;
  static_assert(kPause == 1'280'000);

  EXPECT_TRUE(deliver(rnr_nak(100, kTimerCode)).empty()) << "resent at once";
  EXPECT_TRUE(advance(kPause - 10'000).empty()) << "resent before the RNR timer ran out";
  const std::vector<FakePacket> resent = advance(20'000);
  ASSERT_EQ(psns(resent), (std::vector<uint32_t>{100}));
  EXPECT_EQ(resent[0].opcode(), op::kRcSendOnly);
  EXPECT_EQ(counters().rnr_naks_received.load(), 1u);
  EXPECT_TRUE(poll(scq_).empty());

  EXPECT_TRUE(deliver(ack(100)).empty());
  const std::vector<ibv_wc> done = poll(scq_);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
}

// rnr_retry 1. The SEND is RNR NAKed, waits out the timer and is resent; the
// peer RNR NAKs it again. Expect: no second resend; the SEND completes with
// RNR_RETRY_EXC_ERR (IBA 9.7.5.2.8) and the QP is in the error state.
TEST_F(RcRequesterRoleTest, RnrNakAfterTheLastRnrRetryEndsTheQp) {
  RoleOptions o;
  o.rnr_retry = 1;
  open(o);
  ASSERT_EQ(psns(send(1)), (std::vector<uint32_t>{100}));
  EXPECT_TRUE(deliver(rnr_nak(100, 1)).empty());
  EXPECT_EQ(psns(advance(20'000)), (std::vector<uint32_t>{100})) << "10 us, then resent";

  EXPECT_TRUE(deliver(rnr_nak(100, 1)).empty());
  EXPECT_TRUE(advance(100'000).empty()) << "resent beyond rnr_retry";
  const std::vector<ibv_wc> done = poll(scq_);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << int(done[0].status);
  EXPECT_EQ(qp_->state(), IBV_QPS_ERR);
}

}  // namespace
}  // namespace softrdma::engine::testing
