#include "engine/rc/liveness.h"

#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

using namespace wire;

bool Liveness::enabled() const {
  Qp& qp = conn_.qp();
  // UC has no acknowledgements, XRC no requester-responder pair to probe; timeout 0
  // asks for no timer at all (IBA 9.7.6.1.1: infinite), so no probe would ever end.
  return qp.type() == IBV_QPT_RC && qp.ctx().config.idle_probe_interval_ns > 0 &&
         qp.attr().timeout != 0;
}

Nanos Liveness::idle_deadline(Nanos from) const {
  const Nanos interval = conn_.qp().ctx().config.idle_probe_interval_ns;
  const Nanos tick = std::max<Nanos>(interval / 4, 1'000'000);
  const Nanos due = from + interval;
  return (due + tick - 1) / tick * tick;
}

void Liveness::start(Nanos now) {
  last_heard_ = now;
  probing_ = false;
  probe_sent_ = false;
  timeouts_ = 0;
  deadline_ = enabled() ? idle_deadline(now) : kNever;
  if (deadline_ != kNever) conn_.qp().arm_timer(deadline_);
}

void Liveness::stop() {
  deadline_ = kNever;
  probing_ = false;
}

void Liveness::on_timer(Nanos now) {
  if (deadline_ == kNever || now < deadline_) return;
  deadline_ = kNever;
  if (!enabled()) return;
  const ibv_qp_state state = conn_.qp().state();
  if (state != IBV_QPS_RTS && state != IBV_QPS_SQD) return;  // a timer from before Error
  // Work in flight (or waiting out an RNR NAK) has its own timer watching the peer.
  const bool busy = conn_.completer().outstanding() || conn_.requester().paused_until() != 0;
  if (busy || state == IBV_QPS_SQD) {
    probing_ = false;
    deadline_ = idle_deadline(now);
    return;
  }
  if (!probing_) {
    const Nanos interval = conn_.qp().ctx().config.idle_probe_interval_ns;
    if (now - last_heard_ < interval) {
      deadline_ = idle_deadline(last_heard_);
      return;
    }
    timeouts_ = 0;
    return send_probe(now);
  }
  // IBA 9.7.6.1.3: retry_cnt consecutive timeouts, then the connection is lost.
  if (++timeouts_ > conn_.qp().attr().retry_cnt) return give_up(now);
  send_probe(now);
}

// A zero-length RDMA WRITE ONLY at the last PSN used: a duplicate for the responder
// (IBA 9.7.5.1.2), which ACKs it and executes nothing; even a responder that did
// execute it would write zero bytes (IBA 9.7.4.1.2: no R_Key check for length 0).
void Liveness::send_probe(Nanos now) {
  probe_psn_ = psn_add(conn_.requester().next_psn(), -1);
  probe_sent_ = true;
  probing_ = true;
  PacketView p = conn_.emit(conn_.opcode(op::kWriteOnly), 0, probe_psn_);
  p.set(bth::kAckReq, 1);
  p.set(reth::kVa, 0);
  p.set(reth::kRkey, 0);
  p.set(reth::kDmaLength, 0);
  bump(conn_.qp().ctx().counters.idle_probes_sent);
  deadline_ = now + conn_.completer().retry_interval(timeouts_);
}

// No WQE was in flight to complete with IBV_WC_RETRY_EXC_ERR: the one waiting at the
// head of the send queue takes it, every other WQE is flushed, and the application
// learns of it by IBV_EVENT_QP_FATAL (IBA 11.6.3.1: an error with no WQE to report it).
void Liveness::give_up(Nanos now) {
  probing_ = false;
  bump(conn_.qp().ctx().counters.idle_probes_failed);
  Ring<SendWqe>& sq = conn_.qp().sq();
  if (!sq.empty()) sq.front().status = IBV_WC_RETRY_EXC_ERR;
  conn_.fail(now, IBV_EVENT_QP_FATAL);
}

}  // namespace softrdma::engine::rc
