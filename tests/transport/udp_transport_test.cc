// The UDP transport: addressing, bursts over loopback, ICRC checks, and the facts
// of this kernel it relies on (IPv4 ID 0 for unconnected DF sockets), by capture.
#include "transport/udp/udp_transport.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "support/pcap_reader.h"
#include "transport/interface_capture.h"
#include "transport/transport_test_util.h"
#include "wire/icrc.h"

namespace softrdma::transport {
namespace {

using testing::make_packet;
using testing::receive;
using testing::test_address;
using testing::InterfaceCapture;

std::unique_ptr<UdpTransport> open_at(const std::string& address, UdpConfig config = {}) {
  config.address = address;
  std::string error;
  auto t = UdpTransport::open(config, error);
  EXPECT_NE(t, nullptr) << error;
  return t;
}

TxPacket to(const UdpTransport& from, const UdpTransport& dst, std::vector<uint8_t>& bytes,
            uint32_t qpn) {
  return TxPacket{bytes, from.local_gid(), dst.local_gid(), roce_source_port(qpn)};
}

TEST(DefaultLoopbackAddress, IsPerProcessLoopbackAndNever127001) {
  const uint32_t first = default_loopback_address_for(12345, 0);
  EXPECT_EQ(first, (127u << 24) | 12345u) << "attempt 0 spells the pid";
  EXPECT_EQ(default_loopback_address(0), default_loopback_address_for(uint32_t(getpid()), 0));
  EXPECT_NE(default_loopback_address_for(1, 0), 0x7f000001u) << "pid 1 must not get 127.0.0.1";
  EXPECT_NE(default_loopback_address_for(0, 0), 0x7f000000u);
  std::vector<uint32_t> seen;
  for (unsigned attempt = 0; attempt < kLoopbackAttempts; ++attempt) {
    const uint32_t a = default_loopback_address_for(4242, attempt);
    EXPECT_EQ(a >> 24, 127u);
    EXPECT_NE(a, 0x7f000001u);
    EXPECT_NE(a, 0x7fffffffu);
    EXPECT_EQ(a, default_loopback_address_for(4242, attempt)) << "deterministic";
    seen.push_back(a);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end()) << "attempts differ";
}

TEST(UdpTransport, DefaultAddressingGivesEachTransportItsOwnLoopbackAddress) {
  std::string error;
  auto a = UdpTransport::open(UdpConfig{}, error);
  ASSERT_NE(a, nullptr) << error;
  // The second one finds the first's address held (EADDRINUSE) and moves on.
  auto b = UdpTransport::open(UdpConfig{}, error);
  ASSERT_NE(b, nullptr) << error;
  EXPECT_NE(a->local_gid(), b->local_gid());
  EXPECT_TRUE(wire::gid_is_ipv4(a->local_gid()));
  EXPECT_EQ(wire::gid_to_ipv4(a->local_gid()) >> 24, 127u);
  EXPECT_EQ(wire::gid_to_ipv4(a->local_gid()), default_loopback_address(0));
  EXPECT_NE(a->describe().find(":4791"), std::string::npos) << a->describe();
}

TEST(UdpTransport, HeldPortFailsWithAMessageSayingWhatToDo) {
  const std::string address = test_address(1);
  auto first = open_at(address);
  ASSERT_NE(first, nullptr);
  std::string error;
  UdpConfig config;
  config.address = address;
  EXPECT_EQ(UdpTransport::open(config, error), nullptr);
  EXPECT_NE(error.find(address), std::string::npos) << error;
  EXPECT_NE(error.find("4791"), std::string::npos) << error;
  EXPECT_NE(error.find("SOFTRDMA_ADDR"), std::string::npos) << error;
}

TEST(UdpTransport, RejectsWhatIsNotAnAddress) {
  std::string error;
  UdpConfig config;
  config.address = "not-an-address";
  EXPECT_EQ(UdpTransport::open(config, error), nullptr);
  EXPECT_NE(error.find("not-an-address"), std::string::npos) << error;
}

TEST(UdpTransport, TwoTransportsExchangeBursts) {
  auto a = open_at(test_address(2));
  auto b = open_at(test_address(3));
  ASSERT_TRUE(a && b);
  std::vector<std::vector<uint8_t>> bytes;
  for (uint32_t i = 0; i < 40; ++i)
    bytes.push_back(make_packet(wire::op::kRcSendOnly, 0x11, i, 1 + 97 * i, uint8_t(i)));
  std::vector<TxPacket> burst;
  for (auto& b_ : bytes) burst.push_back(to(*a, *b, b_, 0x11));
  ASSERT_EQ(a->tx_burst(burst), burst.size());

  const auto got = receive(*b, bytes.size());
  ASSERT_EQ(got.size(), bytes.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].bytes, bytes[i]) << "packet " << i << " (ICRC written in the sender's buffer)";
    EXPECT_EQ(got[i].meta.src, a->local_gid());
    EXPECT_EQ(got[i].meta.dst, b->local_gid()) << "IP_PKTINFO";
    EXPECT_EQ(got[i].meta.src_port, roce_source_port(0x11)) << "per-QP source port";
    EXPECT_EQ(got[i].meta.ipv4_id, 0) << "the ICRC matched with ID 0";
  }
  EXPECT_EQ(a->source_port_sockets(), 1u);
  EXPECT_EQ(a->counters().tx_packets, bytes.size());
  EXPECT_EQ(b->counters().rx_packets, bytes.size());
  EXPECT_EQ(b->counters().rx_bad_icrc, 0u);
  EXPECT_EQ(b->counters().rx_ipv4_id_solved, 0u);
}

