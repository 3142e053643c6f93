// Selective repeat between two ends that agreed on it (rc/selective_repeat.h,
// docs/decisions/selective-repeat.md): what arrives beyond a gap is held, SACKs
// name it, only what was lost is resent; the bytes, completions and their order
// are what go-back-N gives.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>

#include "engine/rc/connection.h"
#include "engine/rc_fixture.h"
#include "wire/opcodes.h"
#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakePacket;
namespace match = transport::fake::match;
namespace op = wire::op;

constexpr size_t kDst = 128 * 1024;

bool sq_idle(Node& n) { return n.qp->sq().empty(); }

class SelectiveRepeatTest : public RcPairTest {
 protected:
  void SetUp() override {
    RcOptions o;
    o.selective = true;
    connect(o);
  }
  uint32_t a_psn(uint32_t packet) const { return wire::psn_add(options_.a_psn, int32_t(packet)); }
};

// A 20-packet WRITE loses two of its packets: the responder holds what follows
// each gap, the SACKs name the gaps, and exactly those two are resent; no PSN
// sequence NAK, no timeout.
TEST_F(SelectiveRepeatTest, AWriteResendsOnlyThePacketsLost) {
  fill(a, 0, 20 * 1024, 31);
  net_.drop(match::psn(a_psn(3)));
  net_.drop(match::psn(a_psn(9)));
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 20 * 1024, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 20 * 1024));
  EXPECT_EQ(a.counters().retransmitted_packets.load(), 2u);
  EXPECT_GE(b.counters().sacks_sent.load(), 1u);
  EXPECT_GE(a.counters().sacks_received.load(), 1u);
  EXPECT_EQ(b.counters().reorder_held.load(), 15u) << "4..8 and 10..19";
  EXPECT_EQ(b.counters().seq_naks_sent.load(), 0u);
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 0u);
  EXPECT_EQ(a.counters().sacks_refused.load(), 0u);
}

// Both spans, one body: a window set beyond either (SOFTRDMA_WINDOW up to 4096)
// is held to the agreed span, so one lost packet costs one resend and no probe
// (wider, the responder dropped what lay beyond the span, and each of those PSNs
// waited for a tail probe: 0.5 MB/s at 5 % loss where 128 moved 745); with the
// wide SACK the responder holds what lies more than 128 PSNs past the gap (the
// narrow span never lets the requester send that far).
TEST_F(RcPairTest, TheAgreedSpanBoundsWhatIsHeldPastAGap) {
  for (const bool wide : {false, true}) {
    SCOPED_TRACE(wide ? "wide SACK" : "narrow SACK");
    RcOptions o;
    o.selective = true;
    o.wide_sack = wide;
    o.window = 4096;
    o.delay_control = false;
    o.memory = 1 << 20;
    connect(o);
    constexpr size_t kPackets = 400, kBytes = kPackets * 1024, kAt = 512 * 1024;
    fill(a, 0, kBytes, wide ? 43 : 42);
    net_.drop(match::psn(wire::psn_add(options_.a_psn, 3)));
    ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, kBytes, kAt, 1), 0);
    ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
    EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, kAt, kBytes));
    EXPECT_EQ(b.counters().reorder_dropped.load(), 0u);
    EXPECT_EQ(a.counters().retransmitted_packets.load(), 1u);
    EXPECT_EQ(a.counters().tail_probes.load(), 0u);
    EXPECT_EQ(a.counters().retransmit_timeouts.load(), 0u);
    if (wide) {
      EXPECT_GT(b.counters().reorder_held.load(), uint64_t(wire::kSackSpan));
    } else {
      EXPECT_LT(b.counters().reorder_held.load(), uint64_t(wire::kSackSpan));
    }
  }
}

