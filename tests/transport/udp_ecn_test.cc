// ECN on the UDP transport (docs/decisions/congestion-control.md): packets leave
// ECT(0) unless UdpConfig::ecn is off, and a datagram that arrives marked CE (RFC
// 3168) is reported as such (RxPacket::congestion_experienced, rx_ce_marked), its
// ICRC intact (RoCEv2 A17.8 masks the TOS byte). Plain sockets stand for the
// network: one reads the TOS byte a packet arrived with, one sends with a TOS set.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "transport/transport_test_util.h"
#include "transport/udp/udp_transport.h"
#include "wire/icrc.h"

namespace softrdma::transport {
namespace {

using testing::make_packet;
using testing::receive;
using testing::test_address;

std::unique_ptr<UdpTransport> open_at(const std::string& address, bool ecn = true) {
  UdpConfig config;
  config.address = address;
  config.ecn = ecn;
  std::string error;
  auto t = UdpTransport::open(config, error);
  EXPECT_NE(t, nullptr) << error;
  return t;
}

sockaddr_in endpoint(const std::string& address, uint16_t port) {
  return sockaddr_in{AF_INET, htons(port), {inet_addr(address.c_str())}, {}};
}

// The TOS byte of the next datagram to arrive at a socket bound to address:4791.
class TosReader {
 public:
  explicit TosReader(const std::string& address) {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    int on = 1;
    setsockopt(fd_, IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
    timeval limit{5, 0};  // a bound against hanging, not a speed assertion
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    sockaddr_in at = endpoint(address, wire::kRoceUdpPort);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0;
  }
  ~TosReader() { close(fd_); }
  bool bound() const { return bound_; }
  int next_tos() {
    uint8_t data[2048];
    iovec iov{data, sizeof data};
    alignas(cmsghdr) uint8_t control[64];
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    if (recvmsg(fd_, &h, 0) < 0) return -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) return *CMSG_DATA(c);
    return -2;
  }

 private:
  int fd_ = -1;
  bool bound_ = false;
};

int tos_sent_by(UdpTransport& t, const std::string& to) {
  TosReader reader(to);
  EXPECT_TRUE(reader.bound());
  auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, 1, 64);
  TxPacket p{bytes, t.local_gid(), wire::gid_from_ipv4(ntohl(inet_addr(to.c_str()))),
             roce_source_port(0x11)};
  EXPECT_EQ(t.tx_burst({&p, 1}), 1u);
  return reader.next_tos();
}

TEST(UdpEcn, PacketsLeaveEcnCapableUnlessEcnIsOff) {
  auto on = open_at(test_address(40));
  ASSERT_TRUE(on);
  EXPECT_EQ(tos_sent_by(*on, test_address(41)), 0x02) << "ECT(0), DSCP 0";
  auto off = open_at(test_address(42), false);
  ASSERT_TRUE(off);
  EXPECT_EQ(tos_sent_by(*off, test_address(43)), 0x00) << "Not-ECT";
}

// A well-formed packet with its ICRC, sent from a plain socket whose TOS is `tos`
// (unconnected, DF: IPv4 ID 0, as the ICRC is computed).
void send_with_tos(const std::string& from, const UdpTransport& to, uint32_t psn, int tos) {
  const int s = socket(AF_INET, SOCK_DGRAM, 0);
  const int pmtu = IP_PMTUDISC_DO;
  setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  setsockopt(s, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  sockaddr_in local = endpoint(from, 0xC123);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&local), sizeof local), 0);
  const wire::IpUdpInfo info{.src = wire::gid_from_ipv4(ntohl(inet_addr(from.c_str()))),
                             .dst = to.local_gid(), .src_port = 0xC123,
                             .dst_port = wire::kRoceUdpPort, .ipv4_id = 0, .ipv4_df = true};
  auto payload = make_packet(wire::op::kRcSendOnly, 0x11, psn, 64);
  wire::write_icrc(info, payload);
  sockaddr_in dst{AF_INET, htons(wire::kRoceUdpPort), {htonl(wire::gid_to_ipv4(to.local_gid()))}, {}};
  ASSERT_EQ(sendto(s, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&dst),
                   sizeof dst),
            ssize_t(payload.size()));
  close(s);
}

TEST(UdpEcn, ADatagramMarkedCeIsReportedWithItsIcrcIntact) {
  auto b = open_at(test_address(44));
  ASSERT_TRUE(b);
  send_with_tos(test_address(45), *b, 1, 0x03);  // CE
  send_with_tos(test_address(45), *b, 2, 0x02);  // ECT(0): not congested
  const auto got = receive(*b, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].meta.congestion_experienced);
  EXPECT_FALSE(got[1].meta.congestion_experienced);
  EXPECT_EQ(b->counters().rx_ce_marked, 1u);
  EXPECT_EQ(b->counters().rx_bad_icrc, 0u);
}

}  // namespace
}  // namespace softrdma::transport
