#include "engine/rc/delay_control.h"

#include <algorithm>
#include <cmath>

#include "wire/psn.h"

namespace softrdma::engine::rc {

Swift::Swift(const SwiftParams& params) : p_(params) {
  // Swift §3.4: the scaling is range at flow_scaling_min_window and 0 at
  // flow_scaling_max_window, linear in 1/sqrt(window) between.
  const double span = 1 / std::sqrt(p_.flow_scaling_min_window) -
                      1 / std::sqrt(p_.flow_scaling_max_window);
  fs_alpha_ = double(p_.flow_scaling_range) / span;
  fs_beta_ = -fs_alpha_ / std::sqrt(p_.flow_scaling_max_window);
  reset();
}

void Swift::reset() {
  window_ = std::clamp(p_.initial_window, std::max(1.0, p_.min_window), p_.max_window);
  slow_start_ = window_ < p_.max_window;
  base_rtt_ = 0;
  rtt_ = 0;
  last_decrease_ = 0;
  rtt_at_decrease_ = 0;
  decreased_ = false;
  rounds_at_floor_ = 0;
  competing_ = false;
  compete_until_ = 0;
  compete_window_ = 0;
}

Nanos Swift::target() const {
  const double scaling = std::clamp(fs_alpha_ / std::sqrt(window_) + fs_beta_, 0.0,
                                    double(p_.flow_scaling_range));
  return base_rtt_ + p_.target_queueing + Nanos(scaling);
}

// Swift §3.1 (its Algorithm 1, "On receiving ACK").
void Swift::on_ack(uint32_t acked, std::optional<Nanos> rtt, Nanos now) {
  if (rtt) take_sample(*rtt);
  if (base_rtt_ == 0 || acked == 0) return;  // nothing timed yet: nothing to compare
  end_competing_when_due(now);
  if (rtt_ < target()) {
    if (competing_) stop_competing();
    rounds_at_floor_ = 0;
    increase(acked);
  } else if (competing_) {
    increase(acked);  // Copa's competitive mode: as TCP, whatever the delay
  } else if (rtt) {
    above_target(now);  // only a fresh sample cuts: an old one was acted on
  }
  clamp();
}

void Swift::on_sample(Nanos rtt, Nanos now) {
  take_sample(rtt);
  end_competing_when_due(now);
  if (competing_ || rtt_ < target()) return;  // competing: losses and CNPs cut, not delay
  above_target(now);
  clamp();
}

void Swift::take_sample(Nanos rtt) {
  rtt_ = std::max<Nanos>(1, rtt);
  if (base_rtt_ == 0 || rtt_ < base_rtt_) base_rtt_ = rtt_;
  if (slow_start_ && rtt_ >= base_rtt_ + Nanos(p_.slow_start_exit * double(p_.target_queueing)))
    slow_start_ = false;  // the queue grows: from here the window is Swift's
}

// Additive increase of additive_increase per window's worth of ACKs; in the slow
// start, a packet per packet acknowledged.
void Swift::increase(uint32_t acked) {
  if (slow_start_) {
    window_ += double(acked);  // one packet per packet acknowledged: doubling per RTT
    if (window_ >= p_.max_window) slow_start_ = false;
    return;
  }
  const double step = p_.additive_increase * double(acked);
  window_ += window_ >= 1 ? step / window_ : step;
}

// Swift's multiplicative decrease by the excess, once per RTT; a cut at one packet
// or below with the delay still above the target counts toward competing.
void Swift::above_target(Nanos now) {
  if (!may_decrease(now)) return;
  rounds_at_floor_ = window_ <= 1 ? rounds_at_floor_ + 1 : 0;
  if (rounds_at_floor_ >= p_.rounds_to_compete) {
    competing_ = true;
    rounds_at_floor_ = 0;
    compete_until_ = now + Nanos(p_.compete_rounds) * rtt_;
    // Back where the last competition left off: the other flow is still there
    // (the delay is above the target at the floor), and growing again from one
    // packet at one packet per round trip would give it the link for as many.
    window_ = std::max(window_, compete_window_);
    return;
  }
  const double excess = double(rtt_ - target()) / double(rtt_);
  decrease(std::max(1 - p_.beta * excess, 1 - p_.max_decrease), now);
}

// Competing lasts compete_rounds round trips; then the delay is tried again.
void Swift::end_competing_when_due(Nanos now) {
  if (competing_ && now >= compete_until_) stop_competing();
}

void Swift::stop_competing() {
  competing_ = false;
  compete_window_ = window_;
}

void Swift::on_competing_loss(Nanos now) {
  if (!competing_) return;
  decrease(1 - p_.max_decrease, now);  // Reno: half
  window_ = std::max(window_, 1.0);
  clamp();
}

void Swift::on_timeout(Nanos now) {
  slow_start_ = false;
  if (window_ <= 1 || !may_decrease(now)) return;
  decrease(1 - p_.max_decrease, now);
  window_ = std::max(window_, 1.0);
  clamp();
}

Nanos Swift::pacing_interval() const {
  const Nanos rtt = rtt_ != 0 ? rtt_ : base_rtt_;
  return Nanos(double(rtt) / window_);
}

void Swift::decrease(double factor, Nanos now) {
  window_ *= factor;
  last_decrease_ = now;
  rtt_at_decrease_ = rtt_;
  decreased_ = true;
}

void Swift::clamp() { window_ = std::clamp(window_, p_.min_window, p_.max_window); }

void SendStamps::stamp(uint32_t psn, uint32_t count, Nanos now) {
  for (uint32_t i = 0; i < std::min(count, kSlots); ++i) {
    const uint32_t p = wire::psn_add(psn, i);
    slots_[p % kSlots] = {p, now};
  }
}

std::optional<Nanos> SendStamps::newest_if_all_sent_once(uint32_t from, uint32_t to) const {
  const int32_t count = wire::psn_diff(to, from);
  if (count <= 0 || count > int32_t(kSlots)) return std::nullopt;
  for (int32_t i = 0; i < count; ++i) {
    const uint32_t psn = wire::psn_add(from, i);
    const Slot& s = slots_[psn % kSlots];
    if (s.psn != psn || s.sent == kUnstamped) return std::nullopt;
  }
  return slots_[wire::psn_add(to, -1) % kSlots].sent;
}

}  // namespace softrdma::engine::rc
