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
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/clock.h"
#include "engine/protocol.h"
#include "wire/iwarp/handoff.h"

namespace softrdma::engine {

class Device;
class Qp;

// What a family's wire carries and how its QPs come up, as data: the device, the
// QP, the verbs layer and the tools read these answers and never ask which family
// a device has (docs/decisions/engine-layout.md).
struct FamilyTraits {
  // For people: `softrdma status`, messages.
  std::string_view wire_name;  // "RoCEv2 over UDP"
  std::string_view gid_type;   // what each GID is: "RoCE v2"
  // Bit (1 << type) for each ibv_qp_type its wire carries; the device refuses the
  // others (ibv_create_qp(3): EOPNOTSUPP, as the kernel's drivers do).
  uint64_t qp_types = 0;
  // Bit (1 << opcode) for each ibv_wr_opcode its requests carry (the transport
  // type's own rules, IBA Table 39, apply on top); a post of another is EINVAL.
  uint64_t send_opcodes = 0;
  bool atomics = false;        // IBA 9.4.5 atomics (ibv_device_attr::atomic_cap)
  bool rnr_nak = false;        // the responder answers a missing receive with RNR NAK
  bool xrc = false;            // XRC domains, SRQs and QPs (IBA Annex A14)
  bool tag_matching = false;   // TM SRQs (docs/decisions/tag-matching.md)
  uint32_t max_rd_atomic = UINT32_MAX;  // a cap on IRD/ORD beyond the device limits
  // Its QPs are born in INIT, on port 1, with remote READ and WRITE rights, and
  // only the connection manager moves them to RTS (an RNIC's; siw's, iw_cm's).
  bool connection_managed_qps = false;
  // Its poller reads the wire itself while the progress loop stands aside, so an
  // idle poll need not give the core away at once (verbs/cq.cc after_idle_poll).
  bool poller_reads_wire = false;
  // Its RC QPs can run selective repeat when both ends agree through ECE
  // (ibv_query_ece(3), docs/decisions/selective-repeat.md).
  bool selective_repeat = false;

  bool carries(ibv_qp_type type) const { return unsigned(type) < 64 && (qp_types >> type) & 1; }
  bool carries_opcode(int opcode) const {
    return opcode >= 0 && opcode < 64 && (send_opcodes >> opcode) & 1;
  }
};

constexpr uint64_t bit(int n) { return uint64_t(1) << n; }

class ProtocolFamily {
 public:
  virtual ~ProtocolFamily() = default;
  // What it carries (above). The same object for the family's whole life.
  virtual const FamilyTraits& traits() const = 0;
  bool carries(ibv_qp_type type) const { return traits().carries(type); }
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
  // Engine held: `qp` (in INIT) speaks on the connection a connection manager made
  // and hands over (wire/iwarp/handoff.h); 0 or an errno, the descriptor closed
  // on failure. Only a family whose QPs are connection-managed takes one.
  virtual int adopt_connection(Qp& qp, const wire::iwarp::IwarpHandoff& handoff, Nanos now);
};

// How the runtime (or a test) gives a device its family: made once, in the
// device's constructor, for that device.
using FamilyMaker = std::function<std::unique_ptr<ProtocolFamily>(Device&)>;

}  // namespace softrdma::engine
