#include "engine/rc/connection.h"

#include <algorithm>
#include <array>

#include "engine/device.h"
#include "engine/qp.h"
#include "samehost/host.h"
#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {

namespace {
DcqcnParams dcqcn_params(const DeviceConfig& config) {
  DcqcnParams p;
  p.line_rate = config.line_rate_bytes_per_ns;
  return p;
}

SwiftParams swift_params(const DeviceConfig& config) {
  SwiftParams p;
  p.max_window = config.max_unacked_packets;
  p.initial_window = config.initial_window;
  p.target_queueing = config.target_queueing_ns;
  // Twice the target (Swift's fs_range is a multiple of its base target): with
  // the target alone, six flows into one port settled at Jain 0.88 (congestion-
  // control.md, "Tuning the delay").
  p.flow_scaling_range = 2 * config.target_queueing_ns;
  return p;
}
}  // namespace

RcConnection::RcConnection(Qp& qp, roce::TxBatch& tx, transport::Transport& via)
    : qp_(qp),
      tx_(tx),
      via_(via),
      opcode_base_(roce::opcode_base_of(qp.type())),
      acknowledged_(qp.type() != IBV_QPT_UC),
      recovery_(make_loss_recovery(qp.ctx().config.max_unacked_packets, false, wire::kSackSpan)),
      requester_(*this),
      completer_(*this),
      responder_(*this),
      liveness_(*this),
      rate_(dcqcn_params(qp.ctx().config), swift_params(qp.ctx().config),
            {.dcqcn = qp.ctx().config.dcqcn, .delay = qp.ctx().config.delay_control}) {}

wire::PacketView RcConnection::emit(uint8_t opcode, size_t payload_len, uint32_t psn) {
  bump(qp_.counters().tx_packets);
  return rc::emit(tx_, path_, opcode, payload_len, psn);
}

void RcConnection::on_packet(wire::PacketView packet, const transport::RxPacket& from,
                             Nanos now) {
  // IBA 9.6.1.1 / A17.4: only the connected peer's packets are this QP's.
  if (from.src != path_.dst) {
    bump(qp_.ctx().counters.rx_wrong_source);
    return;
  }
  if (from.congestion_experienced) on_congestion_experienced(now);
  if (packet.info().is(wire::kOpCnp)) {
    on_cnp(now);
    return;
  }
  // When it reached this host (the transport's clock is the engine's): it may
  // have waited in the kernel before `now`.
  const Nanos arrival = from.arrival_ns != 0 ? from.arrival_ns : now;
  if (packet.info().is(wire::kOpResponse)) {
    completer_.on_response(packet, now, arrival);
  } else {
    responder_.on_request(packet, now, arrival);
  }
  liveness_.heard(now);  // after the completer: it asks whether a probe was answered
}

void RcConnection::on_send_posted(Nanos now) { requester_.run(now); }

void RcConnection::on_burst_end(Nanos now) {
  responder_.on_burst_end();
  (void)now;
}

bool RcConnection::on_tx_ready(Nanos now, uint32_t budget) {
  if (!acknowledged_) return requester_.run(now);  // UC: the next paced burst
  return responder_.produce(budget, now);
}

Nanos RcConnection::deadline() const {
  Nanos d = completer_.deadline();
  const Nanos pause = requester_.paused_until();
  if (pause != 0 && pause < d) d = pause;
  return std::min({d, liveness_.deadline(), rate_.resume_at()});
}

void RcConnection::on_timer(Nanos now) {
  const Nanos pause = requester_.paused_until();
  if (pause != 0 && now >= pause) {
    requester_.pause_until(0);
    requester_.run(now);
  }
  if (now >= rate_.resume_at()) {
    // The pacer holds a packet's worth again: both senders go on.
    requester_.run(now);
    qp_.want_tx();
  }
  completer_.on_timer(now);
  liveness_.on_timer(now);
}

void RcConnection::load_path() {
  const ibv_qp_attr& attr = qp_.attr();
  const auto& gids = qp_.device().gids();
  // Every GID of the table is an address the transport serves (device.cc).
  path_.src = gids[attr.ah_attr.grh.sgid_index < gids.size() ? attr.ah_attr.grh.sgid_index : 0];
  std::copy(std::begin(attr.ah_attr.grh.dgid.raw), std::end(attr.ah_attr.grh.dgid.raw),
            path_.dst.begin());
  path_.dest_qpn = attr.dest_qp_num & wire::kPsnMask;
  path_.via = &via_;
  path_.src_port = transport::roce_source_port(qp_.qpn());
  path_.pkey = qp_.device().pkey();
  path_.mtu = qp_.path_mtu_bytes();
  // The QPs that send requests (an XRC receive QP sends none).
  samehost::Host* host = qp_.ctx().host;
  const bool connected = qp_.type() == IBV_QPT_RC || qp_.type() == IBV_QPT_UC ||
                         qp_.type() == IBV_QPT_XRC_SEND;
  path_.peer = host != nullptr && connected ? host->peer(path_.dst, path_.dest_qpn) : nullptr;
}

