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

class RoceProtocol;

class RoceFamily final : public ProtocolFamily {
 public:
  // Every IBA transport and operation (IBA Table 39 decides per QP type).
  static constexpr FamilyTraits kTraits{
      .wire_name = "RoCEv2 over UDP",
      .gid_type = "RoCE v2",
      .qp_types = bit(IBV_QPT_RC) | bit(IBV_QPT_UC) | bit(IBV_QPT_UD) | bit(IBV_QPT_XRC_SEND) |
                  bit(IBV_QPT_XRC_RECV),
      .send_opcodes = ~uint64_t(0),
      .atomics = true,
      .rnr_nak = true,
      .xrc = true,
      .tag_matching = true,
      .selective_repeat = true,
  };

  // `primary`: the transport the device's GIDs come from and multicast uses.
  RoceFamily(Device& device, transport::Transport& primary);
  // The family of a device whose port speaks RoCEv2 over its datagram transport.
  static FamilyMaker maker();

  const FamilyTraits& traits() const override { return kTraits; }
  std::unique_ptr<Protocol> make_protocol(Qp& qp) override;
  bool receive(Nanos now, int bursts) override;
  void flush() override { tx_.flush(); }
  void forget(const Qp& qp) override;
  std::vector<int> rx_fds() const override;

  // The transport every packet of the family leaves and arrives by.
  transport::Transport& primary() { return primary_; }
  // The engine owner's send batch.
  TxBatch& tx() { return tx_; }

 private:
  void dispatch(const transport::RxPacket& rx, Nanos now);
  void dispatch_multicast(const wire::PacketView& packet, const transport::RxPacket& rx,
                          Nanos now);
  void deliver(Qp& qp, const wire::PacketView& packet, const transport::RxPacket& rx, Nanos now);

  Device& device_;
  transport::Transport& primary_;
  TxBatch tx_;
  std::vector<RoceProtocol*> touched_;  // QPs that got packets this burst (ACKs to coalesce)
};

}  // namespace softrdma::engine::roce
