#include "wire/packet.h"

namespace softrdma::wire {

std::string_view to_string(ParseError e) {
  switch (e) {
    case ParseError::kNone: return "none";
    case ParseError::kTruncated: return "truncated";
    case ParseError::kBadOpcode: return "bad_opcode";
    case ParseError::kBadVersion: return "bad_version";
    case ParseError::kBadPad: return "bad_pad";
    case ParseError::kCount: break;
  }
  return "?";
}

ParseError parse_packet(std::span<uint8_t> udp_payload, PacketView& out) {
  if (udp_payload.size() < kBthBytes + kIcrcBytes) return ParseError::kTruncated;
  const OpcodeInfo& info = kOpcodes[udp_payload[0]];
  if (!info.valid()) return ParseError::kBadOpcode;
  if (udp_payload.size() < info.header_bytes + kIcrcBytes) return ParseError::kTruncated;
  PacketView view(udp_payload);
  if (view.get(bth::kTver) != 0) return ParseError::kBadVersion;
  const size_t after_headers = udp_payload.size() - info.header_bytes - kIcrcBytes;
  if (view.pad() > after_headers) return ParseError::kBadPad;
  if (view.pad() != 0 && !info.any(kOpPayload)) return ParseError::kBadPad;
  out = view;
  return ParseError::kNone;
}

PacketView build_packet(std::span<uint8_t> out, uint8_t opcode, size_t payload_len) {
  const size_t total = packet_bytes(opcode, payload_len);
  const size_t header_bytes = kOpcodes[opcode].header_bytes;
  std::memset(out.data(), 0, header_bytes);
  std::memset(out.data() + header_bytes + payload_len, 0,
              total - header_bytes - payload_len);
  PacketView view(out.first(total));
  view.set(bth::kOpcode, opcode);
  view.set(bth::kPadCount, (4 - (payload_len & 3)) & 3);
  return view;
}

}  // namespace softrdma::wire
