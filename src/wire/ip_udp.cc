#include "wire/ip_udp.h"

#include <cstring>

namespace softrdma::wire {

namespace {

constexpr uint8_t kIpProtoUdp = 17;
constexpr uint16_t kIpv4FlagDf = 0x4000;  // RFC 791: flags are the top 3 bits of byte 6
constexpr size_t kMaxLengthField = 0xffff;  // IPv4 total length, IPv6 payload length

void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

// RFC 791 / RFC 1071: ones' complement of the ones' complement sum of 16-bit words.
uint16_t ipv4_header_checksum(const uint8_t* header) {
  uint32_t sum = 0;
  for (size_t i = 0; i < kIpv4HeaderBytes; i += 2) sum += uint32_t(header[i] << 8 | header[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

void write_ipv4_header(const IpUdpInfo& info, size_t udp_bytes, uint8_t* p) {
  p[0] = 0x45;  // version 4, IHL 5 words: RoCEv2 never sends IP options
  p[1] = info.tos;
  put16(p + 2, uint16_t(kIpv4HeaderBytes + udp_bytes));
  put16(p + 4, info.ipv4_id);
  put16(p + 6, info.ipv4_df ? kIpv4FlagDf : 0);  // fragment offset 0
  p[8] = info.ttl;
  p[9] = kIpProtoUdp;
  put16(p + 10, 0);
  std::memcpy(p + 12, info.src.data() + 12, 4);
  std::memcpy(p + 16, info.dst.data() + 12, 4);
  put16(p + 10, ipv4_header_checksum(p));
}

void write_ipv6_header(const IpUdpInfo& info, size_t udp_bytes, uint8_t* p) {
  // Version 6, traffic class = tos, flow label 0 (the ICRC masks both, A17.3.3).
  p[0] = uint8_t(0x60 | (info.tos >> 4));
  p[1] = uint8_t(info.tos << 4);
  p[2] = 0;
  p[3] = 0;
  put16(p + 4, uint16_t(udp_bytes));  // payload length: everything after this header
  p[6] = kIpProtoUdp;                 // next header
  p[7] = info.ttl;                    // hop limit
  std::memcpy(p + 8, info.src.data(), 16);
  std::memcpy(p + 24, info.dst.data(), 16);
}

void write_udp_header(const IpUdpInfo& info, size_t udp_bytes, uint8_t* p) {
  put16(p, info.src_port);
  put16(p + 2, info.dst_port);
  put16(p + 4, uint16_t(udp_bytes));
  // Checksum 0. IPv4: "no checksum" (RFC 768), and RoCEv2 (A17.4) lets the ICRC
  // protect the packet. IPv6 normally forbids a zero UDP checksum (RFC 8200 8.1);
  // RoCEv2 senders, Linux Soft-RoCE included, still send 0 and RoCEv2 receivers
  // accept it (the ICRC covers the payload), so softrdma does the same.
  put16(p + 6, 0);
}

}  // namespace

bool gid_is_ipv4(const Gid& gid) {
  for (size_t i = 0; i < 10; ++i)
    if (gid[i] != 0) return false;
  return gid[10] == 0xff && gid[11] == 0xff;
}

bool gid_is_multicast(const Gid& gid) {
  if (gid_is_ipv4(gid)) return (gid[12] & 0xf0) == 0xe0;
  return gid[0] == 0xff;
}

Gid gid_from_ipv4(uint32_t ipv4_host_order) {
  Gid gid{};
  gid[10] = 0xff;
  gid[11] = 0xff;
  for (size_t i = 0; i < 4; ++i) gid[12 + i] = uint8_t(ipv4_host_order >> (24 - 8 * i));
  return gid;
}

uint32_t gid_to_ipv4(const Gid& gid) {
  return uint32_t(gid[12]) << 24 | uint32_t(gid[13]) << 16 | uint32_t(gid[14]) << 8 |
         uint32_t(gid[15]);
}

size_t build_ip_udp_headers(const IpUdpInfo& info, size_t udp_payload_len,
                            std::span<uint8_t> out) {
  const bool v6 = info.ipv6();
  const size_t ip_bytes = v6 ? kIpv6HeaderBytes : kIpv4HeaderBytes;
  const size_t udp_bytes = kUdpHeaderBytes + udp_payload_len;
  // The 16-bit length fields must hold the datagram (IPv4 total length counts the
  // IP header too; IPv6 payload length does not).
  if (out.size() < ip_bytes + kUdpHeaderBytes) return 0;
  if ((v6 ? udp_bytes : ip_bytes + udp_bytes) > kMaxLengthField) return 0;
  if (v6) {
    write_ipv6_header(info, udp_bytes, out.data());
  } else {
    write_ipv4_header(info, udp_bytes, out.data());
  }
  write_udp_header(info, udp_bytes, out.data() + ip_bytes);
  return ip_bytes + kUdpHeaderBytes;
}

}  // namespace softrdma::wire
