// What an iWARP connection manager hands the engine once the MPA start frames
// were exchanged (RFC 5044 §7.1, RFC 6581 §5): the TCP connection and what the
// two peers settled. softrdma's librdmacm passes it to its libibverbs through the
// private call
//   extern "C" int softrdma_iwarp_attach(ibv_qp* qp, const IwarpHandoff* handoff);
// (SOFTRDMA_PRIVATE_1): 0, or an errno (EINVAL: not an RC QP of an iWARP device
// in INIT, or a bad descriptor). On success the QP is in RTS and its FPDUs travel
// on `fd`; the engine owns `fd` from the call on, and closes it also on failure.
#pragma once

#include <cstdint>

namespace softrdma::wire::iwarp {

// RFC 6581 §5: the "ready to receive" message the initiator sends as its first
// FPDU when the peers agreed on peer-to-peer mode; the responder sends nothing
// before it arrived.
enum class RtrKind : uint8_t {
  kNone = 0,   // revision 1, or no peer-to-peer: either side may send at once
  kSend = 1,   // a zero-length SEND
  kWrite = 2,  // a zero-length RDMA WRITE
  kRead = 3,   // a zero-length RDMA READ request (answered by a zero-length response)
};

struct IwarpHandoff {
  int fd = -1;             // a connected TCP socket, the start frames read to their end
  bool crc = false;        // both sides compute and check the FPDU CRC (RFC 5044 §7.1: C)
  bool initiator = false;  // the side that sent the MPA request
  RtrKind rtr = RtrKind::kNone;
  uint16_t ird = 0;        // incoming READs this side serves at once
  uint16_t ord = 0;        // outgoing READs this side issues at once
};

}  // namespace softrdma::wire::iwarp
