// Loss recovery of an RC requester (docs/decisions/loss-recovery.md): what may be
// sent next, what a NAK, a response gap or a timeout makes it resend, and what an
// acknowledgement releases. The requester moves WQEs and builds packets; the
// completer detects losses and acknowledgements; this decides, driven by them and
// by the clock, as RetransmitTimer decides how long to wait. One object per
// connection, chosen when the connection is made (make_loss_recovery).
//
// Go-back-N (IBA 9.7.4.1.3, 9.7.5.2) is the one every IBA peer understands;
// selective repeat (selective_repeat.h) resends only what was lost, between two
// softrdma ends that agreed on it (docs/decisions/selective-repeat.md). The
// requester rewinds to `Resend::from`, steps over what `stays_sent` keeps, and
// sends within `window_space`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "engine/clock.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

// Why the requester must resend.
enum class LossCause : uint8_t {
  kRnr,      // an RNR NAK asked for the resend (IBA 9.7.5.2.8): no retry
  kNak,      // a PSN sequence error NAK or a gap in the responses (IBA 9.7.5.2.2)
  kTimeout,  // the retransmission timer expired (IBA 9.7.6.1.3)
};

// Where the resend starts: the requester walks what was sent from `from` on,
// resending each PSN that stays_sent() does not keep, then new work.
struct Resend {
  uint32_t from = 0;
  // Its first packet goes twice (docs/decisions/retransmission.md "Resuming").
  bool repeat_first = false;
};

// What a window of `window` packets lets go with `in_flight` packets in flight.
inline uint32_t space_in_window(uint32_t window, uint32_t in_flight) {
  return in_flight >= window ? 0 : window - in_flight;
}

class LossRecovery {
 public:
  virtual ~LossRecovery() = default;
  // A fresh connection whose first PSN is `psn` (RTS, or back from Reset).
  virtual void reset(uint32_t psn) = 0;
  // Packets in flight when the requester is about to send `psn`, `una` being the
  // oldest unacknowledged PSN and `high` the first never sent. Go-back-N: every PSN
  // from una to `psn` (a rewind resends the rest, so it is not in flight).
  // Selective repeat: every PSN from una to `high` but those the responder holds,
  // the READ responses the completer holds, and those found lost and not yet
  // resent (TCP's "pipe", RFC 6675 §4): a hole being repaired does not stop the
  // packets after it, up to the span.
  uint32_t in_flight(uint32_t psn, uint32_t una, uint32_t high) const {
    const int32_t from_una = wire::psn_diff(selective_ ? high : psn, una);
    if (from_una <= 0) return 0;
    if (!selective_) return uint32_t(from_una);
    return uint32_t(from_una) -
           std::min(uint32_t(from_una), not_in_flight_ + responses_held_);
  }
  // Selective repeat: the completer holds `count` READ responses or ATOMIC ACKs
  // beyond a gap (completer_selective.cc); they have arrived.
  void set_responses_held(uint32_t count) { responses_held_ = count; }
  // Packets from `psn` that may go now (see in_flight): within the window, and
  // never further than the span from una. Asked per packet, so it reads data the
  // policy keeps current rather than calling it.
  uint32_t window_space(uint32_t psn, uint32_t una, uint32_t high) const {
    const int32_t from_una = std::max<int32_t>(0, wire::psn_diff(psn, una));
    const uint32_t span_left = space_in_window(span_, uint32_t(from_una));
    return std::min(span_left, space_in_window(window_, in_flight(psn, una, high)));
  }
  // The window in force (the requester asks for an ACK at least twice per window).
  uint32_t window() const { return window_; }
  // A loss at `psn` (for a timeout: the oldest unacknowledged PSN); `high` is the
  // first PSN never sent.
  virtual Resend on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos now) = 0;
  // Everything before `una` is acknowledged.
  virtual void on_acknowledged(uint32_t una, Nanos now) = 0;
  // Whether `psn`, sent before (below the first PSN never sent), is stepped over
  // by the resend the last loss began.
  virtual bool stays_sent(uint32_t psn) const = 0;
  // `psn` went again; `high` is the first PSN never sent.
  virtual void on_resent(uint32_t /*psn*/, uint32_t /*high*/) {}
  // Selective repeat: a selective acknowledgement (wire/sack.h) says the responder
  // holds the PSNs marked in `bitmap` after `first_missing`; everything before
  // `una` is acknowledged. The first PSN to resend now, if any.
  virtual std::optional<uint32_t> on_sack(uint32_t /*una*/, uint32_t /*first_missing*/,
                                          std::span<const uint8_t> /*bitmap*/,
                                          uint32_t /*high*/) {
    return std::nullopt;
  }
  // Selective repeat: nothing was heard for a probe interval (a tail loss no later
  // packet reveals, or a lost SACK): the PSN to send again as a probe, if any.
  virtual std::optional<uint32_t> on_probe(uint32_t /*una*/, uint32_t /*high*/) {
    return std::nullopt;
  }
  // Whether the two ends agreed on selective repeat (this is SelectiveRepeat).
  bool selective() const { return selective_; }

 protected:
  LossRecovery(uint32_t window, uint32_t span, bool selective)
      : window_(window), span_(span), selective_(selective) {}
  uint32_t window_;      // packets that may be in flight now (at least 1)
  const uint32_t span_;  // PSNs from una that may be unacknowledged at all
  const bool selective_;
  // Selective repeat: PSNs in [una, high) held by the responder or lost and not
  // yet resent.
  uint32_t not_in_flight_ = 0;
  uint32_t responses_held_ = 0;  // by the completer, within [una, high)
};

