#include "engine/rc/rate_control.h"

#include <algorithm>
#include <cmath>

#include "wire/psn.h"

namespace softrdma::engine::rc {

namespace {
// Periods applied one by one at most; beyond, a connection idle that long has
// recovered anyway (each period raises the rate at least R_AI).
constexpr uint32_t kMaxCatchUp = 4096;
}  // namespace

void Dcqcn::reset(Nanos now) {
  current_ = p_.line_rate;
  target_ = p_.line_rate;
  alpha_ = 1.0;  // DCQCN §4: alpha starts at 1, the first CNP halves the rate
  alpha_due_ = now + p_.alpha_period;
  increase_due_ = now + p_.increase_period;
  bytes_since_ = 0;
  timer_events_ = 0;
  byte_events_ = 0;
}

void Dcqcn::on_cnp(Nanos now) {
  advance(now);
  target_ = current_;
  current_ = std::max(p_.min_rate, current_ * (1 - alpha_ / 2));
  alpha_ = (1 - p_.g) * alpha_ + p_.g;
  // The increase stages start again from this cut.
  timer_events_ = 0;
  byte_events_ = 0;
  bytes_since_ = 0;
  increase_due_ = now + p_.increase_period;
  alpha_due_ = now + p_.alpha_period;
}

void Dcqcn::on_sent(uint64_t bytes) {
  if (!limited()) return;
  bytes_since_ += bytes;
  while (bytes_since_ >= p_.increase_bytes && limited()) {
    bytes_since_ -= p_.increase_bytes;
    ++byte_events_;
    increase_event();
  }
}

void Dcqcn::advance(Nanos now) {
  if (!limited()) {
    // Nothing to recover: the timers start with the next cut.
    alpha_due_ = now + p_.alpha_period;
    increase_due_ = now + p_.increase_period;
    return;
  }
  if (now >= alpha_due_) {
    const Nanos periods = (now - alpha_due_) / p_.alpha_period + 1;
    alpha_ *= std::pow(1 - p_.g, double(periods));
    alpha_due_ += periods * p_.alpha_period;
  }
  for (uint32_t i = 0; now >= increase_due_ && limited(); ++i) {
    if (i == kMaxCatchUp) {
      current_ = target_ = p_.line_rate;
      break;
    }
    ++timer_events_;
    increase_event();
    increase_due_ += p_.increase_period;
  }
  if (!limited()) increase_due_ = now + p_.increase_period;
}

// DCQCN §4: fast recovery toward the target for F events, then additive increase
// of the target, then hyper increase once both counters passed F.
void Dcqcn::increase_event() {
  const uint32_t most = std::max(timer_events_, byte_events_);
  const uint32_t least = std::min(timer_events_, byte_events_);
  if (most >= p_.fast_recovery_steps) {
    if (least > p_.fast_recovery_steps)
      target_ += p_.hyper_increase * double(least - p_.fast_recovery_steps);
    else
      target_ += p_.additive_increase;
  }
  target_ = std::min(target_, p_.line_rate);
  current_ = (target_ + current_) / 2;
  // Within 1 % of the line: the line (no pacing) rather than approaching it forever.
  if (current_ >= 0.99 * p_.line_rate) current_ = target_ = p_.line_rate;
}

void Pacer::reset(Nanos now, uint64_t burst_bytes, Nanos burst_time) {
  burst_ = int64_t(burst_bytes);
  burst_time_ = burst_time;
  tokens_ = burst_;
  last_ = now;
}

void Pacer::refill(Nanos now, double rate) {
  if (now <= last_) return;
  const double earned = double(now - last_) * rate;
  const double cap = std::clamp(rate * double(burst_time_), double(kMinBurstBytes), double(burst_));
  tokens_ = std::max(tokens_, int64_t(std::min<double>(cap, double(tokens_) + earned)));
  last_ = now;
}

Nanos Pacer::next_send(double rate) const {
  if (tokens_ > 0) return last_;
  return last_ + Nanos(std::ceil(double(1 - tokens_) / rate));
}

void RateControl::reset(Nanos now) {
  dcqcn_.reset(now);
  swift_.reset();
  stamps_.clear();
  started_ = false;
  sacked_newest_.reset();
  cut_made_ = false;
  pacer_.reset(now, dcqcn_.params().burst_bytes, dcqcn_.params().burst_time);
  held_ = false;
  delay_next_ = 0;
  delay_held_ = false;
  sent_cnp_ = false;
  last_cnp_sent_ = 0;
}

uint32_t RateControl::packets_allowed(Nanos now, uint32_t packet_bytes) {
  if (!paced()) {
    held_ = false;
    return UINT32_MAX;
  }
  dcqcn_.advance(now);
  if (!paced()) {
    held_ = false;
    return UINT32_MAX;
  }
  pacer_.refill(now, dcqcn_.rate());
  const uint64_t bytes = pacer_.tokens();
  held_ = bytes == 0;
  return bytes == 0 ? 0
                    : uint32_t(std::min<uint64_t>(UINT32_MAX - 1,
                                                  (bytes + packet_bytes - 1) / packet_bytes));
}

void RateControl::on_sent(uint64_t bytes) {
  if (!paced()) return;
  pacer_.on_sent(bytes);
  dcqcn_.on_sent(bytes);
  held_ = !pacer_.may_send();
}

uint32_t RateControl::delay_packets_allowed(Nanos now) {
  delay_held_ = false;
  if (!delay_paced()) return UINT32_MAX;
  delay_held_ = now < delay_next_;
  return delay_held_ ? 0 : 1;
}

void RateControl::on_delay_paced_send(Nanos now) {
  if (!delay_paced()) return;
  delay_next_ = now + swift_.pacing_interval();
  delay_held_ = true;
}

Nanos RateControl::resume_at() const {
  const Nanos bucket = held_ ? pacer_.next_send(dcqcn_.rate()) : kNever;
  return std::min(bucket, delay_held_ ? delay_next_ : kNever);
}

// While the delay control competes with a loss-based flow, a CNP is answered as
// TCP answers an ECN echo (at most one halving per round trip), not by DCQCN's cut
// per CNP: the other flow's marks cut it once per round trip, and DCQCN's, many
// times in one, would hand it the link.
void RateControl::on_cnp(Nanos now, uint32_t high) {
  if (on_.delay) swift_.end_slow_start();
  if (on_.delay && swift_.competing()) {
    competing_cut(now, high);
    return;
  }
  const bool was_paced = paced();
  dcqcn_.on_cnp(now);
  if (!was_paced) pacer_.reset(now, dcqcn_.params().burst_bytes, dcqcn_.params().burst_time);
}

void RateControl::competing_cut(Nanos now, uint32_t high) {
  if (!on_.delay || !swift_.competing()) return;
  if (cut_made_ && wire::psn_before(acked_to_, cut_until_)) return;
  swift_.on_competing_loss(now);
  cut_made_ = true;
  cut_until_ = high;
}

void RateControl::on_first_send(uint32_t psn, uint32_t psns, Nanos now) {
  if (!on_.delay) return;
  if (!started_) {
    started_ = true;
    acked_to_ = psn;  // acknowledgements count from the first PSN sent
  }
  stamps_.stamp(psn, psns, now);
}

// The round trip of a packet sent at `sent` whose answer arrived at `arrival`: to
// the arrival, unless that is before the send (a clock stepped), then to `now`.
static Nanos round_trip(Nanos sent, Nanos arrival, Nanos now) {
  return arrival > sent ? arrival - sent : now - sent;
}

void RateControl::on_acknowledged(uint32_t una, Nanos now, Nanos arrival) {
  if (!on_.delay) return;
  if (!started_) return;
  const int32_t acked = wire::psn_diff(una, acked_to_);
  if (acked <= 0) return;
  // Acknowledged past the newest a SACK named: any later SACK's newest is news.
  // (Kept, it would read as ahead of PSNs 2^23 on, and block their samples.)
  if (sacked_newest_ && wire::psn_before(*sacked_newest_, una)) sacked_newest_.reset();
  std::optional<Nanos> rtt;
  if (const std::optional<Nanos> sent = stamps_.newest_if_all_sent_once(acked_to_, una))
    rtt = round_trip(*sent, arrival, now);
  const bool was_competing = swift_.competing();
  swift_.on_ack(uint32_t(acked), rtt, now);
  acked_to_ = una;
  // Competing begins: DCQCN's cuts, made before it, end with it (see on_cnp).
  if (!was_competing && swift_.competing() && on_.dcqcn) dcqcn_.reset(now);
}

void RateControl::on_sacked(uint32_t newest, Nanos now, Nanos arrival) {
  if (!on_.delay || !started_) return;
  if (sacked_newest_ && !wire::psn_before(*sacked_newest_, newest)) return;  // no news
  sacked_newest_ = newest;
  if (const std::optional<Nanos> sent =
          stamps_.newest_if_all_sent_once(newest, wire::psn_add(newest, 1)))
    swift_.on_sample(round_trip(*sent, arrival, now), now);
}

void RateControl::on_timeout(Nanos now) {
  if (!on_.delay) return;
  swift_.on_timeout(now);
  // Karn's rule: whatever was sent before the timeout times no round trip.
  stamps_.clear();
}

bool RateControl::cnp_due(Nanos now) {
  if (sent_cnp_ && now - last_cnp_sent_ < dcqcn_.params().cnp_interval) return false;
  sent_cnp_ = true;
  last_cnp_sent_ = now;
  return true;
}

}  // namespace softrdma::engine::rc
