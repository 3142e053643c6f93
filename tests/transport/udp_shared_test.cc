// A shared address (docs/decisions/host-rnic.md): UDP transports of one address in
// its SO_REUSEPORT group learn their indices from probes, and the steering program
// takes each packet to the member whose QPN block it names.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <span>

#include "transport/transport_test_util.h"
#include "transport/udp/handover.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::transport {
namespace {

using testing::make_packet;
using testing::receive;
using testing::test_address;

struct Member {
  std::atomic<uint64_t> nonce{0};
  std::atomic<int> index{-1};
  SharedAddress shared;
  std::unique_ptr<udp::Handover> handover;
  std::unique_ptr<UdpTransport> transport;

  // Serves QPN block `block` (its slot, as a registry would give it out).
  void open(const std::string& address, uint32_t block) {
    shared.probe_nonce = [this] { return nonce.load(); };
    shared.learned_index = [this](uint32_t i) { index.store(int(i)); };
    std::string why;
    handover = udp::Handover::open("udp-shared-test/" + address, block, why);
    ASSERT_NE(handover, nullptr) << why;
    shared.handover = handover.get();
    // Each block's packets to the socket of the same number (one block a member).
    shared.handover_slot = [](uint32_t b) { return b == 5 || b == 9 ? b : 0u; };
    UdpConfig config;
    config.address = address;
    config.shared = &shared;
    std::string error;
    transport = UdpTransport::open(config, error);
    ASSERT_NE(transport, nullptr) << error;
    transport->own_block(block);
  }
};

class SharedUdp : public ::testing::Test {
 protected:
  void SetUp() override {
    address_ = test_address(40);
    a_.open(address_, 5);
    b_.open(address_, 9);
    a_.nonce = b_.nonce = kNonce;
    // The group's program carries the probe rule: without one the kernel hashes
    // every probe (one 4-tuple) to the same member.
    ASSERT_EQ(a_.transport->steer({}), 0);
  }
  // Turns both members' receive paths until both know their index (probes are
  // taken there); false when they did not within the bound.
  bool learn() {
    for (int turn = 0; turn < 500 && (a_.index < 0 || b_.index < 0); ++turn) {
      receive(*a_.transport, 1, 10);
      receive(*b_.transport, 1, 10);
    }
    return a_.index >= 0 && b_.index >= 0;
  }

  // A transport on another loopback address that sends to the group.
  static std::unique_ptr<UdpTransport> open_sender(int host) {
    UdpConfig config;
    config.address = test_address(host);
    std::string error;
    auto sender = UdpTransport::open(config, error);
    EXPECT_NE(sender, nullptr) << error;
    return sender;
  }

