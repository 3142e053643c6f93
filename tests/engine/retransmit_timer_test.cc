// The RC retransmission timing alone (docs/decisions/retransmission.md): the
// round-trip estimate of RFC 6298 with Karn's rule, the floor of IBA's Local ACK
// Timeout, the backoff between consecutive timeouts and its bound.
#include "engine/rc/retransmit_timer.h"

#include <gtest/gtest.h>

#include <vector>

namespace softrdma::engine::rc {
namespace {

constexpr Nanos kMs = 1'000'000;
constexpr Nanos kFloor = 67'108'864;  // timeout 14: 4.096 us x 2^14
constexpr Nanos kCap = 1'000 * kMs;

// Nothing measured: the QP's own timeout, doubling per timeout up to the cap.
TEST(RetransmitTimer, DoublesFromTheLocalAckTimeoutUpToTheCap) {
  RetransmitTimer t;
  std::vector<Nanos> waits;
  for (int i = 0; i < 6; ++i) {
    waits.push_back(t.interval(kFloor, kCap));
    t.on_timeout();
  }
  EXPECT_EQ(waits, (std::vector<Nanos>{kFloor, 2 * kFloor, 4 * kFloor, 8 * kFloor, kCap, kCap}));
  for (int i = 0; i < 40; ++i) t.on_timeout();
  EXPECT_EQ(t.interval(kFloor, kCap), kCap);
  EXPECT_EQ(t.interval(kFloor, kCap, 3), kCap);
  RetransmitTimer fresh;
  EXPECT_EQ(fresh.interval(kFloor, kCap, 2), 4 * kFloor);  // a probe's own doublings
}

// Progress ends the run of timeouts, and the backoff with it.
TEST(RetransmitTimer, ProgressEndsTheBackoff) {
  RetransmitTimer t;
  for (int i = 0; i < 2; ++i) {
    t.on_timeout();
    t.on_retry();
  }
  EXPECT_EQ(t.interval(kFloor, kCap), 4 * kFloor);
  t.on_acknowledged(21, 2 * kMs);
  EXPECT_EQ(t.backoff(), 0u);
  EXPECT_EQ(t.interval(kFloor, kCap), kFloor);
}

// An application that asked for more than the cap gets what it asked for, every time.
TEST(RetransmitTimer, ALongerLocalAckTimeoutIsKeptAndNotDoubled) {
  RetransmitTimer t;
  const Nanos floor = 4 * kCap;
  EXPECT_EQ(t.interval(floor, kCap), floor);
  t.on_timeout();
  EXPECT_EQ(t.interval(floor, kCap), floor);
}

TEST(RetransmitTimer, TimeoutZeroMeansNoTimer) {
  RetransmitTimer t;
  EXPECT_EQ(t.interval(kNever, kCap), kNever);
}

// A round trip far above the floor (a peer whose ACKs wait for its scheduler) sets
// the interval: SRTT + 4 RTTVAR after the first sample is 3 RTT (RFC 6298 2.2).
TEST(RetransmitTimer, FollowsTheMeasuredRoundTripAboveTheFloor) {
  RetransmitTimer t;
  const Nanos floor = 1 * kMs;  // timeout 8
  ASSERT_TRUE(t.wants_sample());
  t.on_first_send(100, 0);
  EXPECT_FALSE(t.wants_sample());
  t.on_acknowledged(101, 20 * kMs);
  ASSERT_TRUE(t.measured());
  EXPECT_EQ(t.srtt(), 20 * kMs);
  EXPECT_EQ(t.rttvar(), 10 * kMs);
  EXPECT_EQ(t.interval(floor, kCap), 60 * kMs);
  // A small round trip never takes the interval below the floor.
  EXPECT_EQ(t.interval(kFloor * 2, kCap), kFloor * 2);
  t.on_timeout();
  EXPECT_EQ(t.interval(floor, kCap), 120 * kMs);
}

// The estimate moves by 1/8 and 1/4 of the error (RFC 6298 2.3).
TEST(RetransmitTimer, SmoothsLaterSamples) {
  RetransmitTimer t;
  t.on_first_send(1, 0);
  t.on_acknowledged(2, 8 * kMs);
  t.on_first_send(2, 10 * kMs);
  t.on_acknowledged(3, 10 * kMs + 16 * kMs);
  EXPECT_EQ(t.srtt(), 9 * kMs);    // 7/8 x 8 + 1/8 x 16
  EXPECT_EQ(t.rttvar(), 5 * kMs);  // 3/4 x 4 + 1/4 x 8
}

// Karn: after a retry the ACK may answer the resent copy, so the sample is void.
TEST(RetransmitTimer, ARetryVoidsTheSampleInFlight) {
  RetransmitTimer t;
  t.on_first_send(7, 0);
  t.on_retry();
  t.on_acknowledged(8, 500 * kMs);
  EXPECT_FALSE(t.measured());
  EXPECT_TRUE(t.wants_sample());
}

// An ACK that stops short of the timed PSN is no sample; one beyond it is.
TEST(RetransmitTimer, SamplesOnlyWhenTheTimedPsnIsAcknowledged) {
  RetransmitTimer t;
  t.on_first_send(0xffffff, 0);  // PSNs wrap (IBA 9.7.1)
  t.on_acknowledged(0xffffff, 1 * kMs);
  EXPECT_FALSE(t.measured());
  t.on_acknowledged(3, 2 * kMs);
  EXPECT_TRUE(t.measured());
  EXPECT_EQ(t.srtt(), 2 * kMs);
}

}  // namespace
}  // namespace softrdma::engine::rc
