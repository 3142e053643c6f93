// RoCEv2's ingress (DESIGN.md §7): reading the transports and handing each packet
// to the QP it names, after the checks every QP shares (IBA 9.6: a packet that
// parses, a QP that exists and is of the packet's transport, a P_Key that
// matches); multicast copies to every attached QP. Everything a packet does to a
// QP is its protocol's (RoceProtocol::on_packet).
#include <algorithm>
#include <array>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "engine/roce/protocol.h"
#include "wire/packet.h"

namespace softrdma::engine::roce {

namespace {

// IBA 10.9.3: two P_Keys match when their low 15 bits are equal and not 0 (the
// invalid P_Key) and at least one of them is a full member (top bit set).
bool pkey_matches(uint16_t a, uint16_t b) {
  if ((a & 0x7fff) == 0 || (a & 0x7fff) != (b & 0x7fff)) return false;
  return ((a | b) & 0x8000) != 0;
}

}  // namespace

// Up to `bursts` receive bursts, until one comes back short; after each, the QPs
// that got packets send their coalesced ACKs.
bool RoceFamily::receive(Nanos now, int bursts) {
  transport::Transport& from = primary_;
  std::array<transport::RxPacket, 32> burst;
  bool got = false;
  for (int b = 0; b < bursts; ++b) {
    const size_t n = from.rx_burst(burst);
    for (size_t i = 0; i < n; ++i) dispatch(burst[i], now);
    for (RoceProtocol* protocol : touched_) {
      protocol->in_burst = false;
      protocol->on_burst_end(now);
    }
    touched_.clear();
    got |= n > 0;
    if (n < burst.size()) break;
  }
  return got;
}

void RoceFamily::dispatch(const transport::RxPacket& rx, Nanos now) {
  wire::PacketView packet;
  EngineCounters& counters = device_.counters();
  if (wire::parse_packet(rx.bytes, packet) != wire::ParseError::kNone) {
    bump(counters.rx_malformed);
    return;
  }
  if (packet.dest_qp() == wire::kMulticastQpn) {
    dispatch_multicast(packet, rx, now);
    return;
  }
  Qp* found = device_.find_qp(packet.dest_qp());
  if (found == nullptr) {
    bump(counters.rx_unknown_qp);
    return;
  }
  Qp& qp = *found;
  // IBA 9.6.1.1: the opcode's transport must be the QP's, and the P_Key must match.
  // A CNP (A17.9.3) belongs to no transport: a connected QP's rate answers it.
  const bool cnp = packet.info().is(wire::kOpCnp);
  if (cnp ? qp.type() == IBV_QPT_UD : !packet.info().is(transport_flag_of(qp.type()))) {
    bump(counters.rx_wrong_transport);
    return;
  }
  if (!pkey_matches(uint16_t(packet.get(wire::bth::kPkey)), device_.pkey())) {
    bump(counters.rx_bad_pkey);
    return;
  }
  deliver(qp, packet, rx, now);
}

void RoceFamily::deliver(Qp& qp, const wire::PacketView& packet, const transport::RxPacket& rx,
                         Nanos now) {
  bump(device_.counters().rx_packets);
  bump(qp.counters().rx_packets);
  auto& protocol = static_cast<RoceProtocol&>(qp.protocol());
  protocol.on_packet(packet, rx, now);
  if (!protocol.in_burst) {
    protocol.in_burst = true;
    touched_.push_back(&protocol);
  }
}

// IBA 10.5.2 / A17.4.5.1: DestQP 0xFFFFFF and a multicast destination address: a
// copy for every QP attached to the group (rx.dst, the IP destination), each
// checked as a UD QP checks a packet (state, Q_Key) and taking its own receive WQE.
// 0xFFFFFF to a unicast address names no QP.
void RoceFamily::dispatch_multicast(const wire::PacketView& packet,
                                    const transport::RxPacket& rx, Nanos now) {
  EngineCounters& counters = device_.counters();
  const std::vector<Qp*>* members =
      wire::gid_is_multicast(rx.dst) ? device_.multicast_members(rx.dst) : nullptr;
  if (members == nullptr) {
    bump(wire::gid_is_multicast(rx.dst) ? counters.rx_mcast_no_group : counters.rx_unknown_qp);
    return;
  }
  if (!packet.info().is(transport_flag_of(IBV_QPT_UD))) {
    bump(counters.rx_wrong_transport);
    return;
  }
  if (!pkey_matches(uint16_t(packet.get(wire::bth::kPkey)), device_.pkey())) {
    bump(counters.rx_bad_pkey);
    return;
  }
  // Its own copy, for a QP that asked not to get one: sent by that QP number
  // from one of this device's GIDs. Looked at only for such a QP.
  auto own_copy = [&](const Qp& qp) {
    return uint32_t(packet.get(wire::deth::kSrcQp)) == qp.qpn() &&
           std::ranges::find(device_.gids(), rx.src) != device_.gids().end();
  };
  for (Qp* qp : *members) {  // a QP's receive never attaches or detaches
    if (qp->blocks_self_multicast_loopback() && own_copy(*qp)) {
      bump(counters.rx_mcast_self_blocked);
      continue;
    }
    deliver(*qp, packet, rx, now);
  }
}

}  // namespace softrdma::engine::roce
