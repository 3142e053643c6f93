// RC completer (IBA 9.7.5.2 "requester side, response handling"): consumes ACKs,
// NAKs, READ responses and ATOMIC ACKs; completes send WQEs in order; owns the
// retransmission timer (retry_cnt; its timing: RetransmitTimer) and the RNR retry
// count (rnr_retry).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>

#include "engine/clock.h"
#include "engine/rc/reorder_buffer.h"
#include "engine/rc/retransmit_timer.h"
#include "engine/wqe.h"
#include "wire/packet.h"

namespace softrdma::engine::rc {

class RcConnection;

class Completer {
 public:
  explicit Completer(RcConnection& conn) : conn_(conn) {}

  // A response that arrived at this host at `arrival` (the round trip's end;
  // `now` or before: it may have waited in the kernel).
  void on_response(wire::PacketView packet, Nanos now, Nanos arrival);
  // The requester sent something: make sure the retransmission timer runs.
  void on_sent(Nanos now);
  Nanos deadline() const { return std::min(deadline_, probe_deadline_); }
  void on_timer(Nanos now);
  void reset(uint32_t sq_psn, Nanos now);
  // The QP left the sending states (Error, Reset): no timer may act any more.
  void stop_timers();
  // Oldest PSN not yet acknowledged.
  uint32_t una_psn() const { return una_psn_; }
  // PSNs were sent and not yet acknowledged.
  bool outstanding() const;
  // The requester sent `psn` for the first time (a round-trip sample may start).
  void on_first_send(uint32_t psn);
  // The wait before the next timeout (docs/decisions/retransmission.md); the
  // liveness probe waits as long, doubled once more per unanswered probe.
  Nanos retry_interval(uint32_t extra_doublings = 0) const;

  // Completes the oldest WQEs that were executed without the wire (binds, local
  // invalidations, the same-host path) once nothing before them is outstanding.
  void complete_local_heads();

 private:
  void take_response(wire::PacketView packet, Nanos now);
  void complete_unacknowledged();
  void on_ack(wire::PacketView packet, Nanos now);
  void on_read_response(wire::PacketView packet, Nanos now);
  void on_atomic_ack(wire::PacketView packet, Nanos now);
  void on_sack(wire::PacketView packet, Nanos now);
  void take_hold(std::span<const uint8_t> hold);
  // Where a round trip sampled now ends: the response's arrival less the
  // responder's hold, or `now` outside a response.
  Nanos sample_end(Nanos now) const { return response_arrival_ != 0 ? response_arrival_ : now; }
  // Selective repeat (completer_selective.cc): a READ response or ATOMIC ACK beyond
  // the one awaited is held, not dropped; what fills the gap runs the held ones in
  // PSN order; a gap with responses held after it is asked for again at once, and
  // only the PSNs missing.
  std::optional<uint32_t> awaited_response() const;
  bool hold_response(wire::PacketView packet, Nanos now);
  void run_held_responses(Nanos now);
  // True when it asked for something.
  bool repair_read_gaps(Nanos now, bool probe = false);
  uint32_t ask_read_part(uint32_t psn, uint32_t count, Nanos now);
  std::optional<uint32_t> last_response_asked() const;
  Nanos answer_wait() const;
  void on_nak(uint8_t syndrome, uint32_t psn, Nanos now);
  bool response_in_place(const SendWqe& w, wire::PacketView packet) const;
  bool place(const SendWqe& w, uint64_t offset, std::span<const uint8_t> data);
  // Completes every WQE wholly acknowledged by a response for `psn` (implicit ACK,
  // IBA 9.7.5.2.1); returns false when a READ/ATOMIC before it lost its response.
  bool acknowledge_through(uint32_t psn, Nanos now);
  void complete_head(ibv_wc_status status);
  // The head WQE failed: it completes with `status`, the QP goes to Error.
  void fail_head(ibv_wc_status status, Nanos now);
  bool sq_empty_or_unsent();
  void progress_made(Nanos now);
  // Go back N from `psn`, charged to retry_cnt. After a timeout the restart is
  // gentle: a small window, growing as ACKs return (docs/decisions/retransmission.md).
  enum class Cause { kGapOrNak, kTimeout };
  void retry(uint32_t psn, Nanos now, Cause cause = Cause::kGapOrNak);
  bool sending_state() const;
  void restart_timer(Nanos now);
  // Selective repeat's tail loss probe (selective_repeat.h): armed with the timer,
  // a few round trips long, backing off with each probe that is not answered.
  Nanos probe_interval() const;
  void on_probe_timer(Nanos now);
  void peer_heard(Nanos now);
  void publish_held();

  RcConnection& conn_;
  uint32_t una_psn_ = 0;
  uint8_t retries_left_ = 7;
  uint8_t rnr_retries_left_ = 7;
  Nanos deadline_ = kNever;
  Nanos probe_deadline_ = kNever;
  uint32_t probes_ = 0;  // tail probes since the last progress
  RetransmitTimer rto_;
  // A retry was made since the last progress: a late response or ACK that shows
  // the same gap again must not retry again (one retry per gap, until progress or
  // the next timeout).
  bool read_rerequested_ = false;
  // Responses held beyond a gap, and the PSNs asked for again since the last
  // probe (asked once per probe interval; the probe asks for the rest).
  ReorderBuffer responses_held_;
  // The arrival of the response being taken (on_response), 0 outside one.
  Nanos response_arrival_ = 0;
};

}  // namespace softrdma::engine::rc
