// Selective repeat (docs/decisions/selective-repeat.md): between two softrdma ends
// that agreed on it, a loss resends only the PSNs that were lost. The responder
// holds what arrives beyond a gap and says so in selective acknowledgements
// (wire/sack.h); this keeps, per PSN of the window, what the responder holds and
// what was resent, and decides what is lost:
// - a PSN not held while at least kReorderThreshold PSNs sent after it are held
//   (reordering by fewer is not taken for loss: TCP's three duplicate ACKs, RFC
//   5681; Falcon's out-of-order threshold);
// - a PSN resent and still not held once kReorderThreshold PSNs sent after that
//   resend are held (the resend itself was lost: RACK's "sent after", RFC 8985,
//   counted in PSNs instead of time);
// - after a timeout, every PSN not held (the tail whose loss no later packet
//   revealed), from a small window as go-back-N restarts;
// - before that, when nothing was heard for a probe interval (a few round trips,
//   far below the Local ACK Timeout the timer may not undercut), the oldest PSN
//   not held goes again alone, charged to nothing: a tail loss probe (RACK-TLP,
//   RFC 8985 §7), which also recovers a lost SACK or a lost resend.
#pragma once

#include <array>
#include <cstdint>

#include "engine/rc/loss_recovery.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {

class SelectiveRepeat final : public LossRecovery {
 public:
  static constexpr uint32_t kReorderThreshold = 3;
  // PSNs the scoreboard covers from the oldest unacknowledged one: the widest span
  // fits.
  static constexpr uint32_t kScoreboard = 1024;
  static_assert(kScoreboard >= wire::kWideSackSpan);

  // The largest window is `sack_span` (wire/sack.h): every PSN in flight lies
  // within one SACK's span of the responder's expected PSN (the oldest
  // unacknowledged at most), so the responder can hold whatever arrives beyond a
  // gap. A larger window had the responder drop what lay beyond the span, and as
  // no SACK could ever show that tail held after a gap, each of its PSNs waited
  // for a tail probe: at 5 % loss and a window of 160 with a span of 128,
  // 0.5 MB/s where 128 moved 745 MB/s.
  SelectiveRepeat(uint32_t max_window, uint32_t sack_span);

  void reset(uint32_t psn) override;
  Resend on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos now) override;
  void on_acknowledged(uint32_t una, Nanos now) override;
  bool stays_sent(uint32_t psn) const override;
  void on_resent(uint32_t psn, uint32_t high) override;
  std::optional<uint32_t> on_sack(uint32_t una, uint32_t first_missing,
                                  std::span<const uint8_t> bitmap, uint32_t high) override;
  std::optional<uint32_t> on_probe(uint32_t una, uint32_t high) override;

 private:
  enum Mark : uint8_t {
    kHeld = 1u << 0,    // the responder holds it (a SACK said so)
    kToSend = 1u << 1,  // lost: the resend in progress sends it
    kResent = 1u << 2,  // sent again; resent_high_ says when
  };
  // Forgets the marks of every PSN before `una`.
  void advance(uint32_t una);
  // Whether `psn` lies in [base_, base_ + kScoreboard).
  bool covered(uint32_t psn) const;
  uint8_t marks(uint32_t psn) const { return marks_[psn % kScoreboard]; }
  void set_marks(uint32_t psn, uint8_t to);
  // Marks what is lost in [from, to) (see the header); the first such PSN.
  std::optional<uint32_t> mark_lost(uint32_t from, uint32_t to, uint32_t highest_held);

  ResumeWindow resume_;
  uint32_t base_ = 0;  // the oldest unacknowledged PSN the marks start at
  std::array<uint8_t, kScoreboard> marks_{};
  std::array<uint32_t, kScoreboard> resent_high_{};  // first PSN never sent at its resend
};

}  // namespace softrdma::engine::rc
