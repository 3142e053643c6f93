// GID helpers and the IPv4/IPv6 + UDP headers that carry RoCEv2 (IBA Annex A17.4).
#include "wire/ip_udp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

namespace softrdma::wire {
namespace {

uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

IpUdpInfo ipv4_info() {
  IpUdpInfo info;
  info.src = gid_from_ipv4(0x0a4d0002);  // 10.77.0.2
  info.dst = gid_from_ipv4(0x0a4d0003);
  info.src_port = 0xc123;
  info.ipv4_id = 0xf351;
  info.ipv4_df = true;
  info.ttl = 64;
  info.tos = 0x28;
  return info;
}

TEST(GidTest, Ipv4MappedAddresses) {
  const Gid gid = gid_from_ipv4(0x0a4d0002);
  const Gid expected = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2};
  EXPECT_EQ(gid, expected);
  EXPECT_TRUE(gid_is_ipv4(gid));
  EXPECT_EQ(gid_to_ipv4(gid), 0x0a4d0002u);
  Gid link_local{};
  link_local[0] = 0xfe;
  link_local[1] = 0x80;
  EXPECT_FALSE(gid_is_ipv4(link_local));
  Gid almost = gid;
  almost[11] = 0xfe;  // ::fffe:a.b.c.d is not IPv4-mapped
  EXPECT_FALSE(gid_is_ipv4(almost));
  almost = gid;
  almost[0] = 1;
  EXPECT_FALSE(gid_is_ipv4(almost));
  IpUdpInfo info;
  info.src = link_local;
  EXPECT_TRUE(info.ipv6());
}

TEST(IpUdpHeadersTest, Ipv4HeaderFields) {
  std::array<uint8_t, 48> out{};
  ASSERT_EQ(build_ip_udp_headers(ipv4_info(), 1000, out), 28u);
  const uint8_t* ip = out.data();
  EXPECT_EQ(ip[0], 0x45);
  EXPECT_EQ(ip[1], 0x28);
  EXPECT_EQ(be16(ip + 2), 20 + 8 + 1000);
  EXPECT_EQ(be16(ip + 4), 0xf351);
  EXPECT_EQ(be16(ip + 6), 0x4000);  // DF, offset 0
  EXPECT_EQ(ip[8], 64);
  EXPECT_EQ(ip[9], 17);
  EXPECT_EQ(std::vector<uint8_t>(ip + 12, ip + 20),
            (std::vector<uint8_t>{10, 77, 0, 2, 10, 77, 0, 3}));
  // RFC 1071: summing the header with its checksum gives all ones.
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += be16(ip + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu);
  const uint8_t* udp = ip + 20;
  EXPECT_EQ(be16(udp), 0xc123);
  EXPECT_EQ(be16(udp + 2), 4791);
  EXPECT_EQ(be16(udp + 4), 8 + 1000);
  EXPECT_EQ(be16(udp + 6), 0);
}

TEST(IpUdpHeadersTest, Ipv4WithoutDf) {
  IpUdpInfo info = ipv4_info();
  info.ipv4_df = false;
  std::array<uint8_t, 48> out{};
  ASSERT_EQ(build_ip_udp_headers(info, 0, out), 28u);
  EXPECT_EQ(be16(out.data() + 6), 0);
}

TEST(IpUdpHeadersTest, Ipv6HeaderFields) {
  IpUdpInfo info = ipv4_info();
  for (size_t i = 0; i < 16; ++i) {
    info.src[i] = uint8_t(0xf0 + i);
    info.dst[i] = uint8_t(0x10 + i);
  }
  info.tos = 0xab;
  info.ttl = 7;
  std::array<uint8_t, 48> out{};
  ASSERT_EQ(build_ip_udp_headers(info, 300, out), 48u);
  const uint8_t* ip = out.data();
  EXPECT_EQ(ip[0], 0x6a);  // version 6, traffic class high nibble
  EXPECT_EQ(ip[1], 0xb0);  // traffic class low nibble, flow label 0
  EXPECT_EQ(ip[2] | ip[3], 0);
  EXPECT_EQ(be16(ip + 4), 8 + 300);
  EXPECT_EQ(ip[6], 17);
  EXPECT_EQ(ip[7], 7);
  EXPECT_TRUE(std::equal(info.src.begin(), info.src.end(), ip + 8));
  EXPECT_TRUE(std::equal(info.dst.begin(), info.dst.end(), ip + 24));
  EXPECT_EQ(be16(ip + 40 + 4), 8 + 300);
  EXPECT_EQ(be16(ip + 40 + 6), 0);  // RoCEv2 practice, see ip_udp.cc
}

TEST(IpUdpHeadersTest, RefusesWhatCannotBeWritten) {
  std::array<uint8_t, 27> small{};
  EXPECT_EQ(build_ip_udp_headers(ipv4_info(), 10, small), 0u);
  std::array<uint8_t, 48> out{};
  EXPECT_EQ(build_ip_udp_headers(ipv4_info(), 65535 - 28 + 1, out), 0u);
  EXPECT_EQ(build_ip_udp_headers(ipv4_info(), 65535 - 28, out), 28u);
  IpUdpInfo v6 = ipv4_info();
  v6.src[0] = 0xfd;
  std::array<uint8_t, 47> small6{};
  EXPECT_EQ(build_ip_udp_headers(v6, 10, small6), 0u);
}

}  // namespace
}  // namespace softrdma::wire
