// Sender-side, delay-based congestion control of an RC connection (docs/decisions/
// congestion-control.md, "Delay"): Swift (Kumar et al., "Swift: Delay is Simple and
// Effective for Congestion Control in the Datacenter", SIGCOMM 2020, §3).
//
// DCQCN needs a peer that answers CE marks with CNPs and a fabric that marks; Linux
// rxe sends no CNPs and most networks do not mark. Swift needs neither: the sender
// times its own packets' acknowledgements and keeps the round trip near a target
// by a congestion window (packets in flight):
//   - below the target, additive increase: `additive_increase` packets per RTT;
//   - above it, multiplicative decrease in proportion to the excess, at most
//     `max_decrease` and at most once per RTT;
//   - below one packet, the window becomes a pacing interval (RTT / window).
// Loss by itself is not congestion (issue 28: random loss must not collapse the
// rate): only a retransmission timeout cuts the window, once per RTT, and never
// below one packet (pacing is for the queueing the delay shows).
//
// Beside a loss-based flow (TCP keeps a shallow buffer full) the round trip
// never comes down to the target and a delay-based window yields everything. As
// Copa (Arun and Balakrishnan, NSDI 2018, §2.2 "competitive mode") does, the
// window then competes: when it has sat at one packet or below for
// `rounds_to_compete` cuts with the round trip still above the target, the
// queue is not this flow's to drain; until the round trip falls below the target
// again (the other flow left), or `compete_rounds` round trips have passed (then
// it tries the delay again), the window grows by one packet per round trip
// whatever the delay and halves on a loss or a CNP, once per round trip, as TCP
// Reno with ECN does; a later competition starts from the window the last ended
// with.
//
// A connection starts at `initial_window` packets, not at its ceiling, and
// doubles its window per round trip (TCP's slow start, RFC 5681 §3.1) while the
// round trip stays within `slow_start_exit` of the queueing target above the
// base RTT (a delay exit, as HyStart's: CUBIC, RFC 9438 §4.10); a window that
// started at a 256-packet ceiling put twice a 128 KiB switch buffer into the
// network before any round trip came back (docs/decisions/congestion-control.md,
// "Starting"). A timeout or a loss (a NAK, a SACK's gap) ends the slow start
// too, as TCP's (RFC 5681 §3.1): the cumulative ACK that closes a repaired gap
// times nothing (Karn) and acknowledges a whole span at once, which doubling
// would add to the window whole. A loss cuts nothing by itself (random loss is
// not congestion).
//
// The target is the path's base RTT (the least measured on this connection: a
// software path's fixed delay is not known in advance as a NIC fabric's is) plus
// `target_queueing`, plus Swift's flow-based scaling: a smaller window gets a
// larger target (α/√window + β, within [0, flow_scaling_range]), so that many flows
// through one queue converge to fair shares instead of all cutting at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "engine/clock.h"

namespace softrdma::engine::rc {

struct SwiftParams {
  double additive_increase = 1.0;     // packets per RTT
  double beta = 0.8;                  // decrease per unit of relative excess delay
  double max_decrease = 0.5;          // Swift's max_mdf: never below half per cut
  // Packets: one per 10 RTTs at the least. Swift's 0.001 serves thousands of flows
  // into one port at microsecond RTTs; a software path's RTT sample can be a
  // scheduler's milliseconds, and RTT / window is how long the next packet waits.
  double min_window = 0.1;
  double max_window = 64;             // packets: the loss recovery's window
  double initial_window = 32;         // packets at the start (at most max_window)
  double slow_start_exit = 0.25;      // of target_queueing: the slow start's delay exit
  Nanos target_queueing = 750'000;      // queueing delay allowed above the base RTT
  Nanos flow_scaling_range = 1'000'000; // the most flow scaling adds to the target
  double flow_scaling_min_window = 0.1;   // a window this small gets all of the range
  double flow_scaling_max_window = 100;   // ... this large, none of it
  uint32_t rounds_to_compete = 4;  // cuts at the floor before competing
  uint32_t compete_rounds = 64;    // round trips of competing before trying the delay
};

class Swift {
 public:
  explicit Swift(const SwiftParams& params = {});
  void reset();
  void set_max_window(double packets) { p_.max_window = packets; }

