// A shared address (docs/decisions/host-rnic.md): UDP transports of one address in
// its SO_REUSEPORT group learn their indices from probes, and the steering program
// takes each packet to the member whose QPN block it names.
#include <gtest/gtest.h>

#include <atomic>

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
  UdpConfig sender_config;
  sender_config.address = test_address(41);
  std::string error;
  auto sender = UdpTransport::open(sender_config, error);
  ASSERT_NE(sender, nullptr) << error;
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
  UdpConfig sender_config;
  sender_config.address = test_address(42);
  std::string error;
  auto sender = UdpTransport::open(sender_config, error);
  ASSERT_NE(sender, nullptr) << error;
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
