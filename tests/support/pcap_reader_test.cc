// The pcap reader: on a golden vector, and on small captures written here in each
// link type and byte order it claims to read.
#include "support/pcap_reader.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace softrdma::test {
namespace {

void put16be(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(uint8_t(x >> 8));
  v.push_back(uint8_t(x));
}

void put32(std::vector<uint8_t>& v, uint32_t x, bool big_endian) {
  for (int i = 0; i < 4; ++i) v.push_back(uint8_t(x >> (big_endian ? 24 - 8 * i : 8 * i)));
}

// A pcap file with the given records, written in either byte order.
std::vector<uint8_t> pcap_file(uint32_t link, const std::vector<std::vector<uint8_t>>& frames,
                               bool big_endian = false, bool nanos = false) {
  std::vector<uint8_t> f;
  put32(f, nanos ? 0xa1b23c4d : 0xa1b2c3d4, big_endian);
  f.push_back(big_endian ? 0 : 2), f.push_back(big_endian ? 2 : 0);  // version 2.4
  f.push_back(big_endian ? 0 : 4), f.push_back(big_endian ? 4 : 0);
  put32(f, 0, big_endian);       // thiszone
  put32(f, 0, big_endian);       // sigfigs
  put32(f, 65535, big_endian);   // snaplen
  put32(f, link, big_endian);
  uint32_t second = 1700000000;
  for (const auto& frame : frames) {
    put32(f, second++, big_endian);
    put32(f, 250, big_endian);
    put32(f, uint32_t(frame.size()), big_endian);
    put32(f, uint32_t(frame.size()), big_endian);
    f.insert(f.end(), frame.begin(), frame.end());
  }
  return f;
}

wire::IpUdpInfo sample_info(bool v6) {
  wire::IpUdpInfo info;
  info.src = wire::gid_from_ipv4(0xc0a80101);
  info.dst = wire::gid_from_ipv4(0xc0a80102);
  if (v6) {
    info.src = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    info.dst = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  }
  info.src_port = 0xc042;
  info.ipv4_id = v6 ? 0 : 0x1234;
  info.ipv4_df = !v6;
  info.ttl = 33;
  info.tos = 0x48;
  return info;
}

const std::vector<uint8_t> kPayload = {0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 1,
                                       0xde, 0xad, 0xbe, 0xef};

// IP + UDP + payload, as softrdma's own header builder writes them.
std::vector<uint8_t> ip_datagram(const wire::IpUdpInfo& info) {
  std::array<uint8_t, 48> headers{};
  const size_t n = wire::build_ip_udp_headers(info, kPayload.size(), headers);
  std::vector<uint8_t> d(headers.begin(), headers.begin() + n);
  d.insert(d.end(), kPayload.begin(), kPayload.end());
  return d;
}

std::vector<uint8_t> with_link_header(uint32_t link, bool v6, std::vector<uint8_t> ip) {
  std::vector<uint8_t> h;
  const uint16_t ether_type = v6 ? 0x86dd : 0x0800;
  switch (link) {
    case link_type::kEthernet:
      h.assign(12, 0x02);
      put16be(h, 0x8100);  // one VLAN tag in front
      put16be(h, 7);
      put16be(h, ether_type);
      break;
    case link_type::kLinuxSll:
      h.assign(14, 0);
      put16be(h, ether_type);
      break;
    case link_type::kLinuxSll2:
      put16be(h, ether_type);
      h.resize(20, 0);
      break;
    case link_type::kNull:
      h = {v6 ? uint8_t(10) : uint8_t(2), 0, 0, 0};
      break;
    default: break;
  }
  h.insert(h.end(), ip.begin(), ip.end());
  return h;
}

void expect_same(const RoceFrame& f, const wire::IpUdpInfo& info) {
  EXPECT_EQ(f.ip.src, info.src);
  EXPECT_EQ(f.ip.dst, info.dst);
  EXPECT_EQ(f.ip.src_port, info.src_port);
  EXPECT_EQ(f.ip.dst_port, wire::kRoceUdpPort);
  EXPECT_EQ(f.ip.ipv4_id, info.ipv4_id);
  EXPECT_EQ(f.ip.ipv4_df, info.ipv4_df);
  EXPECT_EQ(f.ip.ttl, info.ttl);
  EXPECT_EQ(f.ip.tos, info.tos);
  EXPECT_EQ(f.udp_payload, kPayload);
}

TEST(PcapReaderTest, ReadsAGoldenVector) {
  RoceCapture c = read_roce_pcap(std::string(SOFTRDMA_TEST_DATA) + "/rc_send.pcap");
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.packets.size(), 86u);     // MANIFEST.md
  EXPECT_GT(c.records, c.packets.size());  // ARP, IPv6 noise and TCP are skipped
  ASSERT_FALSE(c.packets.empty());
  EXPECT_EQ(c.packets[0].ip.src, wire::gid_from_ipv4(0x0a4d0002));  // client first
  EXPECT_GE(c.packets[1].timestamp_ns, c.packets[0].timestamp_ns);
}