// A connection that agreed selective repeat takes DeviceConfig::selective_window
// (at most the SACK's span), go-back-N max_unacked_packets. Nothing is
// acknowledged until the retransmission timer fires, so what went before it is
// the window.
TEST_F(RcPairTest, ASelectiveRepeatConnectionTakesItsOwnWindow) {
  struct Case {
    bool selective, wide_sack;
    uint32_t window;
  };
  for (const Case c : {Case{false, false, 64}, Case{true, false, wire::kSackSpan},
                       Case{true, true, 256}}) {
    SCOPED_TRACE(c.selective ? (c.wide_sack ? "selective, wide SACK" : "selective") : "go-back-N");
    RcOptions o;
    o.selective = c.selective;
    o.wide_sack = c.wide_sack;
    o.window = 64;
    o.selective_window = 256;
    o.memory = 1 << 20;
    connect(o);
    auto* connection = dynamic_cast<rc::RcConnection*>(&a.qp->protocol());
    ASSERT_NE(connection, nullptr);
    ASSERT_EQ(connection->selective(), c.selective);
    const transport::Gid responder = b.device->gids().back();
    net_.clear_rules();
    net_.drop(match::from(responder), transport::fake::FakeNetwork::kEvery);  // no ACK, no SACK
    ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 512 * 1024, 0, 1), 0);
    ASSERT_TRUE(run_until([&] { return a.counters().retransmit_timeouts.load() > 0; }));
    const uint64_t first_sends =
        a.counters().tx_packets.load() - a.counters().retransmitted_packets.load();
    EXPECT_EQ(first_sends, c.window);
  }
}

// The delay control starts a connection at its initial window, not at the
// ceiling (slow start, rc/delay_control.h): with nothing answered, that is all
// that goes before the timer.
TEST_F(RcPairTest, AConnectionStartsAtTheInitialWindowBelowItsCeiling) {
  RcOptions o;
  o.selective = true;
  o.wide_sack = true;
  o.selective_window = 256;
  o.initial_window = 16;
  o.memory = 1 << 20;
  connect(o);
  net_.drop(match::from(b.device->gids().back()), transport::fake::FakeNetwork::kEvery);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 512 * 1024, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return a.counters().retransmit_timeouts.load() > 0; }));
  EXPECT_EQ(a.counters().tx_packets.load() - a.counters().retransmitted_packets.load(), 16u);
}

// The same loss under go-back-N (nothing agreed): everything after the gap goes
// again. What selective repeat saves.
TEST_F(RcPairTest, WithoutAgreementAGapResendsEverythingAfterIt) {
  fill(a, 0, 20 * 1024, 31);
  net_.drop(match::psn(wire::psn_add(options_.a_psn, 3)));
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 20 * 1024, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_TRUE(same(a, 0, b, kDst, 20 * 1024));
  EXPECT_GE(a.counters().retransmitted_packets.load(), 17u) << "3..19, the first twice";
  EXPECT_EQ(b.counters().sacks_sent.load(), 0u);
  EXPECT_EQ(b.counters().seq_naks_sent.load(), 1u);
}

// SENDs behind a lost one are held and delivered after it, in order (IBA 9.5:
// receives complete in the order the messages were sent).
TEST_F(SelectiveRepeatTest, SendsBehindALostOneCompleteInOrder) {
  constexpr int kSends = 8;
  for (int i = 0; i < kSends; ++i) {
    fill(a, size_t(i) * 512, 512, 40 + i);
    post_recv(b, kDst + size_t(i) * 512, 512, 100 + i);
  }
  net_.drop(match::psn(a_psn(2)));
  for (int i = 0; i < kSends; ++i)
    ASSERT_EQ(post(a, IBV_WR_SEND, size_t(i) * 512, 512, 0, i), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  const std::vector<ibv_wc> got = poll(b.rcq);
  ASSERT_EQ(got.size(), size_t(kSends));
  for (int i = 0; i < kSends; ++i) {
    EXPECT_EQ(got[i].wr_id, uint64_t(100 + i));
    EXPECT_EQ(got[i].status, IBV_WC_SUCCESS);
  }
  EXPECT_TRUE(same(a, 0, b, kDst, kSends * 512));
  EXPECT_EQ(a.counters().retransmitted_packets.load(), 1u);
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 0u);
  EXPECT_EQ(a.counters().out_of_sequence_responses.load(), 0u)
      << "a SACK after the ACK of everything before its gap is still taken";
}

