// Congestion control of an RC/UC connection's sending (docs/decisions/
// congestion-control.md): DCQCN's reaction point (Zhu et al., "Congestion Control
// for Large-Scale RDMA Deployments", SIGCOMM 2015, §4) sets a rate from the CNPs
// the peer sends when our packets arrive marked CE (RoCEv2 Annex A17.9), and a
// pacer holds the connection's data packets (requests and READ responses) to it.
// Until the first CNP the rate is the line rate and nothing is paced: a connection
// that never meets congestion pays one branch per turn.
//
// The notification point is here too: a connection that receives CE-marked
// packets answers with at most one CNP per `cnp_interval` (DCQCN's N, 50 us), as
// RoCE NICs do.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/clock.h"
#include "engine/rc/delay_control.h"

namespace softrdma::engine::rc {

// Rates are bytes per nanosecond (1.0 = 8 Gbit/s).
struct DcqcnParams {
  double line_rate = 5.0;                // R_max: 40 Gbit/s, where a connection starts
  double min_rate = 0.00125;             // 10 Mbit/s: never paced below this
  double additive_increase = 0.005;      // R_AI: 40 Mbit/s per increase step
  double hyper_increase = 0.0125;        // R_HAI: 100 Mbit/s per hyper step
  double g = 1.0 / 256;                  // the weight of a CNP in alpha
  Nanos alpha_period = 300'000;          // K: alpha decays once per this without a CNP
  Nanos increase_period = 300'000;       // T: a rate increase event per this
  uint64_t increase_bytes = 10u << 20;   // B: and one per this many bytes sent
  uint32_t fast_recovery_steps = 5;      // F: steps of fast recovery before increases
  Nanos cnp_interval = 50'000;           // N: a notification point's CNPs per flow
  // The pacer's bucket: what may leave back to back after an idle time (a software
  // RNIC's turns are coarse: a bucket smaller than a turn's worth would throttle
  // below the rate).
  uint64_t burst_bytes = 64u << 10;
  // ... but at most what the rate earns in this long (at least kMinBurstBytes): a
  // slow QP's burst must not fill a shallow switch buffer by itself.
  Nanos burst_time = 500'000;
};
inline constexpr uint64_t kMinBurstBytes = 4096;

// DCQCN's reaction point: the current rate RC and target rate RT, alpha, and the
// two counters of rate increase events. Timers are kept lazily: advance(now)
// applies every period that has passed since the last call.
class Dcqcn {
 public:
  explicit Dcqcn(const DcqcnParams& params = {}) : p_(params) { reset(0); }
  void reset(Nanos now);

  // A CNP arrived (DCQCN §4 "RP algorithm": cut, remember the target, alpha up).
  void on_cnp(Nanos now);
  // `bytes` left paced (the byte counter's increase events).
  void on_sent(uint64_t bytes);
  // Applies the alpha and increase timers that fired since the last call.
  void advance(Nanos now);

  double rate() const { return current_; }
  double target() const { return target_; }
  double alpha() const { return alpha_; }
  // Below the line rate: the pacer holds the connection to rate().
  bool limited() const { return current_ < p_.line_rate; }
  const DcqcnParams& params() const { return p_; }

 private:
  void increase_event();

  DcqcnParams p_;
  double current_ = 0;  // RC
  double target_ = 0;   // RT
  double alpha_ = 1.0;
  Nanos alpha_due_ = 0;      // next alpha decay
  Nanos increase_due_ = 0;   // next timer increase event
  uint64_t bytes_since_ = 0; // toward the next byte-counter event
  uint32_t timer_events_ = 0;
  uint32_t byte_events_ = 0;
};

// A token bucket in bytes at the reaction point's rate.
class Pacer {
 public:
  void reset(Nanos now, uint64_t burst_bytes, Nanos burst_time);
  // Bytes that may leave now at `rate` (bytes/ns): the bucket refilled since the last call.
  void refill(Nanos now, double rate);
  bool may_send() const { return tokens_ > 0; }
  uint64_t tokens() const { return tokens_ > 0 ? uint64_t(tokens_) : 0; }
  void on_sent(uint64_t bytes) { tokens_ -= int64_t(bytes); }
  // When the bucket holds a packet's worth again at `rate`.
  Nanos next_send(double rate) const;

