// The RoCEv2 invariant CRC (IBA Annex A17.3.3): CRC-32 (IEEE 802.3, reflected, as
// zlib's crc32) over 8 bytes of ones standing for the LRH, the IP header with its
// variant fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class,
// flow label, hop limit), the UDP header with its checksum set to ones, the BTH with
// its reserved byte 4 set to ones, and everything after the BTH up to the ICRC.
// The ICRC is carried in the last four bytes, least significant byte first (the
// golden Soft-RoCE vectors confirm it). docs/decisions/icrc.md: the two traps of
// computing it above a UDP socket, and how softrdma handles them.
#pragma once

#include <sys/uio.h>  // struct iovec: the type of a gathered payload, no I/O here

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wire/ip_udp.h"
#include "wire/opcodes.h"

namespace softrdma::wire {

// CRC over the masked headers and `udp_payload` minus its last four (ICRC) bytes.
// compute_icrc and write_icrc expect a packet the caller built or parsed: at least a
// BTH and the ICRC, at most 65507 bytes (a UDP datagram's limit); given other bytes
// they return 0 / write nothing. check_icrc and solve_icrc_ipv4 answer "no" to them.
uint32_t compute_icrc(const IpUdpInfo& info, std::span<const uint8_t> udp_payload);

// Computes and stores the ICRC into the last four bytes of `udp_payload`.
void write_icrc(const IpUdpInfo& info, std::span<uint8_t> udp_payload);

// The ICRC of a packet that is never contiguous in memory: a sender that gathers
// the payload from registered memory straight into the socket call feeds the pieces
// in the order they go on the wire. Gives exactly compute_icrc's value.
//   IcrcStream icrc(info, bth, udp_payload_bytes);
//   icrc.add(extension_headers); icrc.add(payload_piece); ...; icrc.add(pad);
//   std::optional<uint32_t> crc = icrc.finish();
class IcrcStream {
 public:
  // `bth`: the packet's first 12 bytes. `udp_payload_bytes`: the whole UDP payload
  // to be sent, ICRC included (the IP and UDP length fields the ICRC covers).
  IcrcStream(const IpUdpInfo& info, std::span<const uint8_t, kBthBytes> bth,
             size_t udp_payload_bytes);

  // Feeds the bytes that follow the BTH, in wire order, up to the ICRC.
  void add(std::span<const uint8_t> bytes);

  // The ICRC, once exactly udp_payload_bytes - 12 - 4 bytes were added; nullopt if
  // the length was out of range (as for compute_icrc) or other than announced.
  std::optional<uint32_t> finish() const;

 private:
  uint32_t crc_ = 0;
  size_t bytes_left_ = 0;  // after the BTH, before the ICRC
  bool length_ok_ = false;
};

// compute_icrc of the UDP payload `headers` (BTH first) ++ `payload` pieces (data,
// then pad) ++ ICRC, without joining them. nullopt when `headers` holds no BTH or
// the total is out of compute_icrc's range.
std::optional<uint32_t> compute_icrc_gathered(const IpUdpInfo& info,
                                              std::span<const uint8_t> headers,
                                              std::span<const iovec> payload);

// The masked headers that start the ICRC input (A17.3.3 items 1-4: LRH ones, IP,
// UDP, BTH), written into `out`; returns their length (56 for IPv4, 76 for IPv6), or
// 0 when `udp_payload_bytes` is out of range. Exposed for bench/crc_bench, which
// times each CRC library over the same input as compute_icrc.
inline constexpr size_t kIcrcPrefixMaxBytes = 8 + kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes;
size_t write_icrc_prefix(const IpUdpInfo& info, std::span<const uint8_t, kBthBytes> bth,
                         size_t udp_payload_bytes,
                         std::span<uint8_t, kIcrcPrefixMaxBytes> out);

uint32_t stored_icrc(std::span<const uint8_t> udp_payload);

// True when the stored ICRC matches with every header field known.
bool check_icrc(const IpUdpInfo& info, std::span<const uint8_t> udp_payload);

// A receiving UDP socket never sees the sender's IPv4 Identification nor its DF bit,
// yet the ICRC covers both. CRC-32 is linear, so the 16 ID bits can be solved for:
// the check keeps 32 - 16 - 1 = 15 bits of strength (see docs/decisions/icrc.md).
// Tries `likely_id` with DF first (softrdma sends ID 0 + DF alone, and i + DF as
// segment i of a GSO send), then solves with DF set, then clear: the guess saves
// the solve's multiplication when right and changes nothing else. Returns the ID
// that makes the ICRC match, or nullopt. `info`'s ipv4_id/ipv4_df are ignored. For
// an IPv6 `info` nothing is unknown: it is check_icrc, returning info's own id/df
// on success.
struct SolvedIpv4 {
  uint16_t id;
  bool df;
};
std::optional<SolvedIpv4> solve_icrc_ipv4(IpUdpInfo info, std::span<const uint8_t> udp_payload,
                                          uint16_t likely_id = 0);

}  // namespace softrdma::wire
