// Unreliable Datagram service (IBA 9.8.4, 10.2.5) behind one QP: no connection,
// each send WR names its destination (an AH, a QP number and a Q_Key) and is one
// packet of at most the port MTU with a DETH; a receive takes a WQE whose first 40
// bytes get the packet's GRH (for RoCEv2 over IPv4, the IPv4 header in its last
// 20 bytes, as Soft-RoCE and RoCE NICs deliver it). Nothing is acknowledged: a
// send completes once its packet is built, a packet with the wrong Q_Key or no
// receive WQE or too long for it is dropped and counted.
#pragma once

#include <cstdint>

#include "engine/protocol.h"
#include "engine/wqe.h"

namespace softrdma::engine {
class Qp;
}

namespace softrdma::engine::ud {

// IBA 10.2.5: a Q_Key with the high bit set in a send WR is "controlled": the QP's
// own Q_Key is sent instead.
inline constexpr uint32_t kControlledQkeyBit = 0x80000000u;
// The GRH at the start of every UD receive buffer (IBA 11.4.1.2).
inline constexpr uint32_t kGrhBytes = 40;

class Datagram final : public Protocol {
 public:
  explicit Datagram(Qp& qp);

  void on_packet(wire::PacketView packet, const transport::RxPacket& from,
                 Nanos now) override;
  void on_send_posted(Nanos now) override;
  void on_burst_end(Nanos) override {}
  bool on_tx_ready(Nanos now, uint32_t budget) override;
  Nanos deadline() const override { return kNever; }
  void on_timer(Nanos) override {}
  void on_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) override;

 private:
  // Sends up to `budget` queued WRs; true while more wait.
  bool send(uint32_t budget);
  bool send_one(SendWqe& wqe);
  bool receive(wire::PacketView packet, const transport::RxPacket& from);

  Qp& qp_;
  uint32_t next_psn_ = 0;
};

}  // namespace softrdma::engine::ud