 private:
  int64_t tokens_ = 0;  // may go below 0: a packet larger than what was left
  int64_t burst_ = 0;
  Nanos burst_time_ = 0;
  Nanos last_ = 0;
};

// Which controls a connection runs (DeviceConfig: SOFTRDMA_CONGESTION).
struct CongestionControls {
  bool dcqcn = true;  // CNPs cut the rate (and CE marks are answered with CNPs)
  bool delay = true;  // Swift: the RTT bounds the window (delay_control.h)
};

// A connection's congestion control: DCQCN's reaction point, Swift's window and
// the pacer both feed, and the notification point's CNP limit.
class RateControl {
 public:
  explicit RateControl(const DcqcnParams& dcqcn = {}, const SwiftParams& swift = {},
                       CongestionControls on = {})
      : dcqcn_(dcqcn), swift_(swift), on_(on) {}
  void reset(Nanos now);
  // The delay window's ceiling, the loss recovery's window (taken at the next reset).
  void set_max_window(uint32_t packets) { swift_.set_max_window(packets); }

  // DCQCN's pacing of this side's data (the requester's packets, the responder's
  // READ responses): the bucket at DCQCN's rate.
  bool paced() const { return dcqcn_.limited(); }
  // Packets of `packet_bytes` that may leave now (UINT32_MAX: not paced), after
  // refreshing the timers and the bucket; 0 holds the sender until resume_at().
  uint32_t packets_allowed(Nanos now, uint32_t packet_bytes);
  void on_sent(uint64_t bytes);
  // The delay control's pacing of the requester alone, while its window is below
  // one packet: one packet per RTT / window (Swift §3.1). The responder's READ
  // responses are the peer requester's window's to limit.
  bool delay_paced() const { return on_.delay && swift_.pacing(); }
  // 1 when the next packet may go now, 0 (held) until resume_at(); UINT32_MAX
  // when not delay-paced.
  uint32_t delay_packets_allowed(Nanos now);
  void on_delay_paced_send(Nanos now);
  // When a sender held by a pacer may go again (kNever when not held).
  Nanos resume_at() const;
  bool held() const { return held_ || delay_held_; }
  // Held by DCQCN's bucket (what the responder's READ responses draw from).
  bool bucket_held() const { return held_; }
  // A CNP; `high` is the first PSN never sent (a competing cut lasts until it).
  void on_cnp(Nanos now, uint32_t high);

  // The delay control's view of the requester: packets that may be in flight
  // (UINT32_MAX when it is off), first sends, resends, acknowledgements, timeouts.
  uint32_t window() const { return on_.delay ? swift_.packets_in_flight() : UINT32_MAX; }
  // `psns` PSNs from `psn` left for the first time (a READ request: its responses').
  void on_first_send(uint32_t psn, uint32_t psns, Nanos now);
  void on_resent(uint32_t psn) {
    if (on_.delay) stamps_.forget(psn);
  }
  // Everything before `una` is acknowledged, by a response that arrived at this
  // host at `arrival` (before `now` when it waited in the kernel): the round trip
  // ends there.
  void on_acknowledged(uint32_t una, Nanos now, Nanos arrival);
  void on_timeout(Nanos now);
  // A SACK named `newest` the newest PSN the responder holds. When that is newer
  // than any SACK named before, its arrival is what sent this SACK: if it went
  // once, its send time gives a round trip. While a gap is open the cumulative
  // ACK stands still and then covers a resend (Karn's rule times nothing), so
  // without these the delay control is blind exactly while a queue overflows.
  void on_sacked(uint32_t newest, Nanos now, Nanos arrival);
  // A loss found by a NAK or a SACK (not a timeout); `high` as for on_cnp.
  void on_loss(Nanos now, uint32_t high) {
    if (on_.delay) swift_.end_slow_start();
    competing_cut(now, high);
  }

  // Receiving a CE-marked packet: true when a CNP is due (at most one per interval).
  bool cnp_due(Nanos now);

  const Dcqcn& dcqcn() const { return dcqcn_; }
  const Swift& swift() const { return swift_; }
  const CongestionControls& controls() const { return on_; }

 private:
  // While the delay control competes: a loss or a CNP halves its window, once per
  // window of data (until everything sent before the cut is acknowledged: TCP's
  // recovery and CWR, RFC 6675, RFC 3168 §6.1.2). A round trip in time would
  // need a fresh sample, and Karn's rule leaves few on a path that drops.
  void competing_cut(Nanos now, uint32_t high);

  Dcqcn dcqcn_;
  Swift swift_;
  const CongestionControls on_;
  Pacer pacer_;
  SendStamps stamps_;
  uint32_t acked_to_ = 0;   // una at the last acknowledgement
  bool started_ = false;    // a first send set acked_to_
  // The newest PSN a SACK named, until acknowledged past.
  std::optional<uint32_t> sacked_newest_;
  uint32_t cut_until_ = 0;  // a competing cut waits until acked_to_ reaches this
  bool cut_made_ = false;
  bool held_ = false;       // a sender found the bucket empty
  Nanos delay_next_ = 0;    // when the delay-paced requester may send again
  bool delay_held_ = false;
  Nanos last_cnp_sent_ = 0;
  bool sent_cnp_ = false;
};

}  // namespace softrdma::engine::rc
