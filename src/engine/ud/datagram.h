// Unreliable Datagram service (IBA 9.8.4, 10.2.5) behind one QP: no connection,
// each send WR names its destination (an AH, a QP number and a Q_Key) and is one
// packet of at most the port MTU with a DETH; a receive takes a WQE whose first 40
// bytes get the packet's GRH (for RoCEv2 over IPv4, the IPv4 header in its last
// 20 bytes, as Soft-RoCE and RoCE NICs deliver it). Nothing is acknowledged: a
// send completes once its packet is built, a packet with the wrong Q_Key or no
// receive WQE or too long for it is dropped and counted. A destination served by
// a softrdma process of this host gets the message placed into its receive WQE by
// the sender (datagram_host.cc), with the same outcomes.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/roce/tx_batch.h"
#include "engine/roce/protocol.h"
#include "engine/wqe.h"
#include "transport/transport.h"
#include "wire/ip_udp.h"

namespace softrdma::samehost {
struct Peer;
}

namespace softrdma::engine {
class Qp;
}

namespace softrdma::engine::ud {

// IBA 10.2.5: a Q_Key with the high bit set in a send WR is "controlled": the QP's
// own Q_Key is sent instead.
inline constexpr uint32_t kControlledQkeyBit = 0x80000000u;
// The GRH at the start of every UD receive buffer (IBA 11.4.1.2).
inline constexpr uint32_t kGrhBytes = 40;

// IBA 11.4.1.2: the GRH of a message from `info.src` of `udp_payload_len` bytes
// on the wire. RoCEv2 has no GRH on the wire; what stands in for it is the IP
// header (Annex A17.4.5.1): an IPv6 header fills all 40 bytes, an IPv4 header the
// last 20, the first 20 zero (as Soft-RoCE and RoCE NICs write it, and as
// rdma-core's ibv_init_ah_from_wc reads it).
void write_grh(const wire::IpUdpInfo& info, size_t udp_payload_len, uint8_t (&grh)[kGrhBytes]);

class Datagram final : public roce::RoceProtocol {
 public:
  // `tx`, `via`: as RcConnection's (rc/connection.h).
  Datagram(Qp& qp, roce::TxBatch& tx, transport::Transport& via);

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
  bool receive(wire::PacketView packet, const transport::RxPacket& from, Nanos now);
  bool complete_own(RecvWqe& wqe, const ibv_wc& wc, bool solicited);

  // The same-host path (datagram_host.cc).
  enum class HostSend : uint8_t { kWire, kDone, kLocalError };
  HostSend send_on_host(SendWqe& wqe);
  HostSend place_on_host(SendWqe& wqe, samehost::Peer& peer);
  HostSend dropped_on_host();
  std::shared_ptr<samehost::Peer> host_peer(const transport::Gid& dgid, uint32_t remote_qpn);
  // Destinations looked up lately: a process of this host that serves the GID, or
  // none (the wire), each looked up again after a while (a process may start or
  // exit there).
  struct PeerEntry {
    transport::Gid gid{};
    uint32_t block = 0;  // the QPN block (on a shared address it names the process)
    std::shared_ptr<samehost::Peer> peer;
    Nanos looked_up = 0;
  };
  std::vector<PeerEntry> peers_;

  Qp& qp_;
  roce::TxBatch& tx_;
  transport::Transport& via_;
  uint32_t next_psn_ = 0;
};

}  // namespace softrdma::engine::ud