// The last packet lost, the only one asking for an ACK: nothing after it reveals
// the gap. A tail probe, long before the Local ACK Timeout, resends the oldest
// unacknowledged PSN; its duplicate ACK shows the rest arrived; the next probe
// resends the lost one. No timeout, nothing charged to retry_cnt.
TEST_F(SelectiveRepeatTest, ALostTailIsResentByProbesBeforeTheTimer) {
  fill(a, 0, 6 * 1024, 33);
  net_.drop(match::psn(a_psn(5)));
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 6 * 1024, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_TRUE(same(a, 0, b, kDst, 6 * 1024));
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 0u);
  EXPECT_EQ(a.counters().tail_probes.load(), 2u);
  EXPECT_EQ(a.counters().retransmitted_packets.load(), 2u);
  EXPECT_EQ(a.counters().retries.load(), 0u);
}

// A READ request and an ATOMIC lost among WRITEs: the READ is asked again, the
// ATOMIC executes once.
TEST_F(SelectiveRepeatTest, ReadsAndAtomicsBehindAndBeforeAGap) {
  fill(a, 0, 4096, 34);
  fill(b, 64 * 1024, 8192, 35);
  store64(b, 200 * 1024, 7);
  net_.drop(match::opcode(op::kRcReadRequest));
  net_.drop(match::opcode(op::kRcFetchAdd));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 8192, 8192, 64 * 1024, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 4096, kDst, 2), 0);
  ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 32 * 1024, 200 * 1024, 5, 0, 3), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 4096, kDst + 4096, 4), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  const std::vector<ibv_wc> done = poll(a.scq);
  ASSERT_EQ(done.size(), 4u);
  for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_TRUE(same(b, 64 * 1024, a, 8192, 8192));
  EXPECT_TRUE(same(a, 0, b, kDst, 4096));
  EXPECT_EQ(load64(b, 200 * 1024), 12u) << "added once";
  EXPECT_EQ(load64(a, 32 * 1024), 7u);
}

// 5 % of the packets each way lost at random (requests, responses, ACKs and
// SACKs), a mix of operations: every byte arrives, every WQE completes well,
// and what was resent stays close to what was lost.
TEST_F(SelectiveRepeatTest, RandomLossEachWayLosesNothing) {
  auto random = std::make_shared<std::mt19937>(2811);
  auto lost = std::make_shared<uint64_t>(0);
  net_.drop(
      [random, lost](const FakePacket&) {
        const bool drop = std::uniform_real_distribution<double>(0, 1)(*random) < 0.05;
        *lost += drop ? 1 : 0;
        return drop;
      },
      SIZE_MAX);
  constexpr int kRounds = 60;
  for (int r = 0; r < kRounds; ++r) {
    fill(a, 0, 32 * 1024, 50 + r);
    fill(b, 64 * 1024, 16 * 1024, 70 + r);
    post_recv(b, kDst + 32 * 1024, 8192, 200 + r);
    ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 32 * 1024, kDst, 1), 0);
    ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 40 * 1024, 16 * 1024, 64 * 1024, 2), 0);
    ASSERT_EQ(post(a, IBV_WR_SEND, 0, 8192, 0, 3), 0);
    ASSERT_TRUE(run_until([&] { return sq_idle(a); })) << "round " << r;
    const std::vector<ibv_wc> done = poll(a.scq);
    ASSERT_EQ(done.size(), 3u) << "round " << r;
    for (const ibv_wc& wc : done)
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "round " << r << " wr " << wc.wr_id;
    ASSERT_EQ(poll(b.rcq).size(), 1u);
    ASSERT_TRUE(same(a, 0, b, kDst, 32 * 1024)) << "round " << r;
    ASSERT_TRUE(same(b, 64 * 1024, a, 40 * 1024, 16 * 1024)) << "round " << r;
    ASSERT_TRUE(same(a, 0, b, kDst + 32 * 1024, 8192)) << "round " << r;
  }
  EXPECT_GT(*lost, 0u);
  EXPECT_GT(a.counters().sacks_received.load(), 0u);
  EXPECT_EQ(a.counters().sacks_refused.load(), 0u);
  RecordProperty("lost", std::to_string(*lost));
  RecordProperty("resent", std::to_string(a.counters().retransmitted_packets.load()));
}

