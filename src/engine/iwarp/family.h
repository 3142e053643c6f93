// The iWARP family (RFC 5040 RDMAP / 5041 DDP / 5044 MPA; docs/decisions/iwarp.md):
// RC QPs only, each bound to one TCP connection of a stream transport
// (transport/stream.h) once a connection manager has exchanged the MPA start
// frames on it (wire/iwarp/handoff.h). The family polls the transport, hands each
// connection's bytes to its QP's protocol (iwarp/connection.h), and tells it when
// the connection may take more bytes or has ended.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "engine/family.h"
#include "transport/stream.h"
#include "wire/iwarp/handoff.h"
#include "wire/iwarp/mpa.h"

namespace softrdma::engine {
class Device;
}

namespace softrdma::engine::iwarp {

class Connection;

class IwarpFamily final : public ProtocolFamily {
 public:
  // docs/decisions/iwarp.md.
  static constexpr FamilyTraits kTraits{
      .wire_name = "iWARP over TCP, address",
      .gid_type = "iWARP",
      // RFC 5040 §1: RDMAP offers reliable connected service only (siw: "only RC
      // QP's supported"); UD, UC and XRC are refused with EOPNOTSUPP.
      .qp_types = bit(IBV_QPT_RC),
      // RFC 5040 §4: SEND (with Invalidate), WRITE and READ; no immediate data, and
      // RFC 7306's atomics are not offered (the device reports none).
      .send_opcodes = bit(IBV_WR_SEND) | bit(IBV_WR_SEND_WITH_INV) | bit(IBV_WR_RDMA_WRITE) |
                      bit(IBV_WR_RDMA_READ),
      .atomics = false,
      .rnr_nak = false,  // RDMAP has no RNR NAK: a SEND without a receive ends the stream
      .xrc = false,
      .tag_matching = false,  // it rides on RoCE's RC protocol
      .max_rd_atomic = wire::iwarp::kMpaMaxIrdOrd,  // RFC 6581's 14-bit IRD/ORD
      .connection_managed_qps = true,
      .poller_reads_wire = true,
  };

  IwarpFamily(Device& device, transport::StreamTransport& streams);

  const FamilyTraits& traits() const override { return kTraits; }
  std::unique_ptr<Protocol> make_protocol(Qp& qp) override;
  bool receive(Nanos now, int bursts) override;
  void flush() override {}
  void forget(const Qp& qp) override;
  std::vector<int> rx_fds() const override { return {streams_.rx_fd()}; }

  // `qp` (RC, in INIT) speaks on the connection `handoff.fd` from now on.
  int adopt_connection(Qp& qp, const wire::iwarp::IwarpHandoff& handoff, Nanos now) override;
  // The family of a device whose port speaks iWARP over `streams` (the datagram
  // transport stays for the address and the GID table).
  static FamilyMaker maker(transport::StreamTransport& streams) {
    return [&streams](Device& device) { return std::make_unique<IwarpFamily>(device, streams); };
  }
  transport::StreamTransport& streams() { return streams_; }
  // A connection stops being served (its QP entered Error or is destroyed); how
  // its stream closes (stream.h).
  void detach(transport::StreamId stream, transport::StreamTransport::CloseMode mode);

 private:
  Device& device_;
  transport::StreamTransport& streams_;
  bool read_directly(Nanos now);

  std::map<transport::StreamId, Connection*> connections_;
  Nanos last_event_check_ = 0;
};

}  // namespace softrdma::engine::iwarp
