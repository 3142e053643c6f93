// Test helpers shared by the wire tests, the fuzz entry and the benchmark:
// re-encoding a parsed packet from its decoded fields alone, and random packets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "wire/fields.h"
#include "wire/icrc.h"
#include "wire/opcodes.h"
#include "wire/packet.h"

namespace softrdma::wire::testing {

// Builds a new packet from `parsed`'s decoded fields and payload only: every field
// of every header its opcode carries, then the payload. Pad bytes and ICRC are left
// as build_packet lays them out (zero); the caller writes the ICRC.
inline std::vector<uint8_t> reencode(const PacketView& parsed) {
  const uint8_t opcode = parsed.opcode();
  const auto payload = parsed.payload();
  std::vector<uint8_t> out(packet_bytes(opcode, payload.size()));
  PacketView built = build_packet(out, opcode, payload.size());
  for (size_t h = 0; h < kNumHeaders; ++h) {
    if (!parsed.info().has(Header(h))) continue;
    for (const FieldSpec& f : header_fields(Header(h))) built.set(f, parsed.get(f));
  }
  std::copy(payload.begin(), payload.end(), built.payload().begin());
  return out;
}

// The opcodes of the table (RC, UC, UD), in numeric order.
inline std::vector<uint8_t> valid_opcodes() {
  std::vector<uint8_t> ops;
  for (size_t op = 0; op < kOpcodes.size(); ++op)
    if (kOpcodes[op].valid()) ops.push_back(uint8_t(op));
  return ops;
}

inline uint8_t random_valid_opcode(std::mt19937_64& rng) {
  static const std::vector<uint8_t> ops = valid_opcodes();
  return ops[rng() % ops.size()];
}

// A well-formed packet: random values in every field (TVer 0, pad as the payload
// needs), random payload (none for opcodes without one), ICRC not yet written.
inline std::vector<uint8_t> random_packet(std::mt19937_64& rng, uint8_t opcode,
                                          size_t payload_len) {
  if (!kOpcodes[opcode].any(kOpPayload)) payload_len = 0;
  std::vector<uint8_t> out(packet_bytes(opcode, payload_len));
  PacketView p = build_packet(out, opcode, payload_len);
  for (size_t h = 0; h < kNumHeaders; ++h) {
    if (!p.info().has(Header(h))) continue;
    for (const FieldSpec& f : header_fields(Header(h))) {
      if (f.header == Header::kBth && (f.offset == 0 || f.offset == 1)) continue;
      p.set(f, rng());
    }
  }
  p.set(bth::kSolicited, rng() & 1);
  p.set(bth::kMigReq, rng() & 1);
  for (auto& b : p.payload()) b = uint8_t(rng());
  return out;
}

inline IpUdpInfo random_ipv4_info(std::mt19937_64& rng) {
  IpUdpInfo info;
  info.src = gid_from_ipv4(uint32_t(rng()));
  info.dst = gid_from_ipv4(uint32_t(rng()));
  info.src_port = uint16_t(0xc000 | (rng() & 0x3fff));
  info.ipv4_id = uint16_t(rng());
  info.ipv4_df = (rng() & 1) != 0;
  info.ttl = uint8_t(rng());
  info.tos = uint8_t(rng());
  return info;
}

inline IpUdpInfo random_ipv6_info(std::mt19937_64& rng) {
  IpUdpInfo info = random_ipv4_info(rng);
  for (auto& b : info.src) b = uint8_t(rng());
  for (auto& b : info.dst) b = uint8_t(rng());
  info.src[0] = info.dst[0] = 0xfd;  // unique-local, never ::ffff:a.b.c.d
  return info;
}

}  // namespace softrdma::wire::testing