TEST(PcapReaderTest, EveryLinkTypeAndByteOrder) {
  const uint32_t links[] = {link_type::kEthernet, link_type::kLinuxSll, link_type::kLinuxSll2,
                            link_type::kNull, link_type::kRaw, link_type::kIpv4, link_type::kIpv6};
  for (uint32_t link : links) {
    for (bool v6 : {false, true}) {
      if ((link == link_type::kIpv4 && v6) || (link == link_type::kIpv6 && !v6)) continue;
      for (bool big_endian : {false, true}) {
        SCOPED_TRACE("link " + std::to_string(link) + (v6 ? " v6" : " v4") +
                     (big_endian ? " BE" : " LE"));
        const wire::IpUdpInfo info = sample_info(v6);
        RoceCapture c = read_roce_pcap(
            pcap_file(link, {with_link_header(link, v6, ip_datagram(info))}, big_endian));
        EXPECT_EQ(c.error, "");
        ASSERT_EQ(c.packets.size(), 1u);
        expect_same(c.packets[0], info);
        EXPECT_EQ(c.packets[0].timestamp_ns, 1700000000ull * 1'000'000'000 + 250'000);
      }
    }
  }
}

TEST(PcapReaderTest, NanosecondTimestamps) {
  RoceCapture c = read_roce_pcap(pcap_file(link_type::kRaw, {ip_datagram(sample_info(false))},
                                           false, /*nanos=*/true));
  ASSERT_EQ(c.packets.size(), 1u);
  EXPECT_EQ(c.packets[0].timestamp_ns, 1700000000ull * 1'000'000'000 + 250);
}

TEST(PcapReaderTest, SkipsWhatIsNotAWholeRoceDatagram) {
  wire::IpUdpInfo other_port = sample_info(false);
  other_port.dst_port = 4792;
  std::vector<uint8_t> fragment = ip_datagram(sample_info(false));
  fragment[6] |= 0x20;  // More Fragments
  std::vector<uint8_t> with_options = ip_datagram(sample_info(false));
  with_options[0] = 0x46;
  std::vector<uint8_t> short_udp = ip_datagram(sample_info(false));
  short_udp.resize(short_udp.size() - 1);  // IP total length now exceeds the frame
  std::vector<uint8_t> good = ip_datagram(sample_info(false));
  RoceCapture c = read_roce_pcap(pcap_file(
      link_type::kRaw, {ip_datagram(other_port), fragment, with_options, short_udp, good}));
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.records, 5u);
  ASSERT_EQ(c.packets.size(), 1u);
  EXPECT_EQ(c.packets[0].record_index, 4u);
  EXPECT_EQ(c.packets[0].udp_payload, kPayload);
}

TEST(PcapReaderTest, EthernetPaddingIsNotPayload) {
  std::vector<uint8_t> frame =
      with_link_header(link_type::kEthernet, false, ip_datagram(sample_info(false)));
  frame.resize(frame.size() + 6, 0);  // minimum-size frame padding after the datagram
  RoceCapture c = read_roce_pcap(pcap_file(link_type::kEthernet, {frame}));
  ASSERT_EQ(c.packets.size(), 1u);
  EXPECT_EQ(c.packets[0].udp_payload, kPayload);
}

// A record cut by the capture's snaplen lost its ICRC: not a packet to check.
TEST(PcapReaderTest, SkipsRecordsCutBySnaplen) {
  std::vector<uint8_t> file = pcap_file(link_type::kRaw, {ip_datagram(sample_info(false))});
  file[24 + 12] += 10;  // original length (little-endian) larger than captured
  RoceCapture c = read_roce_pcap(file);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.records, 1u);
  EXPECT_TRUE(c.packets.empty());
}

TEST(PcapReaderTest, ReportsDamagedFiles) {
  std::vector<uint8_t> file = pcap_file(link_type::kRaw, {ip_datagram(sample_info(false))});
  file.resize(file.size() - 3);
  EXPECT_NE(read_roce_pcap(file).error.find("truncated record data"), std::string::npos);
  std::vector<uint8_t> pcapng = {0x0a, 0x0d, 0x0d, 0x0a};
  pcapng.resize(32, 0);
  EXPECT_NE(read_roce_pcap(pcapng).error.find("pcapng"), std::string::npos);
  EXPECT_NE(read_roce_pcap(std::vector<uint8_t>(24, 0x55)).error.find("magic"), std::string::npos);
  EXPECT_NE(read_roce_pcap(std::vector<uint8_t>(10, 0)).error, "");
  EXPECT_NE(read_roce_pcap("/nonexistent/x.pcap").error.find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace softrdma::test