// SOFTRDMA_SELECTIVE_REPEAT=off: what an application agreed through ECE is not
// used; =always: used without any agreement.
TEST_F(RcPairTest, TheSettingOverridesOrReplacesTheAgreement) {
  RcOptions off;
  off.selective = true;
  off.selective_mode = SelectiveRepeatMode::kOff;
  connect(off);
  fill(a, 0, 8 * 1024, 36);
  net_.drop(match::psn(wire::psn_add(options_.a_psn, 2)));
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 8 * 1024, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(b.counters().sacks_sent.load(), 0u);
  EXPECT_EQ(b.counters().seq_naks_sent.load(), 1u);
  RcOptions always;
  always.selective_mode = SelectiveRepeatMode::kAlways;
  connect(always);
  net_.drop(match::psn(wire::psn_add(options_.a_psn, 2)));
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 8 * 1024, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_GE(b.counters().sacks_sent.load(), 1u);
  EXPECT_EQ(b.counters().seq_naks_sent.load(), 0u);
  EXPECT_TRUE(same(a, 0, b, kDst, 8 * 1024));
}

}  // namespace
}  // namespace softrdma::engine::testing
namespace softrdma::engine::testing {
namespace {

// The READ request lost: the SEND behind it is held and SACKed. The READ is
// asked again and executes, then the SEND, which the responder acknowledges; but
// a READ response is lost too, so that ACK completes nothing (the READ before the
// SEND still lacks a response). Once the READ completes, every PSN of the SEND is
// marked held and none is lost: the probe must still send one, or nothing would
// ever acknowledge the SEND (found by RandomLossEachWayLosesNothing: its SEND
// ended with IBV_WC_RETRY_EXC_ERR after timeouts that resent nothing).
TEST_F(SelectiveRepeatTest, ASendHeldAndAcknowledgedBehindAnUnansweredReadCompletes) {
  fill(b, 64 * 1024, 4096, 37);
  fill(a, 0, 1024, 38);
  post_recv(b, kDst, 1024, 9);
  net_.drop(match::opcode(op::kRcReadRequest));
  net_.drop(match::opcode(op::kRcReadResponseMiddle));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 8192, 4096, 64 * 1024, 1), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 1024, kDst + 4096, 10 + i), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 1024, 0, 2), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  const std::vector<ibv_wc> done = poll(a.scq);
  ASSERT_EQ(done.size(), 5u);
  for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_TRUE(same(b, 64 * 1024, a, 8192, 4096));
  EXPECT_EQ(poll(b.rcq).size(), 1u) << "delivered once";
  EXPECT_GE(b.counters().sacks_sent.load(), 1u);
}

}  // namespace
}  // namespace softrdma::engine::testing
namespace softrdma::engine::testing {
namespace {

// 5 % of the READ responses lost, four 64 KiB READs at a time: each gap is asked
// for again alone (a READ request for just the missing PSNs), as soon as a
// response after it arrives or, for a lost tail, by the probe; every byte
// arrives, no response comes twice, and what was asked again is what was lost.
TEST_F(SelectiveRepeatTest, LostReadResponsesAreAskedForAloneAndComeOnce) {
  auto random = std::make_shared<std::mt19937>(7);
  auto lost = std::make_shared<uint64_t>(0);
  const transport::Gid responder = b.device->gids().back();
  net_.drop(
      [random, lost, responder](const FakePacket& p) {
        const bool drop = p.src == responder && p.view().info().is(wire::kOpReadResponse) &&
                          std::uniform_real_distribution<double>(0, 1)(*random) < 0.05;
        *lost += drop ? 1 : 0;
        return drop;
      },
      SIZE_MAX);
  constexpr int kRounds = 25;
  for (int round = 0; round < kRounds; ++round) {
    fill(b, 0, 64 * 1024, 60 + round);
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(post(a, IBV_WR_RDMA_READ, size_t(i) * 64 * 1024, 32 * 1024, size_t(i) * 16 * 1024, i), 0);
    ASSERT_TRUE(run_until([&] { return sq_idle(a); })) << round;
    const std::vector<ibv_wc> done = poll(a.scq);
    ASSERT_EQ(done.size(), 4u);
    for (const ibv_wc& wc : done) ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << round << " " << wc.wr_id;
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(same(b, size_t(i) * 16 * 1024, a, size_t(i) * 64 * 1024, 32 * 1024)) << round;
  }
  ASSERT_GT(*lost, 0u);
  EXPECT_GT(a.counters().read_gaps_asked.load(), 0u);
  EXPECT_GT(a.counters().responses_held.load(), 0u) << "responses past a gap were kept";
  EXPECT_EQ(a.counters().reorder_held.load(), 0u) << "the requester holds no requests";
  EXPECT_EQ(a.counters().out_of_sequence_responses.load(), 0u) << "no response came twice";
  EXPECT_EQ(a.counters().bad_read_responses.load(), 0u);
  EXPECT_EQ(a.counters().retries.load(), 0u) << "nothing charged to retry_cnt";
  EXPECT_EQ(b.counters().tx_packets.load() - a.counters().rx_packets.load(), *lost);
  EXPECT_LE(b.counters().tx_packets.load(), kRounds * 4 * 32 + *lost + 1)
      << "each lost response sent again once";
}


// Matches READ responses from `responder` whose PSN `pick` chooses.
transport::fake::PacketMatcher read_response_from(const transport::Gid& responder,
                                                  std::function<bool(uint32_t)> pick) {
  return [responder, pick](const FakePacket& p) {
    return p.src == responder && p.view().info().is(wire::kOpReadResponse) && pick(p.psn());
  };
}

// READs on a wide-SACK connection with a window of 256 while the responder is
// slowed by CNPs: of the responses, every `lost_every`-th (the second, third...)
// is lost once, up to `losses`, and the rest are marked CE, so that what the
// responder was asked for waits in its queue, as in an incast. Every READ must
// complete, every byte arrive, and no Invalid Request NAK come.
class SlowedReadsTest : public RcPairTest {
 protected:
  void read_all(uint8_t max_rd_atomic, int reads, size_t read_bytes, int lost_every,
                size_t losses) {
    RcOptions o;
    o.selective = true;
    o.wide_sack = true;
    o.window = 256;
    o.max_rd_atomic = max_rd_atomic;
    o.memory = size_t(reads) * read_bytes;
    connect(o);
    fill(b, 0, o.memory, 77 + reads);
    const uint32_t first = options_.a_psn;
    const transport::Gid responder = b.device->gids().back();
    net_.drop(read_response_from(responder,
                                 [first, lost_every](uint32_t psn) {
                                   const int32_t at = wire::psn_diff(psn, first);
                                   return at >= 0 && at % lost_every == 1;
                                 }),
              losses);
    net_.mark(read_response_from(responder, [](uint32_t) { return true; }),
              transport::fake::FakeNetwork::kEvery);
    for (int i = 0; i < reads; ++i) {
      const size_t at = size_t(i) * read_bytes;
      ASSERT_EQ(post(a, IBV_WR_RDMA_READ, at, uint32_t(read_bytes), at, uint64_t(i)), 0);
    }
    ASSERT_TRUE(run_until([&] { return sq_idle(a); }, 60'000'000'000));
    const std::vector<ibv_wc> done = poll(a.scq);
    ASSERT_EQ(done.size(), size_t(reads));
    for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
    EXPECT_TRUE(same(b, 0, a, 0, o.memory));
    EXPECT_EQ(a.counters().error_naks_received.load(), 0u);
    EXPECT_GE(a.counters().read_gaps_asked.load(), 50u);
  }
};

// One READ of 2 MiB (2 048 responses, chunks of 128 or more), every other one
// of the first 800 lost: the requester asks for each part alone and the
// responder queues each ask ahead.
TEST_F(SlowedReadsTest, ManyAsksForAReadsGapsLeaveRoomForItsNextChunks) {
  read_all(1, 1, 2 << 20, 2, 400);
}

// Several long READs at once (max_rd_atomic of them), each asked for in chunks
// while its gaps are repaired: the responder holds more requests than
// max_dest_rd_atomic (a WQE stands for several chunks), all within the span,
// and queues every one of them (response_queue.h). It refused one with an
// Invalid Request NAK when its queue held 2 * 4 + 2 + 32 entries, asks included
// (the fault matrix's rc_Loss5 with a window of 256).
TEST_F(SlowedReadsTest, ChunksOfSeveralReadsBeyondMaxRdAtomicAreAllServed) {
  read_all(4, 4, 1 << 20, 3, 600);
}

// A gap asked for again whose answer is lost too is asked once more as soon as
// a response to a request sent after that ask arrives (the responder answers
// requests in the order they came: the answer would have come first), not at
// the next tail probe.
TEST_F(SelectiveRepeatTest, AnAskWhoseAnswerIsLostIsAskedAgainWhenALaterRequestIsAnswered) {
  fill(b, 0, 32 * 1024, 71);
  const uint32_t gap = a_psn(3);
  net_.drop(read_response_from(b.device->gids().back(), [gap](uint32_t psn) { return psn == gap; }),
            2);  // the response, then the answer to the first ask
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 16 * 1024, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return a.counters().read_gaps_asked.load() >= 1; }));
  // Posted after the ask, so its request follows the ask on the wire.
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 16 * 1024, 16 * 1024, 16 * 1024, 2), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  const std::vector<ibv_wc> done = poll(a.scq);
  ASSERT_EQ(done.size(), 2u);
  for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_TRUE(same(b, 0, a, 0, 32 * 1024));
  EXPECT_EQ(a.counters().read_gaps_asked.load(), 2u);
  EXPECT_EQ(a.counters().tail_probes.load(), 0u) << "asked again before any probe";
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 0u);
  EXPECT_EQ(a.counters().out_of_sequence_responses.load(), 0u);
}

