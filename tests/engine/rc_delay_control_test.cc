// The delay-based congestion control of an RC requester, as a role (rc_role_fixture.h):
// the round trip of its own packets' ACKs bounds how many it keeps in flight
// (Swift; delay_control.h). The role's target: the base RTT + 200 us (RoleOptions),
// plus up to 400 us of flow scaling.
#include <gtest/gtest.h>

#include "engine/rc_role_fixture.h"
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
