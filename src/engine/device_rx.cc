// The device's ingress (DESIGN.md §7): reading the transports and handing each
// packet to the QP it names, after the checks every QP shares (IBA 9.6: a packet
// that parses, a QP that exists and is of the packet's transport, a P_Key that
// matches); multicast copies to every attached QP. Everything a packet does to a
// QP is its protocol's (Protocol::on_packet).
#include <array>

#include "engine/device.h"
#include "wire/packet.h"

namespace softrdma::engine {

namespace {

// IBA 10.9.3: two P_Keys match when their low 15 bits are equal and not 0 (the
// invalid P_Key) and at least one of them is a full member (top bit set).
bool pkey_matches(uint16_t a, uint16_t b) {
  if ((a & 0x7fff) == 0 || (a & 0x7fff) != (b & 0x7fff)) return false;
  return ((a | b) & 0x8000) != 0;
}

}  // namespace

// The loop reads every turn (it runs when a socket is readable, or spins briefly
// after work); so does a poller while the wire carries traffic, and before timers
// (issue 14 defect 3: the ACK that answers a deadline may be waiting).
bool Device::socket_check_due(Turner who, Nanos now, bool timers_due) const {
  if (who == Turner::kLoop || timers_due) return true;
  return !wire_quiet(now) || now - last_rx_check_ >= kQuietSocketCheck;
}

// Up to `bursts` receive bursts from `from`, until one comes back short; after
// each, the QPs that got packets send their coalesced ACKs.
bool Device::receive(transport::Transport& from, Nanos now, int bursts) {
  std::array<transport::RxPacket, 32> burst;
  bool got = false;
  for (int b = 0; b < bursts; ++b) {
    const size_t n = from.rx_burst(burst);
    for (size_t i = 0; i < n; ++i) dispatch(burst[i], now);
    for (Qp* qp : touched_) {
      qp->touched_ = false;
      qp->protocol().on_burst_end(now);
    }
    touched_.clear();
    got |= n > 0;
    if (n < burst.size()) break;
  }
  return got;
}

void Device::dispatch(const transport::RxPacket& rx, Nanos now) {
  wire::PacketView packet;
  if (wire::parse_packet(rx.bytes, packet) != wire::ParseError::kNone) {
    bump(counters_.rx_malformed);
    return;
  }
  if (packet.dest_qp() == wire::kMulticastQpn) {
    dispatch_multicast(packet, rx, now);
    return;
  }
  auto it = qps_.find(packet.dest_qp());
  if (it == qps_.end()) {
    bump(counters_.rx_unknown_qp);
    return;
  }
  Qp& qp = *it->second;
  // IBA 9.6.1.1: the opcode's transport must be the QP's, and the P_Key must match.
  if (!packet.info().is(transport_flag_of(qp.type()))) {
    bump(counters_.rx_wrong_transport);
    return;
  }
  if (!pkey_matches(uint16_t(packet.get(wire::bth::kPkey)), pkey())) {
    bump(counters_.rx_bad_pkey);
    return;
  }
  bump(counters_.rx_packets);
  bump(qp.counters().rx_packets);
  qp.protocol().on_packet(packet, rx, now);
  mark_touched(qp);
}

void Device::mark_touched(Qp& qp) {
  if (!qp.touched_) {
    qp.touched_ = true;
    touched_.push_back(&qp);
  }
}

// IBA 10.5.2 / A17.4.5.1: DestQP 0xFFFFFF and a multicast destination address: a
// copy for every QP attached to the group (rx.dst, the IP destination), each
// checked as a UD QP checks a packet (state, Q_Key) and taking its own receive WQE.
// 0xFFFFFF to a unicast address names no QP.
void Device::dispatch_multicast(const wire::PacketView& packet, const transport::RxPacket& rx,
                                Nanos now) {
  auto it = wire::gid_is_multicast(rx.dst) ? mcast_groups_.find(rx.dst) : mcast_groups_.end();
  if (it == mcast_groups_.end()) {
    bump(wire::gid_is_multicast(rx.dst) ? counters_.rx_mcast_no_group : counters_.rx_unknown_qp);
    return;
  }
  if (!packet.info().is(transport_flag_of(IBV_QPT_UD))) {
    bump(counters_.rx_wrong_transport);
    return;
  }
  if (!pkey_matches(uint16_t(packet.get(wire::bth::kPkey)), pkey())) {
    bump(counters_.rx_bad_pkey);
    return;
  }
  // Its own copy, for a QP that asked not to get one: sent by that QP number
  // from one of this device's GIDs. Looked at only for such a QP.
  auto own_copy = [&](const Qp& qp) {
    return uint32_t(packet.get(wire::deth::kSrcQp)) == qp.qpn() &&
           std::ranges::find(gids(), rx.src) != gids().end();
  };
  for (Qp* qp : it->second) {  // a QP's receive never attaches or detaches
    if (qp->blocks_self_multicast_loopback() && own_copy(*qp)) {
      bump(counters_.rx_mcast_self_blocked);
      continue;
    }
    bump(counters_.rx_packets);
    bump(qp->counters().rx_packets);
    qp->protocol().on_packet(packet, rx, now);
    mark_touched(*qp);
  }
}

}  // namespace softrdma::engine