  // An acknowledgement released `acked` packets; `rtt`, when timed, is the round
  // trip of the newest of them.
  void on_ack(uint32_t acked, std::optional<Nanos> rtt, Nanos now);
  // A round trip timed by something other than an acknowledgement (a SACK's
  // newest held PSN): the delay compared with the target, a cut if above it,
  // nothing grows (nothing was acknowledged).
  void on_sample(Nanos rtt, Nanos now);
  // The retransmission timer expired: the path is in trouble beyond a random loss.
  void on_timeout(Nanos now);
  // A loss was found (a NAK, a SACK's gap), or a CNP came (ECN as TCP answers
  // it, RFC 3168 §6.1.2): while competing, half the window, else nothing. The
  // caller makes it at most one cut per window of data (RateControl).
  void on_competing_loss(Nanos now);
  // A loss or a CNP: the slow start ends (RFC 5681 §3.1; RFC 3168 §6.1.2), and
  // nothing is cut by it (see above).
  void end_slow_start() { slow_start_ = false; }
  // Competing with a loss-based flow (see above).
  bool competing() const { return competing_; }
  // Doubling per round trip from the initial window (see above).
  bool slow_start() const { return slow_start_; }

  double window() const { return window_; }
  // Packets that may be unacknowledged: the window, at least one.
  uint32_t packets_in_flight() const { return window_ < 1 ? 1 : uint32_t(window_); }
  // Below one packet per RTT the sender is paced instead.
  bool pacing() const { return window_ < 1; }
  // While pacing, the time between two packets: RTT / window (Swift §3.1).
  Nanos pacing_interval() const;
  // The delay the window aims for (the base RTT + the queueing target + scaling).
  Nanos target() const;
  bool measured() const { return base_rtt_ != 0; }
  Nanos base_rtt() const { return base_rtt_; }
  Nanos rtt() const { return rtt_; }  // the latest measured
  const SwiftParams& params() const { return p_; }

 private:
  // Once per RTT: the round trip measured when the last cut was made, so that
  // the cut's effect is seen before the next (a larger sample since must not hold
  // off the next cut by itself).
  bool may_decrease(Nanos now) const {
    return !decreased_ || now - last_decrease_ >= rtt_at_decrease_;
  }
  void take_sample(Nanos rtt);
  void decrease(double factor, Nanos now);
  void clamp();
  void above_target(Nanos now);
  void increase(uint32_t acked);
  void end_competing_when_due(Nanos now);
  void stop_competing();

  SwiftParams p_;
  double fs_alpha_ = 0;  // flow scaling: target += fs_alpha_ / sqrt(window) + fs_beta_
  double fs_beta_ = 0;
  double window_ = 0;
  Nanos base_rtt_ = 0;  // the least RTT measured; 0: none yet
  Nanos rtt_ = 0;       // the latest
  Nanos last_decrease_ = 0;
  Nanos rtt_at_decrease_ = 0;
  bool decreased_ = false;
  uint32_t rounds_at_floor_ = 0;  // cuts in a row made at one packet or below
  bool competing_ = false;
  bool slow_start_ = false;
  Nanos compete_until_ = 0;
  double compete_window_ = 0;  // the window when competing last ended
};

// When each PSN sent for the first time left, so that an acknowledgement can be
// timed by the newest packet it acknowledges (the one that asked for it: its RTT
// is path delay and queueing, not the wait for a coalesced ACK). A ring indexed by
// PSN, each slot tagged with its PSN.
//
// Karn's rule, extended to the whole acknowledgement: an ACK that covers a PSN
// resent (or not stamped: overwritten a ring later, cleared by a timeout) times
// nothing, because a cumulative ACK held back by a hole measures how long the hole
// took to repair, not the path: random loss must not read as queueing.
class SendStamps {
 public:
  static constexpr uint32_t kSlots = 256;

  // PSNs [psn, psn + count) left at `now` (a READ request stands for its responses).
  void stamp(uint32_t psn, uint32_t count, Nanos now);
  void forget(uint32_t psn) {
    Slot& s = slots_[psn % kSlots];
    if (s.psn == psn) s.sent = kUnstamped;
  }
  void clear() { slots_.fill({}); }
  // The send time of the PSN before `to` when every PSN of [from, to) was stamped
  // (sent once); none otherwise, or when the range exceeds the ring.
  std::optional<Nanos> newest_if_all_sent_once(uint32_t from, uint32_t to) const;

 private:
  static constexpr Nanos kUnstamped = -1;
  struct Slot {
    uint32_t psn = 0;
    Nanos sent = kUnstamped;
  };
  std::array<Slot, kSlots> slots_{};
};

}  // namespace softrdma::engine::rc
