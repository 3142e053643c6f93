// CM MADs on the wire: the General Services Interface is QP1 (IBA 3.5.6), reached by
// UD SEND_ONLY packets that carry the well-known GSI Q_Key 0x80010000 (IBA 13.5); the
// payload is exactly one 256-byte MAD. RoCEv2 peers send it so (Soft-RoCE sets
// AckReq on every last packet, a UD SEND_ONLY included). Pure: no I/O, no allocation.
#pragma once

#include <cstdint>
#include <span>

#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace softrdma::wire {

inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;
inline constexpr uint16_t kDefaultPkey = 0xffff;
inline constexpr size_t kGsiPacketBytes = packet_bytes(op::kUdSendOnly, kMadBytes);  // 280

struct GsiSend {
  uint16_t pkey = kDefaultPkey;
  uint32_t psn = 0;                // 24 bits: the sending QP1's own sequence
  uint32_t dest_qp = kGsiQpn;      // IBA 13.5: MADs to a CM go to QP1 ...
  uint32_t src_qp = kGsiQpn;       // ... and come from QP1 (or a redirected QP)
  bool ack_req = true;
};

// Lays out a UD SEND_ONLY carrying `mad` in `out` (which must hold kGsiPacketBytes);
// the ICRC bytes are left zero for the transport to fill (icrc.h).
PacketView build_gsi_packet(std::span<uint8_t> out, const GsiSend& send,
                            std::span<const uint8_t, kMadBytes> mad);

// The MAD carried by a parsed packet when it is a UD SEND_ONLY to QP1 with the GSI
// Q_Key and a payload of exactly one MAD; empty otherwise.
std::span<const uint8_t> gsi_mad(const PacketView& packet);

}  // namespace softrdma::wire
