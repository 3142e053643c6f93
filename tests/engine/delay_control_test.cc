// Swift's window as policy (delay_control.h; Kumar et al., SIGCOMM 2020, §3) and the
// send stamps that time acknowledgements.
#include "engine/rc/delay_control.h"

#include <gtest/gtest.h>

#include <cmath>

namespace softrdma::engine::rc {
namespace {

constexpr Nanos kUs = 1'000;

SwiftParams params() {
  SwiftParams p;
  p.max_window = 64;
  p.target_queueing = 200 * kUs;
  p.flow_scaling_range = 200 * kUs;
  p.rounds_to_compete = 1000;  // the delay alone (competing: its own test)
  p.initial_window = 1e9;      // at the ceiling (the slow start: its own tests)
  return p;
}

TEST(SwiftTest, TheTargetIsTheBaseRttPlusQueueingPlusMoreForASmallerWindow) {
  Swift swift(params());
  EXPECT_EQ(swift.window(), 64);
  swift.on_ack(1, 100 * kUs, 0);
  swift.on_ack(1, 80 * kUs, 0);
  EXPECT_EQ(swift.base_rtt(), 80 * kUs);  // the least measured
  // Flow scaling (§3.4): range at window 0.1, none at 100, linear in 1/sqrt(window).
  const double alpha = 200e3 / (1 / std::sqrt(0.1) - 0.1);
  EXPECT_NEAR(double(swift.target()), 80e3 + 200e3 + alpha / 8 - alpha / 10, 1);
  // The least window, 0.1, gets the whole range.
  for (int i = 0; i < 12; ++i) swift.on_ack(1, 10'000 * kUs, Nanos(i + 1) * 20'000 * kUs);
  EXPECT_DOUBLE_EQ(swift.window(), 0.1);
  EXPECT_NEAR(double(swift.target()), 80e3 + 400e3, 1);
}

// The slow start (RFC 5681 §3.1 with a delay exit): from the initial window, a
// packet per packet acknowledged while the round trip stays within a quarter of
// the queueing target above the base; then Swift's additive increase.
TEST(SwiftTest, AConnectionStartsAtItsInitialWindowAndDoublesPerRoundTripWhileTheDelayStaysLow) {
  SwiftParams p = params();
  p.max_window = 256;
  p.initial_window = 16;
  Swift swift(p);
  EXPECT_EQ(swift.window(), 16);
  EXPECT_TRUE(swift.slow_start());
  Nanos now = 0;
  swift.on_ack(16, 100 * kUs, now += 100 * kUs);  // the base
  EXPECT_EQ(swift.window(), 32);
  swift.on_ack(32, 140 * kUs, now += 140 * kUs);  // 40 us of queueing: below 50
  EXPECT_EQ(swift.window(), 64);
  EXPECT_TRUE(swift.slow_start());
  // 60 us above the base: past the exit (200 us / 4), still below the target.
  swift.on_ack(64, 160 * kUs, now += 160 * kUs);
  EXPECT_FALSE(swift.slow_start());
  EXPECT_NEAR(swift.window(), 64 + 1, 0.02);  // additive: ~one packet per window
  // A low round trip again does not restart it.
  swift.on_ack(64, 100 * kUs, now += 100 * kUs);
  EXPECT_FALSE(swift.slow_start());
  EXPECT_LT(swift.window(), 67);
}

TEST(SwiftTest, TheSlowStartStopsAtTheCeilingAndAtATimeout) {
  SwiftParams p = params();
  p.max_window = 40;
  p.initial_window = 16;
  Swift swift(p);
  Nanos now = 0;
  swift.on_ack(16, 100 * kUs, now += 100 * kUs);
  swift.on_ack(32, 100 * kUs, now += 100 * kUs);
  EXPECT_EQ(swift.window(), 40);  // not 64
  EXPECT_FALSE(swift.slow_start());
  Swift other(p);
  other.on_timeout(now);
  EXPECT_FALSE(other.slow_start());
  EXPECT_EQ(other.window(), 8);
  other.on_ack(1, 100 * kUs, now += 100 * kUs);
  EXPECT_NEAR(other.window(), 8 + 1.0 / 8, 1e-9);  // additive, not doubling
  // An initial window at or above the ceiling: no slow start at all.
  p.initial_window = 64;
  EXPECT_FALSE(Swift(p).slow_start());
  EXPECT_EQ(Swift(p).window(), 40);
}

TEST(SwiftTest, BelowTheTargetTheWindowGrowsByOnePacketPerWindowAcknowledged) {
  SwiftParams p = params();
  p.max_window = 1000;
  Swift swift(p);
  swift.on_timeout(0);  // 500
  EXPECT_EQ(swift.window(), 500);
  swift.on_ack(1, 100 * kUs, 1);  // the base
  swift.on_ack(500, 150 * kUs, 2);
  const double after_first = 500 + 1.0 / 500;
  EXPECT_NEAR(swift.window(), after_first + 500 / after_first, 1e-9);
}

TEST(SwiftTest, AboveTheTargetTheWindowFallsByTheExcessAtMostOncePerRtt) {
  Swift swift(params());
  swift.on_ack(1, 100 * kUs, 0);
  const double target = double(swift.target());
  // 20 % above the target: the cut is beta x (rtt - target) / rtt.
  const Nanos rtt = Nanos(target * 1.2);
  swift.on_ack(8, rtt, 1'000 * kUs);
  const double cut = 1 - 0.8 * (double(rtt) - target) / double(rtt);
  EXPECT_NEAR(swift.window(), 64 * cut, 1e-9);
  // Again within that RTT: no second cut (nor growth).
  swift.on_ack(8, rtt, 1'000 * kUs + rtt / 2);
  EXPECT_NEAR(swift.window(), 64 * cut, 1e-9);
  // After it: cut again, and never by more than half (max_mdf), however large
  // the new sample.
  swift.on_ack(8, 100 * rtt, 1'000 * kUs + rtt + 1);
  EXPECT_NEAR(swift.window(), 64 * cut / 2, 1e-9);
}

TEST(SwiftTest, BelowOnePacketTheSenderIsPacedAtOnePacketPerRttOverWindow) {
  Swift swift(params());
  Nanos now = 0;
  swift.on_ack(1, 100 * kUs, now);
  for (int i = 0; i < 8; ++i) swift.on_ack(1, 2'000 * kUs, now += 2'000 * kUs);
  ASSERT_LT(swift.window(), 1);
  EXPECT_TRUE(swift.pacing());
  EXPECT_EQ(swift.packets_in_flight(), 1u);
  // 64 / 2^7 = 0.5 packets per RTT... each cut halved it: 64 -> 0.25 after 8.
  EXPECT_DOUBLE_EQ(swift.window(), 0.25);
  EXPECT_EQ(swift.pacing_interval(), 4 * 2'000 * kUs);  // RTT / window
  // A timely ACK below one packet adds a whole packet (§3.1: cwnd += ai).
  swift.on_ack(1, 120 * kUs, now += 120 * kUs);
  EXPECT_DOUBLE_EQ(swift.window(), 1.25);
  EXPECT_FALSE(swift.pacing());
}

TEST(SwiftTest, ATimeoutHalvesTheWindowOncePerRttButNeverBelowOnePacket) {
  Swift swift(params());
  swift.on_ack(1, 100 * kUs, 0);
  swift.on_timeout(1'000 * kUs);
  EXPECT_DOUBLE_EQ(swift.window(), 32);
  swift.on_timeout(1'050 * kUs);  // within the RTT
  EXPECT_DOUBLE_EQ(swift.window(), 32);
  Nanos now = 1'050 * kUs;
  for (int i = 0; i < 10; ++i) swift.on_timeout(now += 200 * kUs);
  EXPECT_DOUBLE_EQ(swift.window(), 1);
  EXPECT_FALSE(swift.pacing());
}

// Copa's competitive mode: a loss-based flow keeps the queue above the target
// however far this window falls.
TEST(SwiftTest, AtTheFloorWithTheQueueStillHighTheWindowCompetesAsTcpDoes) {
  SwiftParams p = params();
  p.rounds_to_compete = 4;
  p.compete_rounds = 10;
  Swift swift(p);
  Nanos now = 0;
  swift.on_ack(1, 100 * kUs, now);
  const Nanos high = 3'000 * kUs;  // a full buffer's round trip, far above the target
  while (swift.window() > 1) swift.on_ack(1, high, now += high);
  // Four more cuts at one packet or below with the delay still high: it competes.
  for (int i = 0; i < 3; ++i) swift.on_ack(1, high, now += high);
  EXPECT_FALSE(swift.competing());
  const double floor_window = swift.window();
  swift.on_ack(1, high, now += high);
  ASSERT_TRUE(swift.competing());
  EXPECT_DOUBLE_EQ(swift.window(), floor_window);  // the fourth is not a cut
  // Competing: one packet per window acknowledged, whatever the delay ...
  swift.on_ack(1, high, now += high / 4);
  EXPECT_DOUBLE_EQ(swift.window(), floor_window + 1);
  for (int i = 0; i < 8; ++i) swift.on_ack(uint32_t(swift.window()), high, now += high / 4);
  const double grown = swift.window();
  EXPECT_GT(grown, 4);
  // ... and half on a loss (a NAK, a SACK's gap, a CNP; RateControl makes it
  // once per window of data).
  swift.on_competing_loss(now);
  EXPECT_DOUBLE_EQ(swift.window(), grown / 2);
  // A round trip below the target: the other flow is gone, the delay rules again.
  swift.on_ack(1, 200 * kUs, now += 200 * kUs);
  EXPECT_FALSE(swift.competing());
  const double after = swift.window();
  EXPECT_NEAR(after, grown / 2 + 1 / (grown / 2), 1e-9);
  swift.on_competing_loss(now += high);
  EXPECT_DOUBLE_EQ(swift.window(), after) << "no cut when not competing";
  // The other flow is back: the next competition starts where this one ended.
  while (!swift.competing()) swift.on_ack(1, high, now += high);
  EXPECT_DOUBLE_EQ(swift.window(), grown / 2);
}

TEST(SwiftTest, CompetingEndsAfterItsRoundTripsToTryTheDelayAgain) {
  SwiftParams p = params();
  p.rounds_to_compete = 1;
  p.compete_rounds = 10;
  Swift swift(p);
  Nanos now = 0;
  swift.on_ack(1, 100 * kUs, now);
  const Nanos high = 3'000 * kUs;
  while (!swift.competing()) swift.on_ack(1, high, now += high);
  swift.on_ack(1, high, now += 9 * high);
  EXPECT_TRUE(swift.competing());
  swift.on_ack(1, high, now += 2 * high);  // ten round trips since it began
  EXPECT_FALSE(swift.competing());
}

TEST(SwiftTest, TheWindowStaysBetweenItsBounds) {
  Swift swift(params());
  Nanos now = 0;
  swift.on_ack(1, 100 * kUs, now);
  for (int i = 0; i < 64; ++i) swift.on_ack(1, 1'000'000 * kUs, now += 1'000'000 * kUs);
  EXPECT_DOUBLE_EQ(swift.window(), 0.1);
  swift.reset();
  for (int i = 0; i < 1000; ++i) swift.on_ack(64, 100 * kUs, now += 100 * kUs);
  EXPECT_DOUBLE_EQ(swift.window(), 64);
}

TEST(SendStampsTest, AnAcknowledgementIsTimedByItsNewestPsnWhenAllItCoversWentOnce) {
  SendStamps stamps;
  for (uint32_t psn = 10; psn < 20; ++psn) stamps.stamp(psn, 1, Nanos(psn) * 100);
  EXPECT_EQ(stamps.newest_if_all_sent_once(10, 15), 1400);
  // PSN 12 resent (Karn): an ACK covering it times nothing; one after it does.
  stamps.forget(12);
  EXPECT_EQ(stamps.newest_if_all_sent_once(10, 15), std::nullopt);
  EXPECT_EQ(stamps.newest_if_all_sent_once(13, 15), 1400);
  EXPECT_EQ(stamps.newest_if_all_sent_once(20, 25), std::nullopt);  // never sent
  EXPECT_EQ(stamps.newest_if_all_sent_once(15, 15), std::nullopt);  // nothing new
  // A PSN a ring later overwrites its slot: the older PSN times nothing.
  stamps.stamp(13 + SendStamps::kSlots, 1, 9);
  EXPECT_EQ(stamps.newest_if_all_sent_once(13, 14), std::nullopt);
  // A READ request stands for its responses' PSNs.
  stamps.stamp(100, 8, 7);
  EXPECT_EQ(stamps.newest_if_all_sent_once(100, 108), 7);
  // More than the ring: nothing.
  EXPECT_EQ(stamps.newest_if_all_sent_once(100, 100 + SendStamps::kSlots + 1), std::nullopt);
  stamps.clear();  // a timeout
  EXPECT_EQ(stamps.newest_if_all_sent_once(100, 108), std::nullopt);
  // Across the 24-bit PSN wrap.
  stamps.stamp(0xFFFFFE, 3, 5);
  EXPECT_EQ(stamps.newest_if_all_sent_once(0xFFFFFE, 1), 5);
}

}  // namespace
}  // namespace softrdma::engine::rc