// After a timeout both policies resume with kResumeWindow packets, the window
// growing by what each ACK acknowledges, as TCP restarts after an RTO
// (docs/decisions/retransmission.md "Resuming").
class ResumeWindow {
 public:
  // Packets a gentle restart resends before the first ACK comes back: two, each
  // asking for an ACK, so that one lost packet or ACK does not waste the retry.
  static constexpr uint32_t kPackets = 2;

  explicit ResumeWindow(uint32_t max_window) : max_window_(max_window) {}
  // The window in force after a timeout at `una`.
  uint32_t restart(uint32_t una);
  // The window in force once everything before `una` is acknowledged.
  uint32_t grow(uint32_t una);
  uint32_t cancel() {
    packets_ = 0;
    return max_window_;
  }

 private:
  const uint32_t max_window_;
  uint32_t packets_ = 0;  // the window while it grows; 0: none
  uint32_t una_ = 0;      // the oldest unacknowledged PSN it last grew at
};

// Go-back-N with a fixed window of `max_window` packets: a loss resends
// everything sent from its PSN.
class GoBackN final : public LossRecovery {
 public:
  static constexpr uint32_t kResumeWindow = ResumeWindow::kPackets;

  explicit GoBackN(uint32_t max_window)
      : LossRecovery(max_window, max_window, false), resume_(max_window) {}

  void reset(uint32_t psn) override {
    window_ = resume_.cancel();
    resend_to_ = psn;
  }
  Resend on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos now) override;
  void on_acknowledged(uint32_t una, Nanos now) override;
  bool stays_sent(uint32_t psn) const override { return !wire::psn_before(psn, resend_to_); }

 private:
  ResumeWindow resume_;
  uint32_t resend_to_ = 0;  // the last loss resends up to here: everything sent then
};

// The loss recovery a new RC connection runs: selective repeat when its two ends
// agreed on it, else go-back-N; `sack_span`: the PSNs one SACK describes.
std::unique_ptr<LossRecovery> make_loss_recovery(uint32_t max_window, bool selective,
                                                 uint32_t sack_span);

}  // namespace softrdma::engine::rc
