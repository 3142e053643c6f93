// A view over one RoCEv2 UDP payload: BTH, extension headers, payload, pad, ICRC.
// No I/O, no allocation: the bytes belong to the caller.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "wire/fields.h"
#include "wire/opcodes.h"

namespace softrdma::wire {

enum class ParseError : uint8_t {
  kNone,
  kTruncated,       // shorter than BTH + headers + ICRC
  kBadOpcode,       // not an opcode of RC, UC or UD
  kBadVersion,      // BTH TVer != 0 (IBA 9.2: transport header version 0)
  kBadPad,          // pad count larger than the bytes left, or pad on a packet without payload
  kCount,
};
std::string_view to_string(ParseError e);

class PacketView {
 public:
  PacketView() = default;
  // bytes: the whole UDP payload, ICRC included.
  PacketView(std::span<uint8_t> bytes) : bytes_(bytes) {}

  uint8_t opcode() const { return bytes_[0]; }
  const OpcodeInfo& info() const { return kOpcodes[opcode()]; }
  std::span<uint8_t> bytes() const { return bytes_; }

  uint64_t get(const FieldSpec& f) const { return load_field(header_at(f.header), f); }
  void set(const FieldSpec& f, uint64_t value) { store_field(header_at(f.header), f, value); }

  uint32_t psn() const { return uint32_t(get(bth::kPsn)); }
  uint32_t dest_qp() const { return uint32_t(get(bth::kDestQp)); }
  bool ack_req() const { return get(bth::kAckReq) != 0; }
  uint32_t pad() const { return uint32_t(get(bth::kPadCount)); }

  // Payload bytes, pad and ICRC excluded. Valid only on a parsed or built packet.
  std::span<uint8_t> payload() const {
    size_t begin = info().header_bytes;
    size_t end = bytes_.size() - kIcrcBytes - pad();
    return bytes_.subspan(begin, end - begin);
  }
  // The four ICRC bytes (IBA Annex A17.3.3: sent little-endian... see icrc.h).
  std::span<uint8_t> icrc_bytes() const { return bytes_.last(kIcrcBytes); }

 private:
  uint8_t* header_at(Header h) const { return bytes_.data() + info().offset[size_t(h)]; }

  std::span<uint8_t> bytes_;
};

// Checks the structure of a received UDP payload (not the ICRC: see icrc.h, and
// not transport semantics: the engine's roles do that). On success `out` views it.
ParseError parse_packet(std::span<uint8_t> udp_payload, PacketView& out);

// Bytes a packet of this opcode with `payload_len` payload bytes occupies on the wire
// (headers + payload + pad to 4 bytes + ICRC).
constexpr size_t packet_bytes(uint8_t opcode, size_t payload_len) {
  size_t pad = (4 - (payload_len & 3)) & 3;
  return kOpcodes[opcode].header_bytes + payload_len + pad + kIcrcBytes;
}

// Lays out an empty packet in `out` (which must hold packet_bytes()): zeroed headers,
// opcode, TVer 0, pad count, zeroed pad and ICRC. The caller sets fields and copies
// the payload into view.payload(), then the transport fills in the ICRC.
PacketView build_packet(std::span<uint8_t> out, uint8_t opcode, size_t payload_len);

}  // namespace softrdma::wire
