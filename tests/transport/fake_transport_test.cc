// The fake network: delivery, the sent log, scripted drop/hold/duplicate, rx_fd.
#include "transport/fake/fake_network.h"

#include <poll.h>

#include <set>

#include <gtest/gtest.h>

#include "transport/transport_test_util.h"
#include "wire/icrc.h"

namespace softrdma::transport::fake {
namespace {

using testing::make_packet;
using testing::psn_of;

class FakeNetworkTest : public ::testing::Test {
 protected:
  // Sends one RC SEND_ONLY per PSN from a to b.
  void send_psns(std::initializer_list<uint32_t> psns, uint32_t qpn = 0x11) {
    for (uint32_t psn : psns) {
      auto bytes = make_packet(wire::op::kRcSendOnly, qpn, psn, 16);
      TxPacket p{bytes, a->local_gid(), b->local_gid(), roce_source_port(qpn)};
      ASSERT_EQ(a->tx_burst({&p, 1}), 1u);
    }
  }
  // The PSNs b receives now, in order.
  std::vector<uint32_t> received_psns() {
    std::vector<uint32_t> psns;
    std::vector<RxPacket> burst(8);
    while (size_t n = b->rx_burst(burst))
      for (size_t i = 0; i < n; ++i) psns.push_back(psn_of(burst[i].bytes));
    return psns;
  }
  static bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }

  FakeNetwork net;
  std::unique_ptr<FakeTransport> a = net.attach(ipv4_gid(10, 0, 0, 1));
  std::unique_ptr<FakeTransport> b = net.attach(ipv4_gid(10, 0, 0, 2));
};

TEST_F(FakeNetworkTest, DeliversInOrderWithAValidIcrc) {
  send_psns({1, 2, 3});
  std::vector<RxPacket> burst(8);
  ASSERT_EQ(b->rx_burst(burst), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(psn_of(burst[i].bytes), i + 1);
    EXPECT_EQ(burst[i].src, a->local_gid());
    EXPECT_EQ(burst[i].dst, b->local_gid());
    EXPECT_EQ(burst[i].src_port, roce_source_port(0x11));
    const wire::IpUdpInfo info{.src = burst[i].src, .dst = burst[i].dst,
                               .src_port = burst[i].src_port};
    EXPECT_TRUE(wire::check_icrc(info, burst[i].bytes)) << "as a real peer would compute it";
  }
  EXPECT_EQ(b->counters().rx_packets, 3u);
  EXPECT_EQ(a->counters().tx_packets, 3u);
}

TEST_F(FakeNetworkTest, SentLogReadsLikeAStory) {
  // The responder ACKs PSN 5.
  auto ack = make_packet(wire::op::kRcAcknowledge, 0x22, 5);
  TxPacket p{ack, b->local_gid(), a->local_gid(), roce_source_port(0x22)};
  b->tx_burst({&p, 1});
  // Expect: one ACK with PSN 5, to QP 0x22, delivered.
  auto sent = net.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode(), wire::op::kRcAcknowledge) << sent[0].summary();
  EXPECT_EQ(sent[0].psn(), 5u);
  EXPECT_EQ(sent[0].dest_qp(), 0x22u);
  EXPECT_EQ(sent[0].fate, Fate::kDelivered);
  EXPECT_NE(sent[0].summary().find("ACKNOWLEDGE"), std::string::npos) << sent[0].summary();
  EXPECT_TRUE(net.take_sent().empty()) << "take_sent clears the log";
}

TEST_F(FakeNetworkTest, DropsTheNextPacketWithAGivenPsn) {
  net.drop(match::psn(5));
  send_psns({3, 4, 5, 6, 5});
  EXPECT_EQ(received_psns(), (std::vector<uint32_t>{3, 4, 6, 5})) << "only the first PSN 5";
  const auto sent = net.take_sent();
  ASSERT_EQ(sent.size(), 5u);
  EXPECT_EQ(sent[2].fate, Fate::kDropped);
  EXPECT_EQ(sent[4].fate, Fate::kDelivered);
  EXPECT_EQ(net.stats().dropped, 1u);
}

TEST_F(FakeNetworkTest, DropRuleMatchesOpcodeAndQp) {
  net.drop(match::all_of({match::opcode(wire::op::kRcSendOnly), match::dest_qp(0x33)}),
           FakeNetwork::kEvery);
  send_psns({1, 2}, 0x33);
  send_psns({3}, 0x11);
  EXPECT_EQ(received_psns(), (std::vector<uint32_t>{3}));
}