// The tail probe is for silence: while responses held behind a gap keep coming
// (a READ streaming out while the answer to an ask is late), none fires, and
// nothing but the gap is asked for again: the responses on their way are not.
// (A probe then asked for every response still on its way: 125 k duplicates in
// 10 s of ib_read_bw at 5 % loss.) The late answer itself is asked for again
// once overdue (answer_wait): each of those asks brings one copy of the gap.
TEST_F(SelectiveRepeatTest, NoProbeWhileResponsesHeldBehindAGapKeepComing) {
  constexpr uint32_t kPackets = 48;
  fill(b, 0, kPackets * 1024, 72);
  const transport::Gid responder = b.device->gids().back();
  const uint32_t first = a_psn(0), second = a_psn(1);
  net_.drop(read_response_from(responder, [gap = a_psn(2)](uint32_t psn) { return psn == gap; }));
  net_.hold(read_response_from(responder, [first, second](uint32_t psn) {
    return psn != first && psn != second;
  }));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, kPackets * 1024, 0, 1), 0);
  pump();
  ASSERT_EQ(net_.held_count(), kPackets - 3);
  const uint64_t responses_before = b.counters().tx_packets.load();
  // One response every 50 us, 2.25 ms in all: beyond a probe interval (at most
  // 1 ms), within the Local ACK Timeout (4.2 ms), which only progress restarts.
  for (uint32_t i = 3; i < kPackets; ++i) {
    net_.release_held({0});
    advance(50'000);
  }
  const uint64_t asks = a.counters().read_gaps_asked.load();
  ASSERT_GE(asks, 2u) << "the late answer asked for again once overdue";
  EXPECT_EQ(b.counters().tx_packets.load() - responses_before, asks) << "one packet per ask";
  net_.release_held();  // the answers to the asks
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(b, 0, a, 0, kPackets * 1024));
  EXPECT_EQ(a.counters().tail_probes.load(), 0u);
  EXPECT_EQ(a.counters().read_gaps_asked.load(), asks);
  EXPECT_EQ(a.counters().out_of_sequence_responses.load(), asks - 1) << "the gap's extra copies";
}

