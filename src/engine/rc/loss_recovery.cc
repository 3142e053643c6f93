#include "engine/rc/loss_recovery.h"

#include <algorithm>

#include "wire/psn.h"

namespace softrdma::engine::rc {

using wire::psn_diff;

// Go back N (IBA 9.7.4.1.3): everything from `psn` that was sent goes again. A
// retry's first packet goes twice; an RNR NAK's resend is no retry.
Resend GoBackN::on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos /*now*/) {
  if (cause == LossCause::kTimeout) {
    set_resume_window(kResumeWindow);
    resume_una_ = psn;
  }
  return Resend{.from = psn, .to = high, .repeat_first = cause != LossCause::kRnr};
}

// Slow start after a gentle restart: every PSN acknowledged lets one more go, so
// the window doubles each round trip until it is the configured one again.
void GoBackN::on_acknowledged(uint32_t una, Nanos /*now*/) {
  if (resume_window_ == 0) return;
  const int32_t acked = psn_diff(una, resume_una_);
  if (acked <= 0) return;
  resume_una_ = una;
  const uint32_t grown = resume_window_ + uint32_t(acked);
  set_resume_window(grown >= max_window_ ? 0 : grown);
}

std::unique_ptr<LossRecovery> make_loss_recovery(uint32_t max_window) {
  return std::make_unique<GoBackN>(max_window);
}

}  // namespace softrdma::engine::rc
