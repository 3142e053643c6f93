// Loss recovery of an RC requester (docs/decisions/loss-recovery.md): what may be
// sent next, what a NAK, a response gap or a timeout makes it resend, and what an
// acknowledgement releases. The requester moves WQEs and builds packets; the
// completer detects losses and acknowledgements; this decides, driven by them and
// by the clock, as RetransmitTimer decides how long to wait. One object per
// connection, chosen when the connection is made (make_loss_recovery).
//
// Go-back-N (IBA 9.7.4.1.3, 9.7.5.2) is the first implementation and the only
// one every IBA peer understands. Selective repeat (resend only what was lost)
// and a congestion window plug in here, without changes to the roles: the
// requester resends exactly the range `on_loss` answers and sends within
// `window_space`.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/clock.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

// Why the requester must resend.
enum class LossCause : uint8_t {
  kRnr,      // an RNR NAK asked for the resend (IBA 9.7.5.2.8): no retry
  kNak,      // a PSN sequence error NAK or a gap in the responses (IBA 9.7.5.2.2)
  kTimeout,  // the retransmission timer expired (IBA 9.7.6.1.3)
};

// What to resend: PSNs [from, to) of what was sent, in order, then new work.
struct Resend {
  uint32_t from = 0;
  uint32_t to = 0;
  // Its first packet goes twice (docs/decisions/retransmission.md "Resuming").
  bool repeat_first = false;
};

class LossRecovery {
 public:
  virtual ~LossRecovery() = default;
  // A fresh connection whose first PSN is `psn` (RTS, or back from Reset).
  virtual void reset(uint32_t psn) = 0;
  // Packets from `psn` that may go now, `una` being the oldest unacknowledged: the
  // window counts PSNs from una. Asked per packet, so it reads data the policy
  // keeps current (window_) rather than calling it.
  uint32_t window_space(uint32_t psn, uint32_t una) const {
    const int32_t in_flight = wire::psn_diff(psn, una);
    if (in_flight <= 0) return window_;
    return in_flight >= int32_t(window_) ? 0 : window_ - uint32_t(in_flight);
  }
  // The window in force (the requester asks for an ACK at least twice per window).
  uint32_t window() const { return window_; }
  // A loss at `psn` (for a timeout: the oldest unacknowledged PSN); `high` is the
  // first PSN never sent.
  virtual Resend on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos now) = 0;
  // Everything before `una` is acknowledged.
  virtual void on_acknowledged(uint32_t una, Nanos now) = 0;

 protected:
  explicit LossRecovery(uint32_t window) : window_(window) {}
  uint32_t window_;  // packets that may be unacknowledged now (at least 1)
};

// Go-back-N with a fixed window of `max_window` packets. After a timeout it
// resumes with kResumeWindow packets, the window growing by what each ACK
// acknowledges, as TCP restarts after an RTO (docs/decisions/retransmission.md).
class GoBackN final : public LossRecovery {
 public:
  // Packets a gentle restart resends before the first ACK comes back: two, each
  // asking for an ACK, so that one lost packet or ACK does not waste the retry.
  static constexpr uint32_t kResumeWindow = 2;

  explicit GoBackN(uint32_t max_window) : LossRecovery(max_window), max_window_(max_window) {}

  void reset(uint32_t /*psn*/) override { set_resume_window(0); }
  Resend on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos now) override;
  void on_acknowledged(uint32_t una, Nanos now) override;

 private:
  // The configured window, or a gentle restart's smaller one (0: none).
  void set_resume_window(uint32_t packets) {
    resume_window_ = packets;
    window_ = packets != 0 && packets < max_window_ ? packets : max_window_;
  }

  const uint32_t max_window_;
  uint32_t resume_window_ = 0;  // after a timeout: the window while it grows; 0: none
  uint32_t resume_una_ = 0;     // the oldest unacknowledged PSN it last grew at
};

// The loss recovery a new RC connection runs.
std::unique_ptr<LossRecovery> make_loss_recovery(uint32_t max_window);

}  // namespace softrdma::engine::rc
