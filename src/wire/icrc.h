// The RoCEv2 invariant CRC (IBA Annex A17.3.3): CRC-32 (IEEE 802.3, reflected, as
// zlib's crc32) over 8 bytes of ones standing for the LRH, the IP header with its
// variant fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class,
// flow label, hop limit), the UDP header with its checksum set to ones, the BTH with
// its reserved byte 4 set to ones, and everything after the BTH up to the ICRC.
// The ICRC is carried in the last four bytes, least significant byte first (the
// golden Soft-RoCE vectors confirm it). docs/decisions/icrc.md: the two traps of
// computing it above a UDP socket, and how softrdma handles them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "wire/ip_udp.h"

namespace softrdma::wire {

// CRC over the masked headers and `udp_payload` minus its last four (ICRC) bytes.
// compute_icrc and write_icrc expect a packet the caller built or parsed: at least a
// BTH and the ICRC, at most 65507 bytes (a UDP datagram's limit); given other bytes
// they return 0 / write nothing. check_icrc and solve_icrc_ipv4 answer "no" to them.
uint32_t compute_icrc(const IpUdpInfo& info, std::span<const uint8_t> udp_payload);

// Computes and stores the ICRC into the last four bytes of `udp_payload`.
void write_icrc(const IpUdpInfo& info, std::span<uint8_t> udp_payload);

uint32_t stored_icrc(std::span<const uint8_t> udp_payload);

// True when the stored ICRC matches with every header field known.
bool check_icrc(const IpUdpInfo& info, std::span<const uint8_t> udp_payload);

// A receiving UDP socket never sees the sender's IPv4 Identification nor its DF bit,
// yet the ICRC covers both. CRC-32 is linear, so the 16 ID bits can be solved for:
// the check keeps 32 - 16 - 1 = 15 bits of strength (see docs/decisions/icrc.md).
// Tries ID 0 with DF (what softrdma sends) first, then solves with DF set, then clear.
// Returns the ID that makes the ICRC match, or nullopt. `info`'s ipv4_id/ipv4_df are
// ignored. For an IPv6 `info` nothing is unknown: it is check_icrc, returning
// info's own id/df on success.
struct SolvedIpv4 {
  uint16_t id;
  bool df;
};
std::optional<SolvedIpv4> solve_icrc_ipv4(IpUdpInfo info,
                                          std::span<const uint8_t> udp_payload);

}  // namespace softrdma::wire
