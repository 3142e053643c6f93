// A device's wire protocol family (docs/decisions/protocol-families.md): what its
// port speaks. RoCEv2 (roce/family.h) is one: BTH-framed packets in UDP
// datagrams. iWARP is another: RDMAP over DDP over MPA in TCP streams. A family
// owns everything between the transports and the QPs: reading its transports,
// finding the QP each arrival is for, building what leaves, and the protocol each
// QP runs. The verbs objects (PD, MR, CQ, SRQ, the QP's queues and state) are the
// same for every family.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/clock.h"
#include "engine/protocol.h"

namespace softrdma::engine {

class Qp;

enum class WireProtocol : uint8_t { kRoceV2, kIwarp };

class ProtocolFamily {
 public:
  virtual ~ProtocolFamily() = default;
  virtual WireProtocol wire_protocol() const = 0;
  // Whether its wire carries QPs of `type` (iWARP: RC only); the device refuses
  // the others (ibv_create_qp(3): EOPNOTSUPP, as the kernel's drivers do).
  virtual bool carries(ibv_qp_type type) const = 0;
  // The protocol a new QP runs (one the family carries).
  virtual std::unique_ptr<Protocol> make_protocol(Qp& qp) = 0;
  // Engine owner, in a turn that reads the wire: up to `bursts` bursts from each
  // of the family's transports, each arrival handed to the QP it is for. True when
  // anything arrived.
  virtual bool receive(Nanos now, int bursts) = 0;
  // Engine owner: what the turn built leaves now.
  virtual void flush() = 0;
  // Engine owner: `qp` is being destroyed; the family keeps no pointer to it.
  virtual void forget(const Qp& qp) = 0;
  // Descriptors that become readable when receive() has work (the progress loop
  // sleeps on them).
  virtual std::vector<int> rx_fds() const = 0;
};

}  // namespace softrdma::engine