void RcConnection::on_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) {
  if (to == IBV_QPS_ERR || to == IBV_QPS_RESET) {
    // Timers armed before must not act on the QP once it is reconnected.
    completer_.stop_timers();
    requester_.pause_until(0);
    liveness_.stop();
  }
  if (to == IBV_QPS_RTR && from != IBV_QPS_RTR) {
    load_path();
    selective_ = agreed_selective_repeat();
    sack_span_ = selective_ && agreed_wide_sack() ? wire::kWideSackSpan : wire::kSackSpan;
    ack_hold_ = selective_ && agreed_ack_hold();
    const DeviceConfig& config = qp_.ctx().config;
    const uint32_t window = selective_ ? config.selective_window : config.max_unacked_packets;
    recovery_ = make_loss_recovery(window, selective_, sack_span_);
    rate_.set_max_window(recovery_->window());  // as the loss recovery capped it
    responder_.reset(qp_.attr().rq_psn, qp_.attr().max_dest_rd_atomic, selective_);
  }
  if (to == IBV_QPS_RTR && from != IBV_QPS_RTR) rate_.reset(now);
  if (to == IBV_QPS_RTS && from == IBV_QPS_RTR) {
    requester_.reset(qp_.attr().sq_psn);
    completer_.reset(qp_.attr().sq_psn, now);
    liveness_.start(now);
  }
  // IBA 10.3.1: SQD is where the primary path may be changed (SQD->SQD with IBV_QP_AV).
  if (to == IBV_QPS_SQD && from == IBV_QPS_SQD) {
    load_path();
    responder_.resize_atomic_results(qp_.attr().max_dest_rd_atomic);
  }
  if (to == IBV_QPS_RTS && from == IBV_QPS_SQD) requester_.run(now);
}

// RC only: UC acknowledges nothing, and XRC's SACK would need an opcode of its
// own (its responses go to the XRC send QP).
bool RcConnection::agreed_selective_repeat() const {
  if (qp_.type() != IBV_QPT_RC) return false;
  switch (qp_.ctx().config.selective_repeat) {
    case SelectiveRepeatMode::kAlways: return true;
    case SelectiveRepeatMode::kOff: return false;
    case SelectiveRepeatMode::kNegotiated: break;
  }
  return qp_.ece_agreed(kEceSelectiveRepeat);
}

// SOFTRDMA_SELECTIVE_REPEAT=always has both ends softrdma, which speaks the wide
// SACK since it exists (docs/decisions/selective-repeat.md "The SACK's span").
bool RcConnection::agreed_wide_sack() const {
  if (qp_.ctx().config.selective_repeat == SelectiveRepeatMode::kAlways) return true;
  return qp_.ece_agreed(kEceWideSack);
}

// As the wide SACK: SOFTRDMA_SELECTIVE_REPEAT=always has both ends softrdma.
bool RcConnection::agreed_ack_hold() const {
  if (qp_.ctx().config.selective_repeat == SelectiveRepeatMode::kAlways) return true;
  return qp_.ece_agreed(kEceAckHold);
}

void RcConnection::arm_pacer_timer() {
  publish_rate();  // the timers raised it meanwhile, maybe back to the line
  if (rate_.held()) qp_.arm_timer(rate_.resume_at());
}

// RoCEv2 Annex A17.9.2: a CNP names this QP as the sender of packets that met a
// congested queue; DCQCN's reaction point cuts the rate.
void RcConnection::on_cnp(Nanos now) {
  bump(qp_.ctx().counters.cnps_received);
  bump(qp_.counters().cnps_received);
  if (!rate_.controls().dcqcn) return;
  rate_.on_cnp(now, requester().high_psn());
  publish_rate();
}

// The QP's row in `softrdma status`: DCQCN's rate (0 at the line) and the
// delay control's window (0 before its first sample).
void RcConnection::publish_rate() {
  const uint64_t mbps = rate_.dcqcn().limited() ? uint64_t(rate_.dcqcn().rate() * 8'000) : 0;
  qp_.counters().rate_mbps.store(mbps, std::memory_order_relaxed);
  const Swift& swift = rate_.swift();
  const bool measured = rate_.controls().delay && swift.measured();
  const uint64_t window = measured ? std::max<uint64_t>(1, uint64_t(swift.window() * 100)) : 0;
  QpCounters& c = qp_.counters();
  c.window_hundredths.store(window, std::memory_order_relaxed);
  const auto us = [measured](Nanos ns) { return measured ? std::max<uint64_t>(1, ns / 1000) : 0; };
  c.base_rtt_us.store(us(swift.base_rtt()), std::memory_order_relaxed);
  c.rtt_us.store(us(swift.rtt()), std::memory_order_relaxed);
  c.target_us.store(us(swift.target()), std::memory_order_relaxed);
}

// A17.9.1: the notification point answers CE marks with a CNP to the sending QP
// (this connection's peer), at most one per DCQCN interval.
void RcConnection::on_congestion_experienced(Nanos now) {
  bump(qp_.ctx().counters.ce_marked_received);
  if (!rate_.controls().dcqcn || !rate_.cnp_due(now)) return;
  wire::PacketView cnp = emit(wire::op::kCnp, wire::op::kCnpReservedBytes, 0);
  cnp.set(wire::bth::kBecn, 1);
  bump(qp_.ctx().counters.cnps_sent);
}

void RcConnection::fail(Nanos now, std::optional<ibv_event_type> event) {
  if (event) qp_.post_event(*event);
  qp_.enter_error(now);
}

}  // namespace softrdma::engine::rc
