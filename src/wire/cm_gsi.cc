#include "wire/cm_gsi.h"

#include <algorithm>

namespace softrdma::wire {

PacketView build_gsi_packet(std::span<uint8_t> out, const GsiSend& send,
                            std::span<const uint8_t, kMadBytes> mad) {
  PacketView p = build_packet(out, op::kUdSendOnly, kMadBytes);
  p.set(bth::kPkey, send.pkey);
  p.set(bth::kDestQp, send.dest_qp);
  p.set(bth::kAckReq, send.ack_req ? 1 : 0);
  p.set(bth::kPsn, send.psn);
  p.set(deth::kQkey, kGsiQkey);
  p.set(deth::kSrcQp, send.src_qp);
  std::copy(mad.begin(), mad.end(), p.payload().begin());
  return p;
}

std::span<const uint8_t> gsi_mad(const PacketView& packet) {
  if (packet.opcode() != op::kUdSendOnly) return {};
  if (packet.dest_qp() != kGsiQpn || packet.get(deth::kQkey) != kGsiQkey) return {};
  const std::span<uint8_t> payload = packet.payload();
  if (payload.size() != kMadBytes) return {};
  return payload;
}

}  // namespace softrdma::wire
