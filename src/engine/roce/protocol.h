// A RoCEv2 protocol (IBA transport services over UDP, Annex A17): what the RoCEv2
// family (family.h) asks of the protocol of each of its QPs beyond Protocol —
// the packets that arrive for it, one at a time, and the end of each burst.
#pragma once

#include "engine/protocol.h"
#include "transport/transport.h"
#include "wire/packet.h"

namespace softrdma::engine::roce {

// IBA 9.2.1: the transport bits of the opcodes of a QP type, and the flag the
// opcode table gives them. A received packet is a QP's only if they match.
constexpr uint8_t opcode_base_of(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_UC: return wire::op::kUc;
    case IBV_QPT_UD: return wire::op::kUd;
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV: return wire::op::kXrc;
    default: return wire::op::kRc;
  }
}
constexpr uint32_t transport_flag_of(ibv_qp_type type) {
  switch (opcode_base_of(type)) {
    case wire::op::kUc: return wire::kOpUc;
    case wire::op::kUd: return wire::kOpUd;
    case wire::op::kXrc: return wire::kOpXrc;
    default: return wire::kOpRc;
  }
}

class RoceProtocol : public Protocol {
 public:
  // A packet for this QP arrived (parsed; ICRC already checked by the transport).
  virtual void on_packet(wire::PacketView packet, const transport::RxPacket& from,
                         Nanos now) = 0;
  // Once per received burst for QPs that got packets: send coalesced ACKs.
  virtual void on_burst_end(Nanos now) = 0;

  // In the family's list of QPs that got packets this burst (owner: RoceFamily).
  bool in_burst = false;
};

}  // namespace softrdma::engine::roce
