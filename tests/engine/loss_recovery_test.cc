// Loss recovery alone (rc/loss_recovery.h, docs/decisions/loss-recovery.md):
// go-back-N's window, what a loss makes the requester resend, and the gentle
// restart after a timeout, driven by PSNs as the completer reports them.
#include "engine/rc/loss_recovery.h"

#include <gtest/gtest.h>

#include "wire/psn.h"

namespace softrdma::engine::rc {
namespace {

constexpr uint32_t kWindow = 64;

// The window counts PSNs from the oldest unacknowledged one.
TEST(GoBackN, TheWindowCountsFromTheOldestUnacknowledgedPsn) {
  GoBackN gbn(kWindow);
  gbn.reset(100);
  EXPECT_EQ(gbn.window(), kWindow);
  EXPECT_EQ(gbn.window_space(100, 100), kWindow) << "nothing in flight";
  EXPECT_EQ(gbn.window_space(110, 100), kWindow - 10);
  EXPECT_EQ(gbn.window_space(164, 100), 0u) << "a full window waits for an ACK";
  EXPECT_EQ(gbn.window_space(99, 100), kWindow) << "a resend behind una is never held";
}

// Across the 24-bit PSN wrap the arithmetic is modular (IBA 9.7.1).
TEST(GoBackN, TheWindowIsModuloThePsnSpace) {
  GoBackN gbn(kWindow);
  const uint32_t una = wire::kPsnMask - 4;  // five PSNs before the wrap
  EXPECT_EQ(gbn.window_space(wire::psn_add(una, 20), una), kWindow - 20);
}

// A NAK or a response gap: everything sent from the PSN goes again, the first
// packet twice; an RNR NAK's resend is no retry and goes once.
TEST(GoBackN, ALossResendsEverythingSentFromItsPsn) {
  GoBackN gbn(kWindow);
  gbn.reset(0);
  const Resend nak = gbn.on_loss(7, 30, LossCause::kNak, 0);
  EXPECT_EQ(nak.from, 7u);
  EXPECT_EQ(nak.to, 30u) << "go back N: up to the first PSN never sent";
  EXPECT_TRUE(nak.repeat_first);
  EXPECT_EQ(gbn.window(), kWindow) << "a NAK keeps the window";
  const Resend rnr = gbn.on_loss(7, 30, LossCause::kRnr, 0);
  EXPECT_EQ(rnr.from, 7u);
  EXPECT_EQ(rnr.to, 30u);
  EXPECT_FALSE(rnr.repeat_first);
}

// After a timeout the restart is gentle: two packets, then the window grows by
// what each ACK acknowledges until it is the configured one again.
TEST(GoBackN, ATimeoutRestartsWithTwoPacketsAndGrowsWithAcks) {
  GoBackN gbn(kWindow);
  gbn.reset(0);
  gbn.on_loss(10, 50, LossCause::kTimeout, 0);
  EXPECT_EQ(gbn.window(), GoBackN::kResumeWindow);
  EXPECT_EQ(gbn.window_space(12, 10), 0u);
  gbn.on_acknowledged(12, 0);  // two acknowledged: four may be in flight
  EXPECT_EQ(gbn.window(), 4u);
  gbn.on_acknowledged(11, 0);  // an old ACK changes nothing
  EXPECT_EQ(gbn.window(), 4u);
  gbn.on_acknowledged(16, 0);
  EXPECT_EQ(gbn.window(), 8u);
  gbn.on_acknowledged(16 + kWindow, 0);
  EXPECT_EQ(gbn.window(), kWindow) << "back to the configured window";
  gbn.on_loss(80, 90, LossCause::kTimeout, 0);
  gbn.reset(90);
  EXPECT_EQ(gbn.window(), kWindow) << "a fresh connection starts with the whole window";
}

}  // namespace
}  // namespace softrdma::engine::rc
