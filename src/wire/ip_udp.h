// The IP and UDP headers that carry a RoCEv2 packet (IBA Annex A17.4), as pure
// data: the ICRC covers them, and packet capture writes them out.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace softrdma::wire {

inline constexpr uint16_t kRoceUdpPort = 4791;  // IANA: RoCEv2
inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kIpv6HeaderBytes = 40;
inline constexpr size_t kUdpHeaderBytes = 8;

using Gid = std::array<uint8_t, 16>;

// A GID that is an IPv4-mapped IPv6 address (::ffff:a.b.c.d) carries IPv4.
bool gid_is_ipv4(const Gid& gid);
Gid gid_from_ipv4(uint32_t ipv4_host_order);
uint32_t gid_to_ipv4(const Gid& gid);  // host order
// A multicast GID (IBA A17.4.5.1 / rdma_is_multicast_addr): an IPv6 multicast
// address (ff00::/8) or an IPv4-mapped IPv4 multicast address (::ffff:224.0.0.0/4).
bool gid_is_multicast(const Gid& gid);
// BTH DestQP of a multicast packet (IBA 9.6.1.1, 10.5.2.1: the "permissive" QPN).
inline constexpr uint32_t kMulticastQpn = 0xffffff;

// Everything of the IP and UDP headers that the ICRC covers and a receiving socket
// may or may not reveal.
// The ECN field, the TOS / traffic class byte's low two bits (RFC 3168 §5):
// softrdma's RoCEv2 packets leave ECT(0) (congestion-control.md); a switch marks CE.
inline constexpr uint8_t kEcnMask = 0x3;
inline constexpr uint8_t kEcnEct0 = 0x2;
inline constexpr uint8_t kEcnCe = 0x3;

struct IpUdpInfo {
  Gid src{};
  Gid dst{};
  uint16_t src_port = 0;
  uint16_t dst_port = kRoceUdpPort;
  uint16_t ipv4_id = 0;    // IPv4 Identification (unknown to a receiving socket)
  bool ipv4_df = true;     // IPv4 Don't Fragment (likewise unknown)
  uint8_t ttl = 64;        // masked out of the ICRC
  uint8_t tos = 0;         // masked out of the ICRC
  bool ipv6() const { return !gid_is_ipv4(src); }
};

// Writes real IPv4/IPv6 + UDP headers (IPv4 header checksum filled, UDP checksum 0,
// which RoCEv2 allows) for a UDP payload of `udp_payload_len` bytes. Returns the
// number of bytes written (28 or 48); `out` must hold 48. Returns 0 and writes
// nothing when `out` is too small or the datagram overflows a 16-bit length field.
size_t build_ip_udp_headers(const IpUdpInfo& info, size_t udp_payload_len,
                            std::span<uint8_t> out);

// IBA A17.4.5.1: for RoCEv2 a UD completion carries "a flag that indicates if the
// received frame is an IPv4, IPv6 or RoCE packet". verbs has no field for it;
// RoCE NICs (ConnectX, whose completion format fills it in) report it in `sl`,
// which RoCE has no other use for (no LRH, so no service level arrives): bit 3
// "UDP header present" (RoCEv2), bits 2:0 the L3 header, 1 IPv6, 2 IPv4. UCX's
// ud_verbs reads it there to find the destination address in the 40 GRH bytes
// (decisions/ucx.md).
constexpr uint8_t roce_packet_type(bool ipv4) {
  constexpr uint8_t kRoceV2 = 0x8, kIpv6 = 0x1, kIpv4 = 0x2;
  return kRoceV2 | (ipv4 ? kIpv4 : kIpv6);
}

}  // namespace softrdma::wire
