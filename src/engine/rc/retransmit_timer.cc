#include "engine/rc/retransmit_timer.h"

#include <algorithm>

#include "wire/psn.h"

namespace softrdma::engine::rc {

namespace {

// RFC 6298 2.4's clock granularity G: the least variance term. A software RNIC's
// own timer wakes within tens of microseconds (epoll_pwait2).
constexpr Nanos kGranularity = 100'000;

}  // namespace

void RetransmitTimer::on_first_send(uint32_t psn, Nanos now) {
  if (sampling_) return;
  sampling_ = true;
  sample_psn_ = psn;
  sample_sent_ = now;
}

void RetransmitTimer::on_acknowledged(uint32_t una, Nanos now) {
  backoff_ = 0;
  if (!sampling_ || !wire::psn_before(sample_psn_, una)) return;
  sampling_ = false;
  add_sample(std::max<Nanos>(0, now - sample_sent_));
}

// RFC 6298 2.2-2.3, in integer nanoseconds (alpha = 1/8, beta = 1/4).
void RetransmitTimer::add_sample(Nanos rtt) {
  if (!measured_) {
    measured_ = true;
    srtt_ = rtt;
    rttvar_ = rtt / 2;
    return;
  }
  const Nanos deviation = srtt_ > rtt ? srtt_ - rtt : rtt - srtt_;
  rttvar_ = rttvar_ - rttvar_ / 4 + deviation / 4;
  srtt_ = srtt_ - srtt_ / 8 + rtt / 8;
}

Nanos RetransmitTimer::interval(Nanos floor, Nanos max_interval, uint32_t extra_doublings) const {
  if (floor == kNever) return kNever;  // IBA 9.7.6.1.1: timeout 0 is infinite
  const Nanos cap = std::max(floor, max_interval);
  Nanos base = floor;
  if (measured_) base = std::max(base, srtt_ + std::max(kGranularity, 4 * rttvar_));
  base = std::min(base, cap);
  const uint32_t doublings = std::min(backoff_ + extra_doublings, kMaxDoublings);
  return std::min(cap, base << doublings);
}

}  // namespace softrdma::engine::rc