TEST(UdpTransport, CorruptedPacketIsDroppedAndCounted) {
  auto a = open_at(test_address(4));
  auto b = open_at(test_address(5));
  ASSERT_TRUE(a && b);
  auto good = make_packet(wire::op::kRcSendOnly, 7, 1, 64);
  auto bad = make_packet(wire::op::kRcSendOnly, 7, 2, 64);
  const auto bad_before = bad;
  std::vector<TxPacket> burst{to(*a, *b, bad, 7), to(*a, *b, good, 7)};
  const BitError flip{0, 20, 0x10};  // a payload bit flipped on the wire, after the ICRC
  ASSERT_EQ(a->tx_burst_with_errors(burst, {&flip, 1}), 2u);
  EXPECT_TRUE(std::equal(bad.begin(), bad.end() - 4, bad_before.begin()))
      << "the sender's buffer is left as it was (ICRC apart)";

  const auto got = receive(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(testing::psn_of(got[0].bytes), 1u) << "the good one";
  EXPECT_TRUE(testing::receive_for(*b, 100).empty());
  EXPECT_EQ(b->counters().rx_bad_icrc, 1u);
}

TEST(UdpTransport, ShortDatagramIsCountedAsTruncated) {
  auto b = open_at(test_address(6));
  ASSERT_TRUE(b);
  const int s = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in dst{AF_INET, htons(4791), {htonl(wire::gid_to_ipv4(b->local_gid()))}, {}};
  const uint8_t junk[7] = {1, 2, 3, 4, 5, 6, 7};
  ASSERT_EQ(sendto(s, junk, sizeof junk, 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst), 7);
  close(s);
  EXPECT_TRUE(testing::receive_for(*b, 100).empty());
  EXPECT_EQ(b->counters().rx_truncated, 1u);
}

TEST(UdpTransport, SendsFromItsOwnPortWhenTheQpPortIsHeld) {
  auto a = open_at(test_address(7));
  auto b = open_at(test_address(8));
  ASSERT_TRUE(a && b);
  // Someone else holds (a's address, the QP's source port).
  const int squatter = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in held{AF_INET, htons(roce_source_port(9)),
                   {htonl(wire::gid_to_ipv4(a->local_gid()))}, {}};
  ASSERT_EQ(bind(squatter, reinterpret_cast<sockaddr*>(&held), sizeof held), 0);
  auto bytes = make_packet(wire::op::kRcSendOnly, 9, 1, 8);
  TxPacket p = to(*a, *b, bytes, 9);
  ASSERT_EQ(a->tx_burst({&p, 1}), 1u);
  EXPECT_EQ(p.src_port, 4791) << "tx_burst reports the port actually used";
  const auto got = receive(*b, 1);
  close(squatter);
  ASSERT_EQ(got.size(), 1u) << "the ICRC was computed with the port actually used";
  EXPECT_EQ(got[0].meta.src_port, 4791);
  EXPECT_EQ(a->counters().tx_port_fallback, 1u);
}

TEST(UdpTransport, CapsSourcePortSockets) {
  UdpConfig config;
  config.max_source_port_sockets = 2;
  auto a = open_at(test_address(9), config);
  auto b = open_at(test_address(10));
  ASSERT_TRUE(a && b);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TxPacket> burst;
  for (uint32_t qpn = 100; qpn < 105; ++qpn)
    bytes.push_back(make_packet(wire::op::kUdSendOnly, 1, qpn, 4));
  for (uint32_t i = 0; i < 5; ++i) burst.push_back(to(*a, *b, bytes[i], 100 + i));
  ASSERT_EQ(a->tx_burst(burst), 5u);
  EXPECT_EQ(receive(*b, 5).size(), 5u);
  EXPECT_EQ(a->source_port_sockets(), 2u);
  EXPECT_EQ(a->counters().tx_port_fallback, 3u);
}

TEST(UdpTransport, ReportsTheEffectiveReceiveBuffer) {
  UdpConfig config;
  auto b = open_at(test_address(11), config);
  ASSERT_TRUE(b);
  const TransportCounters c = b->counters();
  EXPECT_EQ(c.rx_buffer_bytes, uint64_t(b->effective_rcvbuf_bytes()));
  EXPECT_GT(c.rx_buffer_bytes, 0u);
  // With CAP_NET_ADMIN, SO_RCVBUFFORCE passes net.core.rmem_max (the kernel doubles it).
  if (geteuid() == 0) {
    EXPECT_GE(c.rx_buffer_bytes, uint64_t(config.rcvbuf_bytes));
  }
  EXPECT_NE(b->describe().find(std::to_string(c.rx_buffer_bytes)), std::string::npos);
  RecordProperty("effective_rcvbuf_bytes", std::to_string(c.rx_buffer_bytes));
}

TEST(UdpTransport, ConcurrentSendersLoseNothing) {
  auto a = open_at(test_address(12));
  auto b = open_at(test_address(13));
  ASSERT_TRUE(a && b);
  constexpr uint32_t kPerThread = 300;
  auto sender = [&](uint32_t qpn) {
    for (uint32_t i = 0; i < kPerThread; ++i) {
      auto bytes = make_packet(wire::op::kRcSendOnly, qpn, i, 32);
      TxPacket p = to(*a, *b, bytes, qpn);
      while (a->tx_burst({&p, 1}) == 0) std::this_thread::yield();
    }
  };
  std::thread t1(sender, 1), t2(sender, 2);
  const auto got = receive(*b, 2 * kPerThread);
  t1.join();
  t2.join();
  ASSERT_EQ(got.size(), 2 * kPerThread);
  EXPECT_EQ(a->source_port_sockets(), 2u);
  // Per QP, order is kept (one socket per source port).
  uint32_t next[3] = {0, 0, 0};
  for (const auto& r : got) {
    const uint32_t qpn = r.bytes[7];
    EXPECT_EQ(testing::psn_of(r.bytes), next[qpn]++);
  }
}

TEST(UdpTransport, Ipv6LoopbackCarriesItsOwnIcrc) {
  UdpConfig config;
  config.address = "::1";
  std::string error;
  auto a = UdpTransport::open(config, error);
  if (!a) GTEST_SKIP() << "no IPv6 loopback here: " << error;
  EXPECT_FALSE(wire::gid_is_ipv4(a->local_gid()));
  EXPECT_NE(a->describe().find("[::1]:4791"), std::string::npos) << a->describe();
  auto bytes = make_packet(wire::op::kRcSendOnly, 3, 77, 100);
  TxPacket p{bytes, a->local_gid(), a->local_gid(), roce_source_port(3)};
  ASSERT_EQ(a->tx_burst({&p, 1}), 1u);
  const auto got = receive(*a, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes, bytes);
  EXPECT_EQ(a->counters().rx_bad_icrc, 0u);
}

// Linux Soft-RoCE sends UDP checksum 0 over IPv6 too (RoCEv2 lets the ICRC protect
// the packet), which Linux drops on an IPv6 socket unless UDP_NO_CHECK6_RX is set.
TEST(UdpTransport, Ipv6PacketWithZeroUdpChecksumIsAccepted) {
  UdpConfig config;
  config.address = "::1";
  std::string error;
  auto b = UdpTransport::open(config, error);
  if (!b) GTEST_SKIP() << "no IPv6 loopback here: " << error;
  const int s = socket(AF_INET6, SOCK_DGRAM, 0);
  int on = 1;
  ASSERT_EQ(setsockopt(s, SOL_UDP, UDP_NO_CHECK6_TX, &on, sizeof on), 0);
  sockaddr_in6 local{};
  local.sin6_family = AF_INET6;
  local.sin6_addr = in6addr_loopback;
  socklen_t length = sizeof local;
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&local), sizeof local), 0);
  ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&local), &length), 0);
  const wire::IpUdpInfo info{.src = b->local_gid(), .dst = b->local_gid(),
                             .src_port = ntohs(local.sin6_port), .dst_port = 4791};
  auto bytes = make_packet(wire::op::kRcSendOnly, 5, 6, 24);
  wire::write_icrc(info, bytes);
  sockaddr_in6 dst = local;
  dst.sin6_port = htons(4791);
  ASSERT_EQ(sendto(s, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst),
            ssize_t(bytes.size()));
  close(s);
  EXPECT_EQ(receive(*b, 1).size(), 1u);
}

