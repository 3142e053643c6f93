// DCQCN's reaction point and the pacer (src/engine/rc/rate_control.h), as policy:
// CNPs and time in, rates and permissions out.
#include "engine/rc/rate_control.h"

#include <gtest/gtest.h>

#include <cmath>

#include "wire/psn.h"

namespace softrdma::engine::rc {
namespace {

constexpr double kLine = 5.0;  // bytes per ns

TEST(DcqcnTest, TheFirstCnpHalvesTheLineRateAndLaterOnesCutByAlpha) {
  const DcqcnParams p;
  Dcqcn d(p);
  d.reset(0);
  EXPECT_FALSE(d.limited());
  d.on_cnp(1'000);
  EXPECT_TRUE(d.limited());
  EXPECT_DOUBLE_EQ(d.rate(), kLine / 2);  // alpha starts at 1
  EXPECT_DOUBLE_EQ(d.target(), kLine);
  EXPECT_DOUBLE_EQ(d.alpha(), 1.0);
  // Alpha decays once per period without a CNP; the next cut takes alpha / 2.
  d.advance(1'000 + 20 * p.alpha_period);
  const double alpha = d.alpha();
  EXPECT_NEAR(alpha, std::pow(1 - 1.0 / 256, 20), 1e-12);
  const double before = d.rate();
  d.on_cnp(1'000 + 20 * p.alpha_period);
  EXPECT_DOUBLE_EQ(d.rate(), before * (1 - alpha / 2));
  EXPECT_DOUBLE_EQ(d.alpha(), (1 - 1.0 / 256) * alpha + 1.0 / 256);
}

TEST(DcqcnTest, WithoutCnpsTheRateRecoversFastThenAdditivelyToTheLine) {
  DcqcnParams p;
  Dcqcn d(p);
  d.reset(0);
  d.on_cnp(0);
  const double cut = d.rate();
  // Fast recovery: each timer period halves the distance to the target.
  d.advance(p.increase_period);
  EXPECT_DOUBLE_EQ(d.rate(), (kLine + cut) / 2);
  d.advance(2 * p.increase_period);
  EXPECT_DOUBLE_EQ(d.rate(), (kLine + (kLine + cut) / 2) / 2);
  // Within 1 % of the line it is the line again, and unpaced.
  d.advance(20 * p.increase_period);
  EXPECT_FALSE(d.limited());
  EXPECT_DOUBLE_EQ(d.rate(), kLine);
}

TEST(DcqcnTest, RepeatedCnpsDriveTheRateDownToItsFloorAndNoFurther) {
  DcqcnParams p;
  Dcqcn d(p);
  d.reset(0);
  Nanos now = 0;
  for (int i = 0; i < 100; ++i, now += p.cnp_interval) d.on_cnp(now);
  EXPECT_DOUBLE_EQ(d.rate(), p.min_rate);
  EXPECT_GT(d.alpha(), 0.5);
}

TEST(DcqcnTest, AfterFastRecoveryTheTargetGrowsByTheAdditiveStep) {
  DcqcnParams p;
  p.line_rate = 100.0;  // far above: recovery does not reach it
  Dcqcn d(p);
  d.reset(0);
  d.on_cnp(0);  // 50 B/ns, target 100
  d.on_cnp(p.cnp_interval);
  const double target = d.target();
  const Nanos cut_at = p.cnp_interval;
  d.advance(cut_at + Nanos(p.fast_recovery_steps) * p.increase_period);
  EXPECT_DOUBLE_EQ(d.target(), target + p.additive_increase);  // the F-th event adds
}

TEST(DcqcnTest, TheByteCounterRaisesTheRateToo) {
  DcqcnParams p;
  Dcqcn d(p);
  d.reset(0);
  d.on_cnp(0);
  const double cut = d.rate();
  d.on_sent(p.increase_bytes);  // no time passed: the bytes alone
  EXPECT_DOUBLE_EQ(d.rate(), (kLine + cut) / 2);
}

TEST(RateControlTest, UnpacedUntilACnpThenABurstThenPacketsAtTheRate) {
  DcqcnParams p;
  p.line_rate = 0.125;  // rates a double holds exactly
  p.burst_bytes = 10'000;
  RateControl r(p);
  r.reset(0);
  EXPECT_EQ(r.packets_allowed(0, 1'000), UINT32_MAX);
  EXPECT_EQ(r.resume_at(), kNever);
  r.on_cnp(0, 0);  // 0.0625 B/ns
  ASSERT_TRUE(r.paced());
  EXPECT_EQ(r.packets_allowed(0, 1'000), 10u);  // the bucket
  r.on_sent(10'000);
  EXPECT_EQ(r.packets_allowed(0, 1'000), 0u);
  ASSERT_TRUE(r.held());
  // One byte is enough to send the next packet (the bucket may go below zero): 16 ns.
  EXPECT_EQ(r.resume_at(), 16);
  EXPECT_EQ(r.packets_allowed(10'000, 1'000), 1u);  // 625 bytes earned: one packet
  r.on_sent(1'000);
  EXPECT_EQ(r.packets_allowed(10'000, 1'000), 0u);
  EXPECT_EQ(r.resume_at(), 10'000 + 6'016);  // 376 bytes at 0.0625 B/ns
}

TEST(RateControlTest, AnIdleSlowQpSavesOnlyWhatItsRateEarnsInTheBurstTime) {
  DcqcnParams p;
  p.line_rate = 0.125;
  p.increase_period = p.alpha_period = 1'000'000'000;  // no recovery within the test
  RateControl r(p);
  r.reset(0);
  r.on_cnp(0, 0);  // 0.0625 B/ns; the bucket starts full (64 KiB)
  EXPECT_EQ(r.packets_allowed(0, 1'000), 66u);
  r.on_sent(66'000);
  // Idle for 10 ms: 625 000 bytes earned, but a 0.0625 B/ns QP keeps only 500 us'
  // worth, 31 250 bytes: a slow QP's burst stays small beside a shallow buffer.
  EXPECT_EQ(r.packets_allowed(10'000'000, 1'000), 32u);
}

TEST(RateControlTest, AtMostOneCnpPerIntervalPerConnection) {
  RateControl r;
  r.reset(0);
  EXPECT_TRUE(r.cnp_due(1'000));
  EXPECT_FALSE(r.cnp_due(1'001));
  EXPECT_FALSE(r.cnp_due(50'999));
  EXPECT_TRUE(r.cnp_due(51'000));
}

// Beside a loss-based flow the delay control competes (delay_control.h); a CNP is
// then answered as TCP answers an ECN echo: the window halves, once per window of
// data (until everything sent before the cut is acknowledged), and DCQCN, whose
// cut per CNP would hand the link to the other flow, stands at the line rate.
TEST(RateControlTest, WhileCompetingCnpsAndLossesHalveTheWindowOncePerWindowOfData) {
  SwiftParams sp;
  sp.rounds_to_compete = 1;
  sp.compete_rounds = 100'000;
  RateControl r({}, sp);
  r.reset(0);
  constexpr Nanos kUs = 1'000, kFull = 3'000 * kUs;  // a full buffer's round trip
  Nanos now = 0;
  uint32_t psn = 0;
  auto one_round = [&](Nanos rtt) {
    r.on_first_send(psn, 1, now);
    now += rtt;
    r.on_acknowledged(++psn, now, now);
  };
  one_round(100 * kUs);  // the base round trip
  r.on_cnp(now, psn);
  ASSERT_TRUE(r.paced()) << "DCQCN's cut, before competing";
  while (!r.swift().competing()) one_round(kFull);
  EXPECT_FALSE(r.paced()) << "competing: DCQCN back at the line rate";
  for (int i = 0; i < 300; ++i) one_round(kFull);
  const double grown = r.swift().window();
  ASSERT_GT(grown, 8);
  r.on_first_send(psn, 10, now);  // ten more in flight
  psn += 10;
  r.on_cnp(now, psn);
  EXPECT_DOUBLE_EQ(r.swift().window(), grown / 2);
  EXPECT_FALSE(r.paced()) << "the CNP cut the window, not DCQCN's rate";
  r.on_loss(now + kFull, psn);
  r.on_cnp(now + kFull, psn);
  EXPECT_DOUBLE_EQ(r.swift().window(), grown / 2) << "the same window of data";
  now += kFull;
  r.on_acknowledged(psn, now, now);  // all sent before the cut
  const double next = r.swift().window();
  r.on_loss(now, psn);
  EXPECT_DOUBLE_EQ(r.swift().window(), next / 2);
}

// While a gap is open the cumulative ACK stands still, and when it moves it covers
// a resend (Karn: no sample). The SACKs time the round trip meanwhile: by the
// newest PSN each names, when that is news and went once.
TEST(RateControlTest, SacksNamingANewerHeldPsnTimeTheRoundTripWhileAGapIsOpen) {
  SwiftParams sp;
  sp.initial_window = 64;  // the ceiling: no slow start here
  sp.target_queueing = 200'000;
  RateControl r({}, sp);
  r.reset(0);
  constexpr Nanos kUs = 1'000;
  r.on_first_send(0, 64, 0);
  r.on_acknowledged(10, 100 * kUs, 100 * kUs);  // the base round trip: 100 us
  ASSERT_EQ(r.swift().base_rtt(), 100 * kUs);
  const double before = r.swift().window();
  // PSN 10 is lost; 11..30 arrive and are held. 1 ms: far above the target.
  r.on_sacked(30, 1'000 * kUs, 1'000 * kUs);
  EXPECT_EQ(r.swift().rtt(), 1'000 * kUs);
  EXPECT_DOUBLE_EQ(r.swift().window(), before / 2);  // Swift's largest cut
  // The same newest named again (a resend filled part of a gap): no news, no sample.
  r.on_sacked(30, 5'000 * kUs, 5'000 * kUs);
  EXPECT_EQ(r.swift().rtt(), 1'000 * kUs);
  // A newest PSN that was resent times nothing (Karn).
  r.on_resent(40);
  r.on_sacked(40, 6'000 * kUs, 6'000 * kUs);
  EXPECT_EQ(r.swift().rtt(), 1'000 * kUs);
  EXPECT_DOUBLE_EQ(r.swift().window(), before / 2);
  // A newer one that went once: sampled; timely now, so no cut (and no growth:
  // nothing was acknowledged).
  r.on_sacked(45, 45 + 150 * kUs, 45 + 150 * kUs);
  EXPECT_EQ(r.swift().rtt(), 45 + 150 * kUs);
  EXPECT_DOUBLE_EQ(r.swift().window(), before / 2);
  // Half the PSN space later (24-bit PSNs compare within 2^23), a SACK's newest
  // is news still: what a SACK named is forgotten once acknowledged past.
  Nanos now = 10'000 * kUs;
  for (int quarter = 1; quarter <= 3; ++quarter)
    r.on_acknowledged(uint32_t(quarter) << 22, now, now);
  const uint32_t far = (3u << 22) + 20;  // 45 + more than 2^23: "before 45" if compared
  r.on_first_send(3u << 22, 64, now);
  r.on_sacked(far, now + 700 * kUs, now + 700 * kUs);
  EXPECT_EQ(r.swift().rtt(), 700 * kUs);
}

// A loss (a NAK, a SACK's gap) or a CNP ends the slow start (RFC 5681 §3.1) and
// cuts nothing: the cumulative ACK that closes a repaired gap acknowledges a
// whole span at once, which doubling would add to the window whole.
TEST(RateControlTest, ALossOrACnpEndsTheSlowStartWithoutACut) {
  constexpr Nanos kUs = 1'000;
  for (const bool cnp : {false, true}) {
    SCOPED_TRACE(cnp ? "a CNP" : "a loss");
    SwiftParams sp;
    sp.max_window = 256;
    sp.initial_window = 16;
    RateControl r({}, sp);
    r.reset(0);
    r.on_first_send(0, 16, 0);
    r.on_acknowledged(16, 100 * kUs, 100 * kUs);
    ASSERT_TRUE(r.swift().slow_start());
    ASSERT_DOUBLE_EQ(r.swift().window(), 32);
    r.on_first_send(16, 32, 100 * kUs);
    if (cnp) {
      r.on_cnp(150 * kUs, 48);
    } else {
      r.on_loss(150 * kUs, 48);
    }
    EXPECT_FALSE(r.swift().slow_start());
    EXPECT_DOUBLE_EQ(r.swift().window(), 32);
    r.on_resent(16);  // the repair: its ACK times nothing and releases all 32 at once
    r.on_acknowledged(48, 400 * kUs, 400 * kUs);
    EXPECT_DOUBLE_EQ(r.swift().window(), 33);  // additive: one per window, not 32 more
  }
}

}  // namespace
}  // namespace softrdma::engine::rc
