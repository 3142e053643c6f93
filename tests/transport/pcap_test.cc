// Packet capture: files written through CaptureTransport decode as RoCEv2 in tshark
// with every ICRC good (scripts/check_capture.sh), and our own reader agrees.
#include "transport/pcap_writer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include <gtest/gtest.h>

#include "support/pcap_reader.h"
#include "transport/fake/fake_network.h"
#include "transport/transport_test_util.h"
#include "transport/udp/udp_transport.h"
#include "wire/icrc.h"

namespace softrdma::transport {
namespace {

using fake::FakeNetwork;
using fake::ipv4_gid;
using testing::make_packet;

std::string temp_pcap(const char* name) {
  return ::testing::TempDir() + "softrdma_" + name + "_" + std::to_string(getpid()) + ".pcap";
}

struct ScriptResult {
  int status = -1;  // exit status; 2: cannot run (no tshark)
  std::string output;
};

ScriptResult check_capture(const std::string& path, size_t min_packets) {
  const std::string command = std::string(SOFTRDMA_CHECK_CAPTURE) + " '" + path + "' " +
                              std::to_string(min_packets) + " 2>&1";
  ScriptResult result;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr) result.output += line;
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Packets of many shapes: every extension header tshark must find its way through.
std::vector<std::vector<uint8_t>> assorted_packets() {
  using namespace wire::op;
  std::vector<std::vector<uint8_t>> packets;
  uint32_t psn = 0xfffff0;  // across the 24-bit wrap
  for (auto [opcode, payload] : std::initializer_list<std::pair<uint8_t, size_t>>{
           {kRcSendOnly, 0}, {kRcSendOnly, 61}, {kRcSendFirst, 256}, {kRcSendMiddle, 256},
           {kRcSendLastImm, 3}, {kRcWriteOnly, 100}, {kRcWriteFirst, 1024},
           {kRcReadRequest, 0}, {kRcReadResponseOnly, 77}, {kRcAcknowledge, 0},
           {kRcCompareSwap, 0}, {kRcAtomicAcknowledge, 0}, {kRcSendOnlyInv, 8},
           {kUdSendOnly, 40}, {kUdSendOnlyImm, 4096}}) {
    auto bytes = make_packet(opcode, 0x11, psn++ & 0xffffff, payload, uint8_t(opcode));
    wire::PacketView view(bytes);
    if (view.info().has(wire::Header::kAeth)) view.set(wire::aeth::kSyndrome, 0x1f);
    if (view.info().has(wire::Header::kDeth)) view.set(wire::deth::kQkey, 0x11111111);
    packets.push_back(std::move(bytes));
  }
  return packets;
}

// Frames of `path` that tshark finds matching `filter` (-1: tshark did not run).
int tshark_count(const std::string& path, const std::string& options, const std::string& filter) {
  const std::string command = "tshark -r '" + path + "' " + options + " -Y '" + filter +
                              "' -T fields -e frame.number 2>/dev/null";
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  int lines = 0;
  char line[64];
  while (std::fgets(line, sizeof line, pipe) != nullptr) ++lines;
  return pclose(pipe) == 0 ? lines : -1;
}

void expect_every_icrc_checks(const std::string& path, size_t expected_packets) {
  const test::RoceCapture capture = test::read_roce_pcap(path);
  ASSERT_TRUE(capture.error.empty()) << capture.error;
  ASSERT_EQ(capture.packets.size(), expected_packets);
  for (const test::RoceFrame& f : capture.packets)
    EXPECT_TRUE(wire::check_icrc(f.ip, f.udp_payload)) << "record " << f.record_index;
}

void expect_tshark_clean(const std::string& path, size_t packets) {
  const ScriptResult r = check_capture(path, packets);
  // tshark and python3 are installed by scripts/install-deps.sh: missing is a failure.
  ASSERT_NE(r.status, 2) << r.output;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(std::to_string(packets) + " RoCEv2 packets"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(std::to_string(packets) + " ICRC good, 0 ICRC bad"), std::string::npos)
      << r.output;
}

TEST(Capture, FakeTrafficOfEveryShapeDecodesCleanlyInTshark) {
  const std::string path = temp_pcap("fake");
  std::string error;
  auto writer = PcapWriter::open(path, error);
  ASSERT_NE(writer, nullptr) << error;
  FakeNetwork net;
  CaptureTransport a(net.attach(ipv4_gid(10, 0, 0, 1)), writer);
  CaptureTransport b(net.attach(ipv4_gid(10, 0, 0, 2)), writer);
  // And the same over IPv6 GIDs (2001:db8::1 -> 2001:db8::2).
  Gid v6_a{0x20, 0x01, 0x0d, 0xb8}, v6_b = v6_a;
  v6_a[15] = 1;
  v6_b[15] = 2;
  CaptureTransport c(net.attach(v6_a), writer);
  CaptureTransport d(net.attach(v6_b), writer);
  auto packets = assorted_packets();
  auto packets_v6 = assorted_packets();
  std::vector<TxPacket> burst, burst_v6;
  for (auto& p : packets) burst.push_back(TxPacket{p, a.local_gid(), b.local_gid(), 0xC011});
  for (auto& p : packets_v6) burst_v6.push_back(TxPacket{p, v6_a, v6_b, 0xC012});
  ASSERT_EQ(a.tx_burst(burst), burst.size());
  ASSERT_EQ(c.tx_burst(burst_v6), burst_v6.size());
  std::vector<RxPacket> rx(64);
  ASSERT_EQ(b.rx_burst(rx), packets.size());
  ASSERT_EQ(d.rx_burst(rx), packets.size());
  writer->close();
  const size_t total = 4 * packets.size();
  EXPECT_EQ(writer->packets_written(), total) << "each packet sent and received";
  expect_every_icrc_checks(path, total);
  expect_tshark_clean(path, total);
  if (!IsSkipped()) {  // tshark is there
    // IPv6 frames carry the UDP checksum Linux would compute (RFC 8200 8.1).
    const std::string check = "-o udp.check_checksum:TRUE";
    EXPECT_EQ(tshark_count(path, check, "ipv6 && udp.checksum.status == \"Good\""),
              int(total / 2));
    EXPECT_EQ(tshark_count(path, check, "udp.checksum.status == \"Bad\""), 0);
  }
  std::remove(path.c_str());
}

TEST(Capture, UdpTrafficCaptureDecodesCleanlyWithIdZero) {
  const std::string path = temp_pcap("udp");
  std::string error;
  auto writer = PcapWriter::open(path, error, PcapWriter::FlushPolicy::kPeriodic);
  ASSERT_NE(writer, nullptr) << error;
  UdpConfig config;
  config.address = testing::test_address(40);
  auto udp_a = UdpTransport::open(config, error);
  config.address = testing::test_address(41);
  auto udp_b = UdpTransport::open(config, error);
  ASSERT_TRUE(udp_a && udp_b) << error;
  CaptureTransport a(std::move(udp_a), writer);
  CaptureTransport b(std::move(udp_b), writer);
  auto packets = assorted_packets();
  std::vector<TxPacket> burst;
  for (size_t i = 0; i < packets.size(); ++i)
    burst.push_back(TxPacket{packets[i], a.local_gid(), b.local_gid(), roce_source_port(i)});
  ASSERT_EQ(a.tx_burst(burst), burst.size());
  ASSERT_EQ(testing::receive(b, packets.size()).size(), packets.size());
  writer->close();
  expect_every_icrc_checks(path, 2 * packets.size());
  for (const auto& f : test::read_roce_pcap(path).packets) EXPECT_EQ(f.ip.ipv4_id, 0);
  expect_tshark_clean(path, 2 * packets.size());
  std::remove(path.c_str());
}

// A frame with a bad ICRC must make the check fail, and be named.
TEST(Capture, CorruptedPacketShowsAsABadIcrcAndFailsTheCheck) {
  const std::string path = temp_pcap("corrupt");
  std::string error;
  auto writer = PcapWriter::open(path, error);
  ASSERT_NE(writer, nullptr) << error;
  FakeNetwork net;
  auto peer = net.attach(ipv4_gid(10, 0, 0, 2));
  CaptureTransport a(net.attach(ipv4_gid(10, 0, 0, 1)), writer);
  auto good = make_packet(wire::op::kRcSendOnly, 0x11, 1, 32);
  auto bad = make_packet(wire::op::kRcSendOnly, 0x11, 2, 32);
  std::vector<TxPacket> burst{{good, a.local_gid(), peer->local_gid(), 0xC011},
                              {bad, a.local_gid(), peer->local_gid(), 0xC011}};
  const BitError flip{1, 30, 0x80};
  a.tx_burst_with_errors(burst, {&flip, 1});
  writer->close();
  const test::RoceCapture capture = test::read_roce_pcap(path);
  ASSERT_EQ(capture.packets.size(), 2u);
  EXPECT_TRUE(wire::check_icrc(capture.packets[0].ip, capture.packets[0].udp_payload));
  EXPECT_FALSE(wire::check_icrc(capture.packets[1].ip, capture.packets[1].udp_payload))
      << "the capture shows the packet as it was on the wire";
  const ScriptResult r = check_capture(path, 2);
  ASSERT_NE(r.status, 2) << r.output;
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("frame 2: bad ICRC"), std::string::npos) << r.output;
  std::remove(path.c_str());
}

// rx frames carry the IPv4 ID solved from the ICRC, so a foreign sender's packets
// check in the file too.
TEST(Capture, ReceivedPacketCarriesTheSolvedIpv4Id) {
  const int raw = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
  if (raw < 0) GTEST_SKIP() << "raw sockets need CAP_NET_RAW";
  const std::string path = temp_pcap("foreign");
  std::string error;
  UdpConfig config;
  config.address = testing::test_address(42);
  auto udp = UdpTransport::open(config, error);
  ASSERT_NE(udp, nullptr) << error;
  auto b = open_capture(std::move(udp), path, error);
  ASSERT_NE(b, nullptr) << error;
  const wire::IpUdpInfo info{.src = wire::gid_from_ipv4(0x7f000001), .dst = b->local_gid(),
                             .src_port = 0xC321, .dst_port = 4791, .ipv4_id = 0xbeef,
                             .ipv4_df = false};
  auto payload = make_packet(wire::op::kRcAcknowledge, 0x11, 9);
  wire::write_icrc(info, payload);
  std::vector<uint8_t> datagram(48);
  datagram.resize(wire::build_ip_udp_headers(info, payload.size(), datagram));
  datagram.insert(datagram.end(), payload.begin(), payload.end());
  sockaddr_in dst{AF_INET, 0, {htonl(wire::gid_to_ipv4(b->local_gid()))}, {}};
  sendto(raw, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst);
  close(raw);
  ASSERT_EQ(testing::receive(*b, 1).size(), 1u);
  b.reset();  // closes the file
  const test::RoceCapture capture = test::read_roce_pcap(path);
  ASSERT_EQ(capture.packets.size(), 1u);
  EXPECT_EQ(capture.packets[0].ip.ipv4_id, 0xbeef);
  EXPECT_FALSE(capture.packets[0].ip.ipv4_df);
  expect_every_icrc_checks(path, 1);
  expect_tshark_clean(path, 1);
  std::remove(path.c_str());
}

TEST(Capture, UnwritablePathFailsAndLeavesTheTransportToTheCaller) {
  FakeNetwork net;
  std::unique_ptr<Transport> t = net.attach(ipv4_gid(10, 0, 0, 1));
  std::string error;
  EXPECT_EQ(open_capture(std::move(t), "/nonexistent-dir/x.pcap", error), nullptr);
  EXPECT_NE(error.find("/nonexistent-dir/x.pcap"), std::string::npos) << error;
  EXPECT_NE(t, nullptr) << "still the caller's";
}

TEST(Capture, WritersOnSeveralThreadsProduceWholeRecords) {
  const std::string path = temp_pcap("threads");
  std::string error;
  auto writer = PcapWriter::open(path, error, PcapWriter::FlushPolicy::kPeriodic);
  ASSERT_NE(writer, nullptr) << error;
  auto write_many = [&](uint8_t host) {
    const wire::IpUdpInfo info{.src = ipv4_gid(10, 0, 0, host), .dst = ipv4_gid(10, 0, 0, 9),
                               .src_port = 0xC000};
    for (uint32_t psn = 0; psn < 500; ++psn) {
      auto bytes = make_packet(wire::op::kRcSendOnly, 1, psn, psn % 300);
      wire::write_icrc(info, bytes);
      writer->write_roce(info, bytes);
    }
  };
  std::thread t1(write_many, 1), t2(write_many, 2);
  t1.join();
  t2.join();
  writer.reset();  // flushes on close
  expect_every_icrc_checks(path, 1000);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace softrdma::transport
