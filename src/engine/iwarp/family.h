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

namespace softrdma::engine {
class Device;
}

namespace softrdma::engine::iwarp {

class Connection;

class IwarpFamily final : public ProtocolFamily {
 public:
  IwarpFamily(Device& device, transport::StreamTransport& streams);

  WireProtocol wire_protocol() const override { return WireProtocol::kIwarp; }
  // RFC 5040 §1: RDMAP offers reliable connected service only (siw: "only RC QP's
  // supported"); UD, UC and XRC are refused with EOPNOTSUPP.
  bool carries(ibv_qp_type type) const override { return type == IBV_QPT_RC; }
  std::unique_ptr<Protocol> make_protocol(Qp& qp) override;
  bool receive(Nanos now, int bursts) override;
  void flush() override {}
  void forget(const Qp& qp) override;
  std::vector<int> rx_fds() const override { return {streams_.rx_fd()}; }

  // Engine held: `qp` (RC, in INIT) speaks on the connection `handoff.fd` from now
  // on; 0 or an errno (the descriptor is closed either way).
  int attach(Qp& qp, const wire::iwarp::IwarpHandoff& handoff, Nanos now);
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
