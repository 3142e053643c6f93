// Transports per peer (docs/decisions/threading.md "Transports per peer"): a QP's
// packets leave through the first extra transport that reaches its peer, else
// through the primary one; the send batch never mixes two transports in a burst.
#include <gtest/gtest.h>

#include "engine/device.h"
#include "engine/roce/tx_batch.h"
#include "transport/fake/fake_network.h"
#include "wire/opcodes.h"

namespace softrdma::engine {
namespace {

using transport::Gid;
using transport::fake::FakeNetwork;
using transport::fake::ipv4_gid;

// Stands for a same-host transport: reaches one peer only, sends through `inner`
// and counts what it was given; receives nothing of its own.
class OnlyTo final : public transport::Transport {
 public:
  OnlyTo(transport::Transport& inner, Gid peer) : inner_(inner), peer_(peer) {}
  size_t tx_burst(std::span<transport::TxPacket> packets) override {
    sent += packets.size();
    return inner_.tx_burst(packets);
  }
  size_t rx_burst(std::span<transport::RxPacket>) override {
    ++polled;
    return 0;
  }
  int rx_fd() const override { return -1; }
  Gid local_gid() const override { return inner_.local_gid(); }
  transport::TransportCounters counters() const override { return {}; }
  std::string describe() const override { return "only-to"; }
  bool reaches(const Gid& dst) const override { return dst == peer_; }

  size_t sent = 0;
  size_t polled = 0;

 private:
  transport::Transport& inner_;
  Gid peer_;
};

class RoutingTest : public ::testing::Test {
 protected:
  FakeNetwork net_;
  Gid a_ = ipv4_gid(10, 0, 0, 1), b_ = ipv4_gid(10, 0, 0, 2), c_ = ipv4_gid(10, 0, 0, 3);
  std::unique_ptr<transport::fake::FakeTransport> primary_ = net_.attach(a_);
  std::unique_ptr<transport::fake::FakeTransport> peer_b_ = net_.attach(b_);
  std::unique_ptr<transport::fake::FakeTransport> peer_c_ = net_.attach(c_);
  OnlyTo to_b_{*primary_, b_};
};

TEST_F(RoutingTest, ThePeerAnExtraTransportReachesGoesThroughIt) {
  Device device(DeviceConfig{}, *primary_);
  EXPECT_EQ(&device.route(b_), primary_.get()) << "no extra transport yet: the primary";
  device.add_transport(to_b_);
  EXPECT_EQ(&device.route(b_), &to_b_);
  EXPECT_EQ(&device.route(c_), primary_.get()) << "a peer it does not reach: the primary";
  device.progress();
  EXPECT_EQ(to_b_.polled, 1u) << "an extra transport is received from each turn";
}

TEST_F(RoutingTest, ABurstNeverMixesTransports) {
  EngineCounters counters;
  roce::TxBatch batch(counters);
  batch.add(to_b_, wire::op::kRcSendOnly, 8, a_, b_, 0xC000);
  batch.add(to_b_, wire::op::kRcSendOnly, 8, a_, b_, 0xC000);
  EXPECT_EQ(to_b_.sent, 0u) << "batched until flushed";
  batch.add(*primary_, wire::op::kRcSendOnly, 8, a_, c_, 0xC000);
  EXPECT_EQ(to_b_.sent, 2u) << "the packets for the other transport went first";
  batch.flush();
  const auto sent = net_.take_sent();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].dst, b_);
  EXPECT_EQ(sent[1].dst, b_);
  EXPECT_EQ(sent[2].dst, c_);
  EXPECT_EQ(counters.tx_packets.load(), 3u);
}

}  // namespace
}  // namespace softrdma::engine
