#include "engine/rc/loss_recovery.h"

#include <algorithm>

#include "engine/rc/selective_repeat.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

using wire::psn_diff;

uint32_t ResumeWindow::restart(uint32_t una) {
  packets_ = kPackets;
  una_ = una;
  return std::min(packets_, max_window_);
}

// Slow start after a gentle restart: every PSN acknowledged lets one more go, so
// the window doubles each round trip until it is the configured one again.
uint32_t ResumeWindow::grow(uint32_t una) {
  if (packets_ == 0) return max_window_;
  const int32_t acked = psn_diff(una, una_);
  if (acked > 0) {
    una_ = una;
    packets_ += uint32_t(acked);
  }
  if (packets_ >= max_window_) packets_ = 0;
  return packets_ == 0 ? max_window_ : packets_;
}

// Go back N (IBA 9.7.4.1.3): everything from `psn` that was sent goes again. A
// retry's first packet goes twice; an RNR NAK's resend is no retry.
Resend GoBackN::on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos /*now*/) {
  if (cause == LossCause::kTimeout) window_ = resume_.restart(psn);
  resend_to_ = high;
  return Resend{.from = psn, .repeat_first = cause != LossCause::kRnr};
}

void GoBackN::on_acknowledged(uint32_t una, Nanos /*now*/) { window_ = resume_.grow(una); }

std::unique_ptr<LossRecovery> make_loss_recovery(uint32_t max_window, bool selective,
                                                 uint32_t sack_span) {
  if (selective) return std::make_unique<SelectiveRepeat>(max_window, sack_span);
  return std::make_unique<GoBackN>(max_window);
}

}  // namespace softrdma::engine::rc