// DESIGN.md §3 trap 1, measured: the ICRC covers the IPv4 Identification, which the
// kernel writes. Linux's ip_select_ident puts 0 there for a socket with DF set and
// no connected peer — what UdpTransport's send sockets are.
TEST(KernelFacts, UnconnectedDfSocketSendsIpv4IdZero) {
  InterfaceCapture capture;
  std::string why;
  if (!capture.open("lo", 4791, why, false, ntohl(inet_addr(test_address(14).c_str()))))
    GTEST_SKIP() << "cannot capture on lo (needs CAP_NET_RAW): " << why;
  auto a = open_at(test_address(14));
  auto b = open_at(test_address(15));
  ASSERT_TRUE(a && b);
  for (uint32_t qpn : {0x11u, 0x12u}) {  // two source-port sockets, several packets each
    for (uint32_t psn = 0; psn < 3; ++psn) {
      auto bytes = make_packet(wire::op::kRcSendOnly, qpn, psn, 40 + psn);
      TxPacket p = to(*a, *b, bytes, qpn);
      ASSERT_EQ(a->tx_burst({&p, 1}), 1u);
      const auto frame = capture.next(a->local_gid());
      ASSERT_TRUE(frame.has_value()) << "captured nothing from " << a->describe();
      EXPECT_EQ(frame->ip.ipv4_id, 0) << "qpn " << qpn << " psn " << psn;
      EXPECT_TRUE(frame->ip.ipv4_df);
      EXPECT_EQ(frame->ip.src_port, roce_source_port(qpn));
      EXPECT_TRUE(wire::check_icrc(frame->ip, frame->udp_payload))
          << "the ICRC checks against the header the kernel really sent";
    }
  }
}