// A part of a READ asked for again is answered ahead of the responses the
// responder has queued: the requester holds all of those until the gap fills.
TEST_F(SelectiveRepeatTest, APartAskedForAgainIsAnsweredAheadOfTheQueue) {
  constexpr uint32_t kPackets = 64;
  fill(b, 0, kPackets * 1024, 73);
  const transport::Gid responder = b.device->gids().back();
  const uint32_t gap = a_psn(3);
  net_.drop(read_response_from(responder, [gap](uint32_t psn) { return psn == gap; }));
  net_.take_sent();
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, kPackets * 1024, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(b, 0, a, 0, kPackets * 1024));
  // The responses in the order the responder sent them.
  std::vector<uint32_t> order;
  for (const FakePacket& p : net_.take_sent())
    if (p.src == responder && p.view().info().is(wire::kOpReadResponse)) order.push_back(p.psn());
  ASSERT_EQ(order.size(), kPackets + 1);
  const auto answer = std::find(std::next(std::find(order.begin(), order.end(), gap)), order.end(), gap);
  ASSERT_NE(answer, order.end());
  EXPECT_LT(answer - order.begin(), std::find(order.begin(), order.end(), a_psn(kPackets - 1)) - order.begin())
      << "answered before the READ's last response";
  EXPECT_EQ(a.counters().read_gaps_asked.load(), 1u);
  EXPECT_EQ(a.counters().out_of_sequence_responses.load(), 0u);
}


