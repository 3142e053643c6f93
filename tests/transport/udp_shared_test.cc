// A shared address (docs/decisions/host-rnic.md): UDP transports of one address in
// its SO_REUSEPORT group learn their indices from probes, and the steering program
// takes each packet to the member whose QPN block it names.
#include <gtest/gtest.h>

#include <atomic>

#include "transport/transport_test_util.h"
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
  std::unique_ptr<UdpTransport> transport;

  void open(const std::string& address) {
    shared.probe_nonce = [this] { return nonce.load(); };
    shared.learned_index = [this](uint32_t i) { index.store(int(i)); };
    UdpConfig config;
    config.address = address;
    config.shared = &shared;
    std::string error;
    transport = UdpTransport::open(config, error);
    ASSERT_NE(transport, nullptr) << error;
  }
};

class SharedUdp : public ::testing::Test {
 protected:
  void SetUp() override {
    address_ = test_address(40);
    a_.open(address_);
    b_.open(address_);
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