  static constexpr uint64_t kNonce = 0xfeedull;
  std::string address_;
  Member a_, b_;
};

TEST_F(SharedUdp, ProbesTeachEachMemberItsIndex) {
  ASSERT_EQ(a_.transport->send_probes(2, kNonce), 0);
  ASSERT_TRUE(learn());
  EXPECT_EQ(a_.index, 0);  // join order
  EXPECT_EQ(b_.index, 1);
  EXPECT_EQ(a_.transport->probes_read() + b_.transport->probes_read(), 2u);
}

TEST_F(SharedUdp, PacketsReachTheMemberOfTheirQpnBlock) {
  ASSERT_EQ(b_.transport->send_probes(2, kNonce), 0);
  ASSERT_TRUE(learn());
  const std::vector<udp::SlotIndex> members{{5, uint32_t(a_.index.load())},
                                            {9, uint32_t(b_.index.load())}};
  ASSERT_EQ(a_.transport->steer(members), 0);
  auto sender = open_sender(41);
  ASSERT_NE(sender, nullptr);
  for (uint32_t block : {9u, 5u, 9u}) {
    std::vector<uint8_t> bytes = make_packet(wire::op::kRcSendOnly, block << 14 | 3, 1, 64);
    TxPacket packet{bytes, sender->local_gid(), a_.transport->local_gid(), roce_source_port(7)};
    ASSERT_EQ(sender->tx_burst({&packet, 1}), 1u);
    UdpTransport& owner = block == 9 ? *b_.transport : *a_.transport;
    UdpTransport& other = block == 9 ? *a_.transport : *b_.transport;
    const auto got = receive(owner, 1);
    ASSERT_EQ(got.size(), 1u) << "block " << block;
    EXPECT_EQ(got[0].bytes.size(), bytes.size());
    EXPECT_TRUE(receive(other, 1, 50).empty()) << "block " << block;
  }
}

// Steered to the wrong member (the program sends everything to a): a hands the
// packet over, and b receives it, its ICRC checked, as if from its own socket.
TEST_F(SharedUdp, APacketAtTheWrongMemberIsHandedOverToItsOwner) {
  ASSERT_EQ(a_.transport->send_probes(2, kNonce), 0);
  ASSERT_TRUE(learn());
  const std::vector<udp::SlotIndex> everything_to_a{{9, uint32_t(a_.index.load())}};
  ASSERT_EQ(a_.transport->steer(everything_to_a), 0);
  auto sender = open_sender(42);
  ASSERT_NE(sender, nullptr);
  std::vector<uint8_t> bytes = make_packet(wire::op::kRcSendOnly, 9u << 14 | 1, 77, 200);
  TxPacket packet{bytes, sender->local_gid(), a_.transport->local_gid(), roce_source_port(1)};
  ASSERT_EQ(sender->tx_burst({&packet, 1}), 1u);
  EXPECT_TRUE(receive(*a_.transport, 1, 200).empty());  // a keeps nothing of block 9
  const auto got = receive(*b_.transport, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(testing::psn_of(got[0].bytes), 77u);
  EXPECT_EQ(got[0].meta.src, sender->local_gid());
  EXPECT_EQ(a_.transport->handed_over(), 1u);
  EXPECT_EQ(b_.handover->counters().received.load(), 1u);
  // A block nobody holds: dropped and counted where it arrived.
  std::vector<uint8_t> stray = make_packet(wire::op::kRcSendOnly, 77u << 14 | 1, 1, 8);
  const std::vector<udp::SlotIndex> stray_to_a{{77, uint32_t(a_.index.load())}};
  ASSERT_EQ(a_.transport->steer(stray_to_a), 0);
  TxPacket lost{stray, sender->local_gid(), a_.transport->local_gid(), roce_source_port(1)};
  ASSERT_EQ(sender->tx_burst({&lost, 1}), 1u);
  for (int turn = 0; turn < 200 && a_.transport->no_owner() == 0; ++turn) receive(*a_.transport, 1, 10);
  EXPECT_EQ(a_.transport->no_owner(), 1u);
}

// A burst for one owner that arrived at another member: handed over in as many
// datagrams as the owner's queue needs, not one each, so that the owner, which is
// not reading meanwhile, loses none (its queue holds about 11 datagrams; one a
// packet lost most of these 60 before).
TEST_F(SharedUdp, ABurstHandedOverWhileItsOwnerIsBusyIsKeptWhole) {
  ASSERT_EQ(a_.transport->send_probes(2, kNonce), 0);
  ASSERT_TRUE(learn());
  const std::vector<udp::SlotIndex> everything_to_a{{9, uint32_t(a_.index.load())}};
  ASSERT_EQ(a_.transport->steer(everything_to_a), 0);
  auto sender = open_sender(44);
  ASSERT_NE(sender, nullptr);
  constexpr uint32_t kPackets = 60;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TxPacket> packets;
  for (uint32_t psn = 0; psn < kPackets; ++psn)
    bytes.push_back(make_packet(wire::op::kRcSendOnly, 9u << 14 | 1, psn, 1024));
  for (auto& b : bytes)
    packets.push_back(
        TxPacket{b, sender->local_gid(), a_.transport->local_gid(), roce_source_port(1)});
  ASSERT_EQ(sender->tx_burst(packets), kPackets);
  // a takes them all first (b reads nothing meanwhile), then b.
  for (int turn = 0; turn < 500 && a_.transport->handed_over() < kPackets; ++turn)
    receive(*a_.transport, 1, 10);
  EXPECT_EQ(a_.transport->handed_over(), kPackets);
  EXPECT_EQ(a_.transport->no_owner(), 0u);
  const auto got = receive(*b_.transport, kPackets);
  ASSERT_EQ(got.size(), kPackets);
  for (uint32_t psn = 0; psn < kPackets; ++psn) EXPECT_EQ(testing::psn_of(got[psn].bytes), psn);
}

// A packet to QP1 (a CM MAD) is for the process mad_slot names, whichever member
// the kernel hashed it to (block 0 is nobody's in the program); QP0's, and a MAD
// mad_slot gives to nobody, stay where they arrived.
TEST_F(SharedUdp, AMadReachesTheMemberItNames) {
  std::atomic<int> asked{0};
  // The PSN stands for what the MAD names (wire/cm_route.h): 9 is b's, 0 nobody's.
  const auto named = [&](std::uint32_t self) {
    return [&asked, self](std::span<uint8_t> packet) {
      ++asked;
      const uint32_t slot = testing::psn_of(packet);
      return slot == self ? 0u : slot;
    };
  };
  a_.shared.mad_slot = named(5);
  b_.shared.mad_slot = named(9);
  auto sender = open_sender(43);
  ASSERT_NE(sender, nullptr);
  for (int i = 0; i < 8; ++i) {  // from 8 source ports: the kernel spreads them
    std::vector<uint8_t> mad = make_packet(wire::op::kUdSendOnly, 1, 9, 256);
    TxPacket packet{mad, sender->local_gid(), a_.transport->local_gid(), roce_source_port(i)};
    ASSERT_EQ(sender->tx_burst({&packet, 1}), 1u);
  }
  size_t at_b = 0;
  for (int turn = 0; turn < 500 && at_b < 8; ++turn) {
    EXPECT_TRUE(receive(*a_.transport, 1, 2).empty()) << "a keeps no MAD of b's";
    at_b += receive(*b_.transport, 8, 2).size();
  }
  EXPECT_EQ(at_b, 8u);
  EXPECT_EQ(asked.load(), 8);                  // asked once per MAD, where it arrived
  EXPECT_EQ(b_.transport->handed_over(), 0u);  // b kept its own
  // Nobody's MAD and QP0's packet: kept by whichever member got them.
  for (uint32_t qpn : {1u, 0u}) {
    std::vector<uint8_t> bytes = make_packet(wire::op::kUdSendOnly, qpn, 0, 256);
    TxPacket packet{bytes, sender->local_gid(), a_.transport->local_gid(), roce_source_port(3)};
    ASSERT_EQ(sender->tx_burst({&packet, 1}), 1u);
    size_t got = 0;
    for (int turn = 0; turn < 500 && got == 0; ++turn)
      got = receive(*a_.transport, 1, 2).size() + receive(*b_.transport, 1, 2).size();
    EXPECT_EQ(got, 1u) << "qpn " << qpn;
  }
  EXPECT_EQ(asked.load(), 9);  // QP0's packet asks nobody
  EXPECT_EQ(a_.transport->no_owner() + b_.transport->no_owner(), 0u);
}

TEST_F(SharedUdp, AProbeOfAnotherRoundChangesNothing) {
  ASSERT_EQ(a_.transport->send_probes(2, kNonce + 1), 0);
  for (int turn = 0; turn < 500 && a_.transport->probes_ignored() + b_.transport->probes_ignored() < 2;
       ++turn) {
    receive(*a_.transport, 1, 10);
    receive(*b_.transport, 1, 10);
  }
  EXPECT_EQ(a_.transport->probes_ignored() + b_.transport->probes_ignored(), 2u);
  EXPECT_EQ(a_.index, -1);
  EXPECT_EQ(b_.index, -1);
}

TEST(SharedUdpAddress, MustBeNamed) {
  SharedAddress shared;
  UdpConfig config;
  config.shared = &shared;
  std::string error;
  EXPECT_EQ(UdpTransport::open(config, error), nullptr);
  EXPECT_NE(error.find("shared address"), std::string::npos) << error;
}

}  // namespace
}  // namespace softrdma::transport
