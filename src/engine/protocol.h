// The wire protocol behind a QP (DESIGN.md §2): the verbs object (Qp) keeps the work
// queues and the state; a Protocol turns them into packets and back. RoCEv2 RC is
// the first; UC, UD and an iWARP protocol slot in beside it.
#pragma once

#include <infiniband/verbs.h>

#include "engine/clock.h"
#include "transport/transport.h"
#include "wire/packet.h"

namespace softrdma::engine {

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

class Protocol {
 public:
  virtual ~Protocol() = default;
  // A packet for this QP arrived (parsed; ICRC already checked by the transport).
  virtual void on_packet(wire::PacketView packet, const transport::RxPacket& from,
                         Nanos now) = 0;
  // New work was posted to the send queue, or the window may have opened.
  virtual void on_send_posted(Nanos now) = 0;
  // Called once per received burst for QPs that got packets: send coalesced ACKs.
  virtual void on_burst_end(Nanos now) = 0;
  // The engine has room to send: produce up to `budget` queued packets (after
  // Device::want_tx). True while more remain.
  virtual bool on_tx_ready(Nanos now, uint32_t budget) = 0;
  // Timers: the earliest deadline, and what to do when it has passed.
  virtual Nanos deadline() const = 0;
  virtual void on_timer(Nanos now) = 0;
  // The QP moved to a new state (after modify_qp succeeded).
  virtual void on_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) = 0;
  // Its peer is reached by the same-host path (docs/decisions/same-host.md).
  virtual bool on_same_host() const { return false; }
};

}  // namespace softrdma::engine
