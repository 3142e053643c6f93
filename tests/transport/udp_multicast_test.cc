// Multicast over the UDP transport (docs/decisions/multicast.md), on loopback:
// transports bound to different 127.x.y.z addresses that joined a group each get
// one copy of a datagram sent to it; one that did not join gets none.
#include <unistd.h>

#include <gtest/gtest.h>

#include "transport/transport_test_util.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::transport {
namespace {

using testing::make_packet;
using testing::open_udp_at;
using testing::receive;
using testing::receive_for;
using testing::test_address;

// A group of this test process's own (239/8, administratively scoped, RFC 2365):
// tests running in parallel processes on this host never share one.
Gid own_group(uint8_t salt) {
  const uint32_t pid = uint32_t(getpid());
  return wire::gid_from_ipv4((239u << 24) | ((pid & 0xffff) << 8) | salt);
}

size_t send_to(UdpTransport& from, const Gid& group, std::vector<uint8_t>& bytes) {
  TxPacket packet{bytes, from.local_gid(), group, roce_source_port(0x12)};
  return from.tx_burst({&packet, 1});
}

TEST(UdpMulticast, EveryJoinedTransportGetsOneCopyAndOthersNone) {
  auto a = open_udp_at(test_address(40));
  auto b = open_udp_at(test_address(41));
  auto sender = open_udp_at(test_address(42));
  ASSERT_TRUE(a && b && sender);
  const Gid group = own_group(1);
  ASSERT_EQ(a->join_group(group), 0);
  ASSERT_EQ(b->join_group(group), 0);
  auto bytes = make_packet(wire::op::kUdSendOnly, wire::kMulticastQpn, 7, 100);
  ASSERT_EQ(send_to(*sender, group, bytes), 1u);
  for (UdpTransport* t : {a.get(), b.get()}) {
    const auto got = receive(*t, 1);
    ASSERT_EQ(got.size(), 1u) << t->describe();
    EXPECT_EQ(got[0].bytes, bytes);
    EXPECT_EQ(got[0].meta.dst, group) << "IP_PKTINFO: the group, which the ICRC covers";
    EXPECT_EQ(got[0].meta.src, sender->local_gid());
    EXPECT_TRUE(receive_for(*t, 100).empty()) << "one copy, not one per socket of the host";
    EXPECT_EQ(t->counters().rx_bad_icrc, 0u);
  }
  EXPECT_TRUE(receive_for(*sender, 100).empty()) << "not joined: nothing";
}

// IP_MULTICAST_LOOP: a transport that joined gets what it sends itself (an attached
// QP of the sending process receives its own message, as with Soft-RoCE).
TEST(UdpMulticast, AJoinedSenderGetsItsOwnCopy) {
  auto a = open_udp_at(test_address(43));
  ASSERT_TRUE(a);
  const Gid group = own_group(2);
  ASSERT_EQ(a->join_group(group), 0);
  auto bytes = make_packet(wire::op::kUdSendOnly, wire::kMulticastQpn, 1, 10);
  ASSERT_EQ(send_to(*a, group, bytes), 1u);
  const auto got = receive(*a, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].meta.src, a->local_gid());
}

TEST(UdpMulticast, LeavingStopsDelivery) {
  auto a = open_udp_at(test_address(44));
  auto b = open_udp_at(test_address(45));
  ASSERT_TRUE(a && b);
  const Gid group = own_group(3);
  ASSERT_EQ(a->join_group(group), 0);
  ASSERT_EQ(a->join_group(group), 0) << "joined already: no error";
  EXPECT_EQ(a->groups_joined(), 1u);
  ASSERT_EQ(a->leave_group(group), 0);
  EXPECT_EQ(a->leave_group(group), ENOENT);
  EXPECT_EQ(a->groups_joined(), 0u);
  auto bytes = make_packet(wire::op::kUdSendOnly, wire::kMulticastQpn, 1, 10);
  ASSERT_EQ(send_to(*b, group, bytes), 1u);
  EXPECT_TRUE(receive_for(*a, 200).empty());
}

TEST(UdpMulticast, RefusesWhatItCannotJoin) {
  auto a = open_udp_at(test_address(46));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->join_group(a->local_gid()), EINVAL) << "not a multicast address";
  // The loopback interface carries no IPv6 multicast (measured: sendto ff0x::
  // through lo fails with ENETUNREACH), and an IPv4 address sends no IPv6.
  Gid v6{0xff, 0x0e};
  v6[15] = 1;
  EXPECT_EQ(a->join_group(v6), EOPNOTSUPP);
}

}  // namespace
}  // namespace softrdma::transport
