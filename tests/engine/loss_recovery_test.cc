// Loss recovery alone (rc/loss_recovery.h, docs/decisions/loss-recovery.md,
// selective-repeat.md): go-back-N's window, what a loss makes the requester
// resend, the gentle restart after a timeout, and selective repeat's decisions
// from SACKs, driven by PSNs as the completer reports them.
#include "engine/rc/loss_recovery.h"

#include <gtest/gtest.h>

#include <array>
#include <initializer_list>

#include "engine/rc/selective_repeat.h"
#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {
namespace {

constexpr uint32_t kWindow = 64;

// The window counts PSNs from the oldest unacknowledged one.
TEST(GoBackN, TheWindowCountsFromTheOldestUnacknowledgedPsn) {
  GoBackN gbn(kWindow);
  gbn.reset(100);
  EXPECT_EQ(gbn.window(), kWindow);
  EXPECT_EQ(gbn.window_space(100, 100, 100), kWindow) << "nothing in flight";
  EXPECT_EQ(gbn.window_space(110, 100, 110), kWindow - 10);
  EXPECT_EQ(gbn.window_space(164, 100, 164), 0u) << "a full window waits for an ACK";
  EXPECT_EQ(gbn.window_space(99, 100, 164), kWindow) << "a resend behind una is never held";
}

// Across the 24-bit PSN wrap the arithmetic is modular (IBA 9.7.1).
TEST(GoBackN, TheWindowIsModuloThePsnSpace) {
  GoBackN gbn(kWindow);
  const uint32_t una = wire::kPsnMask - 4;  // five PSNs before the wrap
  EXPECT_EQ(gbn.window_space(wire::psn_add(una, 20), una, wire::psn_add(una, 20)), kWindow - 20);
}

// A NAK or a response gap: everything sent from the PSN goes again, the first
// packet twice; an RNR NAK's resend is no retry and goes once.
TEST(GoBackN, ALossResendsEverythingSentFromItsPsn) {
  GoBackN gbn(kWindow);
  gbn.reset(0);
  const Resend nak = gbn.on_loss(7, 30, LossCause::kNak, 0);
  EXPECT_EQ(nak.from, 7u);
  EXPECT_FALSE(gbn.stays_sent(7));
  EXPECT_FALSE(gbn.stays_sent(29)) << "go back N: up to the first PSN never sent";
  EXPECT_TRUE(gbn.stays_sent(30)) << "sent after the loss was seen";
  EXPECT_TRUE(nak.repeat_first);
  EXPECT_FALSE(gbn.selective());
  EXPECT_EQ(gbn.window(), kWindow) << "a NAK keeps the window";
  const Resend rnr = gbn.on_loss(7, 30, LossCause::kRnr, 0);
  EXPECT_EQ(rnr.from, 7u);
  EXPECT_FALSE(gbn.stays_sent(29));
  EXPECT_FALSE(rnr.repeat_first);
}

// After a timeout the restart is gentle: two packets, then the window grows by
// what each ACK acknowledges until it is the configured one again.
TEST(GoBackN, ATimeoutRestartsWithTwoPacketsAndGrowsWithAcks) {
  GoBackN gbn(kWindow);
  gbn.reset(0);
  gbn.on_loss(10, 50, LossCause::kTimeout, 0);
  EXPECT_EQ(gbn.window(), GoBackN::kResumeWindow);
  EXPECT_EQ(gbn.window_space(12, 10, 20), 0u);
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

// A SACK bitmap marking PSNs `first_missing + 1 + i` for each i given.
std::array<uint8_t, wire::kSackBitmapBytes> held(std::initializer_list<uint32_t> after) {
  std::array<uint8_t, wire::kSackBitmapBytes> bitmap{};
  for (uint32_t i : after) wire::sack_mark(bitmap, i);
  return bitmap;
}

// One lost packet: the SACKs that follow it hold more and more after it; it is
// taken for lost once three sent after it are held (reordering by fewer is not
// loss), and only it is resent.
TEST(SelectiveRepeat, AGapIsLostOnceThreeLaterPacketsAreHeld) {
  SelectiveRepeat sr(kWindow, wire::kSackSpan);
  sr.reset(0);
  EXPECT_TRUE(sr.selective());
  // Sent 0..19; 0..4 acknowledged, 5 missing, 6 and 7 held.
  EXPECT_FALSE(sr.on_sack(5, 5, held({0, 1}), 20).has_value()) << "two: maybe reordered";
  const std::optional<uint32_t> lost = sr.on_sack(5, 5, held({0, 1, 2}), 20);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(*lost, 5u);
  EXPECT_FALSE(sr.stays_sent(5));
  for (uint32_t psn = 6; psn < 20; ++psn) EXPECT_TRUE(sr.stays_sent(psn)) << psn;
  sr.on_resent(5, 20);
  EXPECT_TRUE(sr.stays_sent(5)) << "resent once: not again on the next walk";
  // More SACKs for packets sent before the resend do not resend it again.
  EXPECT_FALSE(sr.on_sack(5, 5, held({0, 1, 2, 3, 4}), 20).has_value());
}

// Several gaps in one SACK are resent in one walk; what the SACK holds is not.
TEST(SelectiveRepeat, EveryGapOneSackShowsIsResentAndNothingHeld) {
  SelectiveRepeat sr(kWindow, wire::kSackSpan);
  sr.reset(100);
  // 100 missing; 101..109 held but 104 and 107.
  const std::optional<uint32_t> lost = sr.on_sack(100, 100, held({0, 1, 2, 4, 5, 7, 8}), 120);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(*lost, 100u);
  EXPECT_FALSE(sr.stays_sent(100));
  EXPECT_FALSE(sr.stays_sent(104));
  EXPECT_TRUE(sr.stays_sent(107)) << "two held after it: maybe only reordered";
  EXPECT_TRUE(sr.stays_sent(103));
  EXPECT_TRUE(sr.stays_sent(110)) << "after the highest held: not known lost";
}

// A resend that is lost too is resent again once packets sent after it are held
// (RACK's "sent after", in PSNs).
TEST(SelectiveRepeat, AResendLostAgainIsResentWhenLaterPacketsAreHeld) {
  SelectiveRepeat sr(kWindow, wire::kSackSpan);
  sr.reset(0);
  // 0 lost, 1..9 held.
  ASSERT_TRUE(sr.on_sack(0, 0, held({0, 1, 2, 3, 4, 5, 6, 7, 8}), 10).has_value());
  sr.on_resent(0, 10);  // PSNs from 10 on are sent after the resend
  EXPECT_FALSE(sr.on_sack(0, 0, held({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), 12).has_value())
      << "10 and 11 held: two sent after the resend";
  const std::optional<uint32_t> again =
      sr.on_sack(0, 0, held({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), 13);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 0u);
}

// An acknowledgement forgets what lies before it; a timeout resends all that is
// not held, from a window of two; a NAK (a READ response gap) names one PSN.
TEST(SelectiveRepeat, TimeoutsResendWhatIsNotHeldAndNaksOnePsn) {
  SelectiveRepeat sr(kWindow, wire::kSackSpan);
  sr.reset(0);
  EXPECT_FALSE(sr.on_sack(3, 3, held({1}), 8).has_value());  // 5 held
  const Resend timeout = sr.on_loss(3, 8, LossCause::kTimeout, 0);
  EXPECT_EQ(timeout.from, 3u);
  EXPECT_EQ(sr.window(), ResumeWindow::kPackets);
  EXPECT_FALSE(sr.stays_sent(3));
  EXPECT_FALSE(sr.stays_sent(4));
  EXPECT_TRUE(sr.stays_sent(5)) << "held by the responder";
  EXPECT_FALSE(sr.stays_sent(7));
  sr.on_acknowledged(8, 0);
  SelectiveRepeat fresh(kWindow, wire::kSackSpan);
  fresh.reset(0);
  fresh.on_loss(2, 9, LossCause::kNak, 0);
  EXPECT_FALSE(fresh.stays_sent(2));
  EXPECT_TRUE(fresh.stays_sent(3)) << "only the PSN named";
  EXPECT_EQ(fresh.window(), kWindow);
}

// What the responder holds and what was found lost are not in flight (TCP's
// pipe): a hole being repaired does not stop the packets after it, up to the span
// (what one SACK describes) from the oldest unacknowledged PSN.
TEST(SelectiveRepeat, HeldAndLostPacketsAreNotInFlight) {
  SelectiveRepeat sr(kWindow, wire::kSackSpan);
  sr.reset(0);
  EXPECT_EQ(sr.in_flight(kWindow, 0, kWindow), kWindow);
  EXPECT_EQ(sr.window_space(kWindow, 0, kWindow), 0u) << "a full window";
  // 0 lost, 1..63 held.
  std::array<uint8_t, wire::kSackBitmapBytes> bitmap{};
  for (uint32_t i = 0; i + 1 < kWindow; ++i) wire::sack_mark(bitmap, i);
  ASSERT_EQ(sr.on_sack(0, 0, bitmap, kWindow), std::optional<uint32_t>(0));
  EXPECT_EQ(sr.in_flight(kWindow, 0, kWindow), 0u) << "63 held, 1 lost";
  sr.on_resent(0, kWindow);
  EXPECT_EQ(sr.in_flight(kWindow, 0, kWindow), 1u) << "the resend is in flight";
  EXPECT_EQ(sr.window_space(kWindow, 0, kWindow), kWindow - 1);
  const uint32_t high = 2 * kWindow - 1;  // 63 more sent
  EXPECT_EQ(sr.window_space(high, 0, high), 0u) << "the window again";
  // All held but 0: the span stops what the window would let go.
  for (uint32_t i = kWindow - 1; i + 1 < wire::kSackSpan; ++i) wire::sack_mark(bitmap, i);
  EXPECT_EQ(sr.on_sack(0, 0, bitmap, wire::kSackSpan), std::optional<uint32_t>(0))
      << "held what was sent after the resend: the resend was lost too";
  EXPECT_EQ(sr.in_flight(wire::kSackSpan, 0, wire::kSackSpan), 0u);
  EXPECT_EQ(sr.window_space(wire::kSackSpan, 0, wire::kSackSpan), 0u) << "the span";
  sr.on_acknowledged(wire::kSackSpan, 0);
  EXPECT_EQ(sr.in_flight(wire::kSackSpan, wire::kSackSpan, wire::kSackSpan), 0u);
  EXPECT_EQ(sr.window_space(wire::kSackSpan, wire::kSackSpan, wire::kSackSpan), kWindow);
}

// Go-back-N counts every PSN from una to where it sends: a rewind resends the rest.
TEST(GoBackN, EveryPsnFromUnaToTheNextIsInFlight) {
  GoBackN gbn(kWindow);
  gbn.reset(0);
  EXPECT_EQ(gbn.in_flight(10, 0, 40), 10u);
  EXPECT_EQ(gbn.in_flight(40, 0, 40), 40u);
}

// The window never exceeds what one SACK describes, whatever the setting asks
// (after a timeout too: it grows back to that, not to the setting).
TEST(SelectiveRepeat, TheWindowIsHeldToOneSacksSpan) {
  for (const uint32_t span : {wire::kSackSpan, wire::kWideSackSpan}) {
    SelectiveRepeat sr(4096, span);
    sr.reset(0);
    EXPECT_EQ(sr.window(), span);
    sr.on_loss(0, 100, LossCause::kTimeout, 0);
    for (uint32_t una = 1; una < 2000; una += 16) sr.on_acknowledged(una, 0);
    EXPECT_EQ(sr.window(), span);
    EXPECT_EQ(SelectiveRepeat(32, span).window(), 32u) << "a smaller setting stands";
  }
}

// With the wide SACK (both ends agreed on it) the sender goes on while a gap is
// open for more than the narrow span's 128 PSNs: what is held past it is shown,
// and the pipe has room.
TEST(SelectiveRepeat, AWideSpanLetsTheSenderGoOnPastTheNarrowSpansEnd) {
  for (const uint32_t span : {wire::kSackSpan, wire::kWideSackSpan}) {
    SelectiveRepeat sr(kWindow, span);
    sr.reset(0);
    // PSN 0 lost; every later one up to 199 held, as far as the span describes.
    std::array<uint8_t, wire::kWideSackBitmapBytes> bitmap{};
    const std::span<uint8_t> sack(bitmap.data(), wire::sack_bitmap_bytes(span));
    for (uint32_t i = 0; i + 1 < std::min(200u, span); ++i) wire::sack_mark(sack, i);
    EXPECT_EQ(sr.on_sack(0, 0, sack, 200), std::optional<uint32_t>(0)) << span;
    EXPECT_EQ(sr.in_flight(200, 0, 200), span > 200 ? 0u : 200u - span) << span;
    EXPECT_EQ(sr.window_space(200, 0, 200), span > 200 ? kWindow : 0u) << span;
  }
}

// A SACK naming PSNs never sent is a broken or hostile peer's: nothing is taken
// from beyond what was sent.
TEST(SelectiveRepeat, ASackBeyondWhatWasSentMarksNothingThere) {
  SelectiveRepeat sr(kWindow, wire::kSackSpan);
  sr.reset(0);
  EXPECT_FALSE(sr.on_sack(0, 0, held({20, 21, 22, 23}), 5).has_value());
  EXPECT_TRUE(sr.stays_sent(0));
}

}  // namespace
}  // namespace softrdma::engine::rc