// Why the sockets stay unconnected: a connected socket gets a per-socket counter
// in the ID (inet_id), which a sender cannot know when it computes the ICRC.
TEST(KernelFacts, ConnectedSocketPutsACounterInTheIpv4Id) {
  const auto src = wire::gid_from_ipv4(ntohl(inet_addr(test_address(16).c_str())));
  const int s = socket(AF_INET, SOCK_DGRAM, 0);
  int df = IP_PMTUDISC_DO;
  setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df);
  sockaddr_in local{AF_INET, 0, {htonl(wire::gid_to_ipv4(src))}, {}};
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&local), sizeof local), 0);
  // A listening peer, so that no ICMP port-unreachable fails the second send.
  const int listener = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in peer{AF_INET, 0, {htonl(wire::gid_to_ipv4(src))}, {}};
  socklen_t length = sizeof peer;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&peer), sizeof peer), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&peer), &length), 0);
  const uint16_t port = ntohs(peer.sin_port);
  InterfaceCapture capture;
  std::string why;
  if (!capture.open("lo", port, why))
    GTEST_SKIP() << "cannot capture on lo (needs CAP_NET_RAW): " << why;
  ASSERT_EQ(connect(s, reinterpret_cast<sockaddr*>(&peer), sizeof peer), 0);
  const char data[20] = {};
  ASSERT_EQ(send(s, data, sizeof data, 0), 20);
  const auto first = capture.next(src);
  ASSERT_EQ(send(s, data, sizeof data, 0), 20);
  const auto second = capture.next(src);
  close(s);
  close(listener);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(uint16_t(first->ip.ipv4_id + 1), second->ip.ipv4_id);
  RecordProperty("connected_first_id", first->ip.ipv4_id);
}

