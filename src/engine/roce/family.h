// The RoCEv2 family (IBA Annex A17; docs/decisions/protocol-families.md): QPs of
// every IBA type, whose packets (BTH .. ICRC) travel as UDP payloads through
// datagram transports (transport/transport.h). It owns RoCE's ingress — reading
// the transports, the checks every QP shares and the demultiplexing by DestQP
// (ingress.cc) — and its egress: the batch packets are built in (tx_batch.h) and
// the transport that reaches each peer.
#pragma once

#include <memory>
#include <vector>

#include "engine/family.h"
#include "engine/roce/tx_batch.h"
#include "transport/transport.h"
#include "wire/packet.h"

namespace softrdma::engine {
class Device;
}

namespace softrdma::engine::roce {

class RoceFamily final : public ProtocolFamily {
 public:
  // `primary`: the transport the device's GIDs come from and multicast uses.
  RoceFamily(Device& device, transport::Transport& primary);

  WireProtocol wire_protocol() const override { return WireProtocol::kRoceV2; }
  bool carries(ibv_qp_type) const override { return true; }
  std::unique_ptr<Protocol> make_protocol(Qp& qp) override;
  bool receive(Nanos now, int bursts) override;
  void flush() override { tx_.flush(); }
  void forget(const Qp& qp) override;
  std::vector<int> rx_fds() const override;

  transport::Transport& primary() { return primary_; }
  // The transport a peer is reached through: the first added transport that
  // reaches it, else the primary (multicast: always the primary).
  transport::Transport& route(const transport::Gid& dst);
  // Another transport for some peers (a same-host shared-memory one); received
  // from each turn like the primary. Engine held, before QPs are connected.
  void add_transport(transport::Transport& extra);
  // The engine owner's send batch.
  TxBatch& tx() { return tx_; }

 private:
  bool receive_from(transport::Transport& from, Nanos now, int bursts);
  void dispatch(const transport::RxPacket& rx, Nanos now);
  void dispatch_multicast(const wire::PacketView& packet, const transport::RxPacket& rx,
                          Nanos now);
  void deliver(Qp& qp, const wire::PacketView& packet, const transport::RxPacket& rx, Nanos now);

  Device& device_;
  transport::Transport& primary_;
  std::vector<transport::Transport*> receivers_;  // the primary, then the extra ones
  std::vector<transport::Transport*> extra_;
  TxBatch tx_;
  std::vector<Qp*> touched_;  // QPs that got packets this burst (ACKs to coalesce)
};

}  // namespace softrdma::engine::roce
