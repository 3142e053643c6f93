// The delay-based congestion control of an RC requester, as a role (rc_role_fixture.h):
// the round trip of its own packets' ACKs bounds how many it keeps in flight
// (Swift; delay_control.h). The role's target: the base RTT + 200 us (RoleOptions),
// plus up to 400 us of flow scaling.
#include <gtest/gtest.h>

#include "engine/rc_role_fixture.h"
#include "wire/ack_hold.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

class RcDelayControlTest : public RcRoleTest {
 protected:
  // Posts a 64-packet SEND (MTU 1024) and returns how many packets left at once.
  size_t send_64_packets(uint64_t wr_id) {
    EXPECT_EQ(post_send(0, 64 * 1024, wr_id), 0);
    return run().size();
  }
  // Acknowledges everything up to `psn` after `rtt` ns; returns what that released.
  size_t ack_after(Nanos rtt, uint32_t psn) {
    clock_.advance(rtt);
    return deliver(ack(psn)).size();
  }
};

TEST_F(RcDelayControlTest, ALateAcknowledgementCutsTheWindowOncePerRoundTrip) {
  // The first round trip, 100 us, is the base: the whole window goes.
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 163), 0u);
  ASSERT_EQ(post_send(0, 64 * 1024, 2), 0);
  EXPECT_EQ(send_64_packets(3), 64u);  // WR 2's
  // 1 ms against a target of about 305 us: the cut is at most Swift's max_mdf, to
  // 32 packets; 48 are in flight, nothing more goes.
  EXPECT_EQ(ack_after(1'000'000, 164 + 15), 0u);
  EXPECT_EQ(qp_->counters().window_hundredths.load(), 3200u);  // `softrdma status`
  EXPECT_EQ(qp_->counters().base_rtt_us.load(), 100u);         // and what it answers
  EXPECT_EQ(qp_->counters().rtt_us.load(), 1000u);
  EXPECT_GT(qp_->counters().target_us.load(), 300u);  // base + 200 us + some scaling
  EXPECT_LT(qp_->counters().target_us.load(), 700u);
  // Late again within that round trip: no second cut.
  EXPECT_EQ(ack_after(10'000, 164 + 31), 0u);
  EXPECT_EQ(ack_after(10'000, 164 + 47), 16u);  // 16 in flight: 16 of WR 3 go
  EXPECT_EQ(ack_after(10'000, 164 + 63), 16u);
  EXPECT_EQ(poll(scq_).size(), 2u);
}

TEST_F(RcDelayControlTest, TimelyAcknowledgementsGrowTheWindowByOnePacketPerRoundTrip) {
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 163), 0u);
  ASSERT_EQ(post_send(0, 64 * 1024, 2), 0);
  ASSERT_EQ(post_send(0, 64 * 1024, 3), 0);
  EXPECT_EQ(send_64_packets(4), 64u);          // WR 2's
  EXPECT_EQ(ack_after(1'000'000, 227), 32u);   // cut to 32: half of WR 3 goes
  // Timely ACKs (150 us, below the target): each window's worth acknowledged adds
  // a packet.
  EXPECT_EQ(ack_after(150'000, 227 + 32), 33u);
  EXPECT_EQ(ack_after(150'000, 227 + 65), 34u);
  EXPECT_EQ(poll(scq_).size(), 3u);
}

TEST_F(RcDelayControlTest, BelowOnePacketTheRequesterSendsOnePacketPerRttOverWindow) {
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 163), 0u);
  // Seven late round trips (2 ms), one packet each: 64 halved seven times.
  for (uint32_t psn = 164; psn < 171; ++psn) {
    ASSERT_EQ(post_send(0, 1024, psn), 0);
    ASSERT_EQ(run().size(), 1u);
    ASSERT_EQ(ack_after(2'000'000, psn), 0u);
  }
  EXPECT_EQ(qp_->counters().window_hundredths.load(), 50u);
  // Three packets to send: one goes, the next 2 ms / 0.5 = 4 ms after it.
  for (uint64_t wr = 1; wr <= 3; ++wr) ASSERT_EQ(post_send(0, 1024, 100 + wr), 0);
  EXPECT_EQ(run().size(), 1u);
  // Its ACK, 1 ms later (late, but within the round trip of the last cut: the
  // window stays), frees the window; the pacer still holds the next.
  EXPECT_EQ(ack_after(1'000'000, 171), 0u);
  EXPECT_EQ(advance(2'900'000, 10'000).size(), 0u);
  const std::vector<transport::fake::FakePacket> next = advance(200'000, 10'000);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].psn(), 172u);
}

TEST_F(RcDelayControlTest, NakedLossesDoNotCutTheWindowButATimeoutDoes) {
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 100 + 9), 0u);
  // A sequence error NAK (a random loss): go-back-N resends from the NAK's PSN, and
  // the window stays 64: the whole rest goes again.
  // (54 packets, its first twice: retransmission.md "Resuming").
  EXPECT_EQ(deliver(nak(110, wire::syndrome::kNakPsnSequence)).size(), 55u);
  EXPECT_EQ(ack_after(100'000, 163), 0u);
  EXPECT_EQ(send_64_packets(2), 64u);
  // A retransmission timeout (the Local ACK Timeout, 67 ms): the gentle restart
  // resends two packets (the first twice), and the window is halved.
  EXPECT_EQ(advance(100'000'000, 1'000'000).size(), 3u);
  EXPECT_EQ(counters().retransmit_timeouts.load(), 1u);
  // The ACK of everything times nothing (Karn: sent before the timeout) and grows
  // the halved window by what it released, 64 / 32 packets: 34 of WR 3 go.
  EXPECT_EQ(ack_after(10'000, 227), 0u);
  EXPECT_EQ(send_64_packets(3), 34u);
}

// A response that waited in this host's kernel (the process was descheduled, or
// busy) ends its round trip when it arrived, not when the engine took it: the
// wait is this host's, not the network's, and cuts nothing.
TEST_F(RcDelayControlTest, AnAcknowledgementsRoundTripEndsAtItsArrivalNotWhenTaken) {
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 100 + 31), 0u);  // the base: 100 us
  const uint64_t before = qp_->counters().window_hundredths.load();
  // Taken 5.1 ms after it was sent, having waited 4.95 ms of those in the kernel.
  clock_.advance(5'000'000);
  deliver(ack(100 + 47), false, 4'950'000);
  EXPECT_EQ(qp_->counters().rtt_us.load(), 150u);
  EXPECT_GE(qp_->counters().window_hundredths.load(), before) << "no cut";
  // The same wait unknown (0): 10.1 ms, far above the target, and a cut.
  clock_.advance(5'000'000);
  deliver(ack(100 + 63));
  EXPECT_EQ(qp_->counters().rtt_us.load(), 10'100u);
  EXPECT_LT(qp_->counters().window_hundredths.load(), before);
}

TEST_F(RcDelayControlTest, ASacksRoundTripEndsAtItsArrivalToo) {
  RoleOptions options;
  options.selective = true;
  open(options);
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 100 + 9), 0u);
  const uint64_t before = qp_->counters().window_hundredths.load();
  clock_.advance(3'000'000);
  deliver(sack(109, {111, 112}), false, 2'880'000);  // 112 left 3.1 ms ago
  EXPECT_EQ(counters().sacks_received.load(), 1u);
  EXPECT_EQ(qp_->counters().rtt_us.load(), 220u);
  EXPECT_EQ(qp_->counters().window_hundredths.load(), before);
}

// Agreed (selective repeat, SOFTRDMA_SELECTIVE_REPEAT=always here): the
// responder's ACKs and SACKs say how long it held what they answer, and the round
// trip ends that much earlier (wire/ack_hold.h): a busy responder is not a queue.
TEST_F(RcDelayControlTest, TheRespondersHoldComesOffTheRoundTrip) {
  RoleOptions options;
  options.selective = true;
  open(options);
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 100 + 9), 0u);  // the base: 100 us
  const uint64_t before = qp_->counters().window_hundredths.load();
  // Taken 4 ms later: 1 ms of it in this host's kernel, 2.8 ms in the responder.
  clock_.advance(4'000'000);
  deliver(timed_ack(100 + 19, 2'800'000), false, 1'000'000);
  EXPECT_EQ(qp_->counters().rtt_us.load(), 300u);
  EXPECT_GE(qp_->counters().window_hundredths.load(), before) << "no cut";
  // A hold longer than the whole round trip (a peer's clock, a bad peer): no
  // less than the round trip to the engine, as without a hold.
  clock_.advance(1'000'000);
  deliver(timed_ack(100 + 29, 1'000'000'000));
  EXPECT_EQ(qp_->counters().rtt_us.load(), 5'100u);
  // A SACK's hold, the same way.
  clock_.advance(4'000'000);
  deliver(sack(100 + 29, {100 + 31}, 8'750'000));  // 131 left 9.1 ms ago
  EXPECT_EQ(counters().sacks_received.load(), 1u);
  EXPECT_EQ(qp_->counters().rtt_us.load(), 350u);
  EXPECT_EQ(counters().sacks_refused.load(), 0u);
}

// The responder's side: agreed, its coalesced ACK is a timed one whose hold is how
// long the newest request had been in this host (here all of it in the kernel:
// the manual clock stands still while the device runs).
TEST_F(RcDelayControlTest, AnAgreedRespondersAckSaysHowLongItHeldTheNewestRequest) {
  RoleOptions options;
  options.selective = true;
  open(options);
  post_recv(0, 256, 1);
  const std::vector<transport::fake::FakePacket> acks =
      deliver(send_only(5000, 64), false, 700'000);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].opcode(), wire::op::kRcTimedAck);
  EXPECT_EQ(acks[0].psn(), 5000u);
  const std::span<const uint8_t> payload = acks[0].view().payload();
  ASSERT_EQ(payload.size(), wire::kAckHoldBytes);
  EXPECT_EQ(wire::read_ack_hold(payload.first<wire::kAckHoldBytes>()), 700'000);
  EXPECT_EQ(poll(rcq_).size(), 1u);
}

// A tail probe's copy arrives after the originals it repeats, often in the same
// burst: the ACK names the originals, and its hold counts from their arrival,
// not the copy's (which would make the network look slower by the responder's
// whole absence).
TEST_F(RcDelayControlTest, AnAcksHoldCountsFromThePacketItNamesNotADuplicateAfterIt) {
  RoleOptions options;
  options.selective = true;
  open(options);
  post_recv(0, 256, 1);
  const Nanos now = clock_.now();
  net_.inject(peer_gid_, qp_gid_, send_only(5000, 64).take(), 0xC000, false, now - 3'000'000);
  net_.inject(peer_gid_, qp_gid_, send_only(5000, 64).take(), 0xC000, false, now);  // the copy
  const std::vector<transport::fake::FakePacket> acks = run();
  ASSERT_FALSE(acks.empty());
  for (const transport::fake::FakePacket& a : acks) {
    EXPECT_EQ(a.opcode(), wire::op::kRcTimedAck);
    EXPECT_EQ(a.psn(), 5000u);
    EXPECT_EQ(wire::read_ack_hold(a.view().payload().first<wire::kAckHoldBytes>()), 3'000'000);
  }
  EXPECT_EQ(counters().duplicate_requests.load(), 1u);
  EXPECT_EQ(poll(rcq_).size(), 1u);
}

// Not agreed (go-back-N): a timed ACK is not this connection's, and acknowledges
// nothing; it is counted as a refused SACK is.
TEST_F(RcDelayControlTest, ATimedAckWhereNoneWasAgreedIsRefused) {
  EXPECT_EQ(send_64_packets(1), 64u);
  clock_.advance(100'000);
  deliver(timed_ack(100 + 63, 50'000));
  EXPECT_EQ(counters().sacks_refused.load(), 1u);
  EXPECT_EQ(poll(scq_).size(), 0u) << "nothing acknowledged";
  EXPECT_EQ(ack_after(0, 100 + 63), 0u);
  EXPECT_EQ(poll(scq_).size(), 1u);
}

// Selective repeat: while a gap is open, the SACKs time the round trip (by the
// newest PSN each names, when that is news); the cumulative ACK cannot.
TEST_F(RcDelayControlTest, ASackNamingANewerHeldPsnIsARoundTripSample) {
  RoleOptions options;
  options.selective = true;
  open(options);
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 100 + 9), 0u);  // the base: 100 us
  // PSN 110 lost, 111..130 held and named 1 ms after they left: the SACK moves
  // the cumulative ACK nowhere (nothing for Karn's rule to time), yet the window
  // halves.
  const std::initializer_list<uint32_t> held = {111, 112, 113, 114, 115, 116, 117,
                                                118, 119, 120, 121, 122, 123, 124,
                                                125, 126, 127, 128, 129, 130};
  const uint64_t before = qp_->counters().window_hundredths.load();
  ASSERT_GT(before, 6400u);  // selective repeat's window, grown by the first ACK
  clock_.advance(900'000);
  deliver(sack(109, held));
  EXPECT_EQ(counters().sacks_received.load(), 1u);
  EXPECT_EQ(qp_->counters().rtt_us.load(), 1000u);
  const uint64_t cut = qp_->counters().window_hundredths.load();
  EXPECT_NEAR(double(cut), double(before) / 2, 1);  // Swift's largest cut
  // The same newest again, later (the resend of 110 is on its way): no sample.
  clock_.advance(2'000'000);
  deliver(sack(109, held));
  EXPECT_EQ(counters().sacks_received.load(), 2u);
  EXPECT_EQ(qp_->counters().rtt_us.load(), 1000u);
  EXPECT_EQ(qp_->counters().window_hundredths.load(), cut);
}

// A SACK whose newest PSN was never sent (a bad peer's) is no sample, and does
// not hide the next SACKs' news.
TEST_F(RcDelayControlTest, ASackNamingAPsnNeverSentHidesNoLaterSample) {
  RoleOptions options;
  options.selective = true;
  open(options);
  EXPECT_EQ(send_64_packets(1), 64u);  // PSNs 100..163
  EXPECT_EQ(ack_after(100'000, 100 + 9), 0u);
  clock_.advance(900'000);
  deliver(sack(109, {111, 112, 113, 400}));  // 400: never sent
  EXPECT_EQ(qp_->counters().rtt_us.load(), 100u);
  deliver(sack(109, {111, 112, 113, 114}));  // 114 left 1 ms ago
  EXPECT_EQ(qp_->counters().rtt_us.load(), 1000u);
}

TEST_F(RcDelayControlTest, WithTheDelayControlOffLateAcknowledgementsChangeNothing) {
  RoleOptions options;
  options.delay_control = false;
  open(options);
  EXPECT_EQ(send_64_packets(1), 64u);
  EXPECT_EQ(ack_after(100'000, 163), 0u);
  ASSERT_EQ(post_send(0, 64 * 1024, 2), 0);
  EXPECT_EQ(send_64_packets(3), 64u);
  // 5 ms late: the fixed window of 64 slides all the same.
  EXPECT_EQ(ack_after(5'000'000, 164 + 15), 16u);
  EXPECT_EQ(ack_after(10'000, 227), 48u);
}

}  // namespace
}  // namespace softrdma::engine::testing
