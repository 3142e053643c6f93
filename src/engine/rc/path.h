// Where a connected QP's packets go and how they are stamped (IBA 9.2 BTH fields
// that are fixed per connection), taken from the attributes at RTR.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/counters.h"
#include "engine/roce/tx_batch.h"
#include "transport/transport.h"
#include "wire/fields.h"

namespace softrdma::samehost {
struct Peer;
}

namespace softrdma::engine::rc {

struct Path {
  transport::Transport* via = nullptr;  // the family's transport the packets leave by
  transport::Gid src{};
  transport::Gid dst{};
  uint32_t dest_qpn = 0;
  uint16_t src_port = 0xc000;
  uint16_t pkey = 0xffff;
  uint32_t mtu = 1024;
  // A same-host peer (docs/decisions/same-host.md): its memory operations are
  // executed here (rc/host_execution.cc); null: everything goes on the wire.
  std::shared_ptr<samehost::Peer> peer;
};

// Builds one packet addressed along `path`, with the BTH filled in.
inline wire::PacketView emit(roce::TxBatch& tx, const Path& path, uint8_t opcode,
                             size_t payload_len, uint32_t psn) {
  wire::PacketView p =
      tx.add(*path.via, opcode, payload_len, path.src, path.dst, path.src_port);
  p.set(wire::bth::kPkey, path.pkey);
  p.set(wire::bth::kDestQp, path.dest_qpn);
  p.set(wire::bth::kPsn, psn);
  return p;
}

// A full data packet on the wire as the pacer counts it (rate_control.h): the
// payload and IPv4 + UDP + BTH + RETH + ICRC.
constexpr uint32_t paced_packet_bytes(const Path& path) { return path.mtu + 20 + 8 + 12 + 16 + 4; }

// Packets (PSNs) a message of `length` bytes takes at this MTU; an empty message
// is still one packet (IBA 9.7.4.1.1).
constexpr uint32_t packets_for(uint64_t length, uint32_t mtu) {
  return length == 0 ? 1 : uint32_t((length + mtu - 1) / mtu);
}

// IBA 9.7.6.1.3 / 11.2.4.2: local ACK timeout = 4.096 us * 2^timeout; 0 = infinite.
inline int64_t ack_timeout_ns(uint8_t timeout) {
  if (timeout == 0) return INT64_MAX;
  return int64_t(4096) << (timeout > 31 ? 31 : timeout);
}

}  // namespace softrdma::engine::rc