TEST_F(FakeNetworkTest, HoldsPacketsAndReleasesThemReversed) {
  net.hold(match::any(), 3);
  send_psns({1, 2, 3, 4});
  EXPECT_EQ(net.held_count(), 3u);
  EXPECT_EQ(received_psns(), (std::vector<uint32_t>{4}));
  net.release_held_reversed();
  EXPECT_EQ(received_psns(), (std::vector<uint32_t>{3, 2, 1}));
  EXPECT_EQ(net.held_count(), 0u);
}

TEST_F(FakeNetworkTest, ReleasesChosenHeldPacketsInTheOrderGiven) {
  net.hold(match::any());
  send_psns({10, 11, 12, 13});
  ASSERT_EQ(net.held().size(), 4u);
  EXPECT_EQ(net.held()[2].psn(), 12u);
  net.release_held({2, 0});
  EXPECT_EQ(received_psns(), (std::vector<uint32_t>{12, 10}));
  EXPECT_EQ(net.held_count(), 2u) << "11 and 13 stay held";
  net.drop_held();
  EXPECT_EQ(net.held_count(), 0u);
  EXPECT_TRUE(received_psns().empty());
}

TEST_F(FakeNetworkTest, DuplicatesTheMatchingPacket) {
  net.duplicate(match::psn(7));
  send_psns({6, 7, 8});
  EXPECT_EQ(received_psns(), (std::vector<uint32_t>{6, 7, 7, 8}));
  EXPECT_EQ(net.stats().duplicated, 1u);
}

TEST_F(FakeNetworkTest, RxFdIsReadableExactlyWhilePacketsWait) {
  EXPECT_FALSE(readable(b->rx_fd()));
  send_psns({1, 2, 3});
  EXPECT_TRUE(readable(b->rx_fd()));
  std::vector<RxPacket> two(2);
  EXPECT_EQ(b->rx_burst(two), 2u);
  EXPECT_TRUE(readable(b->rx_fd())) << "one still waits";
  EXPECT_EQ(b->queued(), 1u);
  EXPECT_EQ(b->rx_burst(two), 1u);
  EXPECT_FALSE(readable(b->rx_fd()));
}

TEST_F(FakeNetworkTest, CorruptedPacketIsDroppedByTheReceiversIcrcCheck) {
  auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, 1, 32);
  TxPacket p{bytes, a->local_gid(), b->local_gid(), roce_source_port(0x11)};
  const BitError flip{0, 14, 0x01};
  a->tx_burst_with_errors({&p, 1}, {&flip, 1});
  const auto icrc_written = bytes;
  const auto sent = net.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].bytes[14], icrc_written[14] ^ 0x01) << "it left corrupted";
  EXPECT_TRUE(received_psns().empty());
  EXPECT_EQ(b->counters().rx_bad_icrc, 1u);
}

TEST_F(FakeNetworkTest, PacketToAnUnknownGidIsUndeliverable) {
  auto bytes = make_packet(wire::op::kRcSendOnly, 1, 1);
  TxPacket p{bytes, a->local_gid(), ipv4_gid(10, 9, 9, 9), 0xC000};
  a->tx_burst({&p, 1});
  EXPECT_EQ(net.stats().undeliverable, 1u);
  EXPECT_EQ(net.take_sent().at(0).fate, Fate::kUndeliverable);
}

TEST_F(FakeNetworkTest, InjectedPacketArrivesAsIfSent) {
  net.inject(ipv4_gid(10, 0, 0, 7), b->local_gid(), make_packet(wire::op::kRcSendOnly, 5, 99),
             0xC555);
  std::vector<RxPacket> burst(4);
  ASSERT_EQ(b->rx_burst(burst), 1u);
  EXPECT_EQ(burst[0].src, ipv4_gid(10, 0, 0, 7));
  EXPECT_EQ(burst[0].src_port, 0xC555);
  EXPECT_EQ(psn_of(burst[0].bytes), 99u);
}

TEST_F(FakeNetworkTest, ShortPacketIsRefusedAndCounted) {
  std::vector<uint8_t> tiny(8);
  TxPacket p{tiny, a->local_gid(), b->local_gid(), 0xC000};
  a->tx_burst({&p, 1});
  EXPECT_EQ(a->counters().tx_errors, 1u);
  EXPECT_EQ(net.sent_count(), 0u);
}

TEST(RoceSourcePort, IsInTheRoceRangeAndSpreadsQps) {
  std::set<uint16_t> ports;
  for (uint32_t qpn = 2; qpn < 1002; ++qpn) {
    const uint16_t port = roce_source_port(qpn);
    EXPECT_GE(port, 0xC000);
    ports.insert(port);
  }
  EXPECT_GT(ports.size(), 950u) << "consecutive QPNs get different ports";
  static_assert(roce_source_port(0x11) == roce_source_port(0x11));
}

}  // namespace
}  // namespace softrdma::transport::fake