// Selective repeat requests a READ's next chunk while the last still lacks a
// response. When the next chunk's request is lost too, the requester's
// re-request for the last chunk's tail reaches past where the responder
// stands: the responder answers the part behind as a duplicate and executes the
// rest as the request it stands for (found by RandomLossEachWayLosesNothing:
// such a re-request was ignored until retry_cnt ran out).
TEST_F(RcPairTest, AReReadStraddlingALostChunkRequestIsSplit) {
  RcOptions o;
  o.selective = true;
  o.window = 10;  // a 16-packet READ goes in two chunks: 10, then 6
  o.delay_control = false;
  connect(o);
  fill(b, 0, 16 * 1024, 74);
  const uint32_t second_chunk = wire::psn_add(options_.a_psn, 10);
  const transport::Gid responder = b.device->gids().back();
  net_.drop([second_chunk](const FakePacket& p) {
    return p.view().info().is(wire::kOpReadRequest) && p.psn() == second_chunk;
  });
  net_.drop(read_response_from(responder, [last = wire::psn_add(options_.a_psn, 9)](uint32_t psn) {
    return psn == last;
  }));
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 16 * 1024, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return sq_idle(a); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(b, 0, a, 0, 16 * 1024));
  EXPECT_GE(b.counters().reads_split.load(), 1u);
}

}  // namespace
}  // namespace softrdma::engine::testing