// A sender that is not softrdma (Linux Soft-RoCE) puts a varying ID: the receiver
// solves for it (DESIGN.md §3 trap 2) and reports it.
TEST(UdpTransport, SolvesTheIdOfAForeignSender) {
  const int raw = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);  // IP_HDRINCL: we write the header
  if (raw < 0) GTEST_SKIP() << "raw sockets need CAP_NET_RAW: " << strerror(errno);
  auto b = open_at(test_address(17));
  ASSERT_TRUE(b);
  const wire::IpUdpInfo info{.src = wire::gid_from_ipv4(ntohl(inet_addr(test_address(18).c_str()))),
                             .dst = b->local_gid(), .src_port = 0xC123, .dst_port = 4791,
                             .ipv4_id = 0x1234, .ipv4_df = true};
  auto payload = make_packet(wire::op::kRcSendOnly, 0x11, 5, 64);
  wire::write_icrc(info, payload);
  std::vector<uint8_t> datagram(48);
  datagram.resize(wire::build_ip_udp_headers(info, payload.size(), datagram));
  datagram.insert(datagram.end(), payload.begin(), payload.end());
  sockaddr_in dst{AF_INET, 0, {htonl(wire::gid_to_ipv4(b->local_gid()))}, {}};
  ASSERT_EQ(sendto(raw, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&dst),
                   sizeof dst),
            ssize_t(datagram.size()));
  close(raw);
  const auto got = receive(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].meta.ipv4_id, 0x1234);
  EXPECT_TRUE(got[0].meta.ipv4_df);
  EXPECT_EQ(b->counters().rx_ipv4_id_solved, 1u);
}

// Issue 6 defect 5: the wildcard, multicast and broadcast addresses are refused
// with a message that says why; binding the wildcard would take port 4791 on every
// address and keep every other softrdma process from opening its device.
TEST(UdpTransport, WildcardMulticastAndBroadcastAddressesAreRefused) {
  for (const char* address : {"0.0.0.0", "224.0.0.1", "239.1.2.3", "255.255.255.255", "::",
                              "ff02::1"}) {
    UdpConfig config;
    config.address = address;
    std::string error;
    EXPECT_EQ(UdpTransport::open(config, error), nullptr) << address;
    EXPECT_NE(error.find("SOFTRDMA_ADDR"), std::string::npos) << error;
    EXPECT_NE(error.find(address), std::string::npos) << error;
  }
  // And the process's own addresses still open.
  EXPECT_NE(open_at(test_address(40)), nullptr);
}

}  // namespace
}  // namespace softrdma::transport
