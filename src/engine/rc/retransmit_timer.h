// How long an RC requester waits for an acknowledgement before it retries
// (docs/decisions/retransmission.md).
//
// IBA 9.7.6.1.1 gives one number, the Local ACK Timeout (4.096 us x 2^timeout).
// A NIC acknowledges in microseconds whatever its host does; a software RNIC's
// acknowledgements wait for a scheduler, so a peer that is busy but alive may be
// silent for far longer than that. softrdma therefore waits:
//   - never less than the QP's Local ACK Timeout (the floor the application asked for);
//   - at least the round trip measured on this connection, as TCP does
//     (RFC 6298: RTO = SRTT + 4 RTTVAR, from ACKs of packets sent once: Karn);
//   - twice as long after each consecutive timeout (RFC 6298 5.5), up to
//     `max_interval` (or the floor, when the application asked for more); progress
//     ends the run of timeouts and the backoff with it, as it reloads retry_cnt
//     (keeping it until a packet sent once is acknowledged, as Karn's algorithm
//     would, left a lossy path at the longest wait: docs/decisions/retransmission.md),
// so retry_cnt still counts consecutive timeouts (IBA 9.7.6.1.3) while the time
// they span grows, and stays bounded: (retry_cnt + 1) x max(floor, max_interval).
#pragma once

#include <cstdint>

#include "engine/clock.h"

namespace softrdma::engine::rc {

class RetransmitTimer {
 public:
  // A fresh connection: nothing measured yet.
  void reset() { *this = RetransmitTimer{}; }

  // Times one packet at a time (RFC 6298 "at least once per RTT"): true when the
  // caller should report the next PSN it sends for the first time.
  bool wants_sample() const { return !sampling_; }
  void on_first_send(uint32_t psn, Nanos now);
  // Karn's rule: after a retransmission, an ACK cannot tell which copy it answers.
  void on_retry() { sampling_ = false; }
  // The timer expired: the next wait is twice as long (RFC 6298 5.5).
  void on_timeout() { backoff_ = backoff_ < kMaxDoublings ? backoff_ + 1 : backoff_; }
  // Everything before `una` is acknowledged, progress: the backoff ends, and a
  // sample is taken if the timed PSN is among it.
  void on_acknowledged(uint32_t una, Nanos now);

  // The wait before the next timeout; `floor` is the QP's Local ACK Timeout (kNever:
  // no timer), `extra_doublings` a backoff of the caller's own (a probe's retries).
  Nanos interval(Nanos floor, Nanos max_interval, uint32_t extra_doublings = 0) const;

  bool measured() const { return measured_; }
  Nanos srtt() const { return srtt_; }
  Nanos rttvar() const { return rttvar_; }
  uint32_t backoff() const { return backoff_; }

 private:
  // Doublings beyond this change nothing (2^20 x 4 us > any cap) and cannot overflow.
  static constexpr uint32_t kMaxDoublings = 20;
  void add_sample(Nanos rtt);

  bool sampling_ = false;
  uint32_t sample_psn_ = 0;
  Nanos sample_sent_ = 0;
  bool measured_ = false;
  Nanos srtt_ = 0;
  Nanos rttvar_ = 0;
  uint32_t backoff_ = 0;  // doublings since the last progress
};

}  // namespace softrdma::engine::rc
