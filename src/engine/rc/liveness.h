// RC liveness probe (docs/decisions/retransmission.md "Idle connections").
//
// A requester with nothing outstanding has no timer running, so a peer that died
// (a process killed with SIGKILL closes nothing) is never noticed by a QP that only
// waits: a receiver blocked for its next message, a sender waiting for credits.
// After `DeviceConfig::idle_probe_interval_ns` of silence an RC QP in RTS sends its
// peer a probe that every IBA-conformant responder answers without side effects: a
// zero-length RDMA WRITE carrying the last PSN used (next PSN - 1) with AckReq set.
// Its PSN is behind the responder's expected PSN, so it is a duplicate request,
// re-acknowledged and never executed (IBA 9.7.5.1.2; Linux Soft-RoCE's
// duplicate_request() does the same). An unanswered probe is retried with the data
// path's timing (RetransmitTimer) and retry_cnt; when they are exhausted the QP
// goes to Error with IBV_EVENT_QP_FATAL and every WQE is flushed.
#pragma once

#include <cstdint>

#include "engine/clock.h"

namespace softrdma::engine::rc {

class RcConnection;

class Liveness {
 public:
  explicit Liveness(RcConnection& conn) : conn_(conn) {}

  // The QP entered RTS: the idle clock starts now.
  void start(Nanos now);
  // The QP left RTS/SQD: nothing may act any more.
  void stop();
  // A packet from the peer arrived: it is alive (cheap: called per packet).
  void heard(Nanos now) {
    last_heard_ = now;
    probing_ = false;
  }
  // An ACK for `psn` answers the probe in flight (not a stray duplicate ACK).
  bool answers_probe(uint32_t psn) const { return probe_sent_ && psn == probe_psn_; }
  Nanos deadline() const { return deadline_; }
  void on_timer(Nanos now);

 private:
  bool enabled() const;
  // The next idle deadline from `from`, rounded up to a tick shared by every QP, so
  // that the idle QPs of a device wake its engine together, not one by one.
  Nanos idle_deadline(Nanos from) const;
  void send_probe(Nanos now);
  [[gnu::cold]] void give_up(Nanos now);

  RcConnection& conn_;
  Nanos last_heard_ = 0;
  Nanos deadline_ = kNever;
  bool probing_ = false;     // a probe is unanswered (heard() clears it)
  bool probe_sent_ = false;  // since the last start(): probe_psn_ is meaningful
  uint32_t probe_psn_ = 0;
  uint32_t timeouts_ = 0;    // consecutive unanswered probes
};

}  // namespace softrdma::engine::rc
