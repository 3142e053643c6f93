// The fault injector: settings, random rates within statistical bounds, scripted
// rules, rx-side faults, timed release through rx_fd, and corruption that the
// receiver's ICRC check catches (over the fake network and over UDP).
#include "transport/fake/fault_injector.h"

#include <poll.h>

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "transport/fake/fake_network.h"
#include "transport/transport_test_util.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::transport {
namespace {

using fake::FakeNetwork;
using fake::FakeTransport;
using fake::ipv4_gid;
using testing::make_packet;
using testing::psn_of;

BytePredicate psn_is(uint32_t psn) {
  return [psn](std::span<const uint8_t> bytes) { return psn_of(bytes) == psn; };
}

FaultSettings settings_of(std::string_view text) {
  std::string error;
  auto s = FaultSettings::parse(text, error);
  EXPECT_TRUE(s.has_value()) << error;
  return s.value_or(FaultSettings{});
}

// a (wrapped in a FaultInjector with a fake clock) sends to b over a FakeNetwork.
class FaultInjectorTest : public ::testing::Test {
 protected:
  void wrap_sender(const FaultSettings& settings) {
    auto a = net_.attach(ipv4_gid(10, 0, 0, 1));
    a_ = a.get();
    injector_ = std::make_unique<FaultInjector>(std::move(a), settings, [this] { return now_; });
  }
  void send(uint32_t first_psn, uint32_t count) {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<TxPacket> burst;
    for (uint32_t i = 0; i < count; ++i)
      bytes.push_back(make_packet(wire::op::kRcSendOnly, 0x11, first_psn + i, 8));
    for (auto& b : bytes) burst.push_back(TxPacket{b, a_->local_gid(), b_->local_gid(), 0xC011});
    ASSERT_EQ(injector_->tx_burst(burst), burst.size());
  }
  void send_psns(std::initializer_list<uint32_t> psns) {
    for (uint32_t psn : psns) send(psn, 1);
  }
  std::vector<uint32_t> received(Transport& t) {
    std::vector<uint32_t> psns;
    std::vector<RxPacket> burst(64);
    while (size_t n = t.rx_burst(burst))
      for (size_t i = 0; i < n; ++i) psns.push_back(psn_of(burst[i].bytes));
    return psns;
  }
  std::vector<uint32_t> received() { return received(*b_); }
  // Sends n packets in bursts of 64, then lets every held packet fall due.
  std::vector<uint32_t> run_traffic(uint32_t n) {
    std::vector<uint32_t> psns;
    for (uint32_t sent = 0; sent < n; sent += 64) {
      send(sent, std::min<uint32_t>(64, n - sent));
      now_ += 1000;
      for (uint32_t psn : received()) psns.push_back(psn);
    }
    now_ += 1'000'000'000;
    injector_->tx_burst({});  // releases what is due
    for (uint32_t psn : received()) psns.push_back(psn);
    return psns;
  }

  int64_t now_ = 1'000'000;
  FakeNetwork net_;
  std::unique_ptr<FakeTransport> b_ = net_.attach(ipv4_gid(10, 0, 0, 2));
  FakeTransport* a_ = nullptr;
  std::unique_ptr<FaultInjector> injector_;
};

TEST(FaultSettings, ParsesTheDocumentedExample) {
  const FaultSettings s =
      settings_of("loss=0.05,dup=0.01,reorder=0.02,delay_us=200,corrupt=0.001,seed=42,dir=tx");
  EXPECT_DOUBLE_EQ(s.loss, 0.05);
  EXPECT_DOUBLE_EQ(s.dup, 0.01);
  EXPECT_DOUBLE_EQ(s.reorder, 0.02);
  EXPECT_DOUBLE_EQ(s.corrupt, 0.001);
  EXPECT_EQ(s.delay_us, 200u);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.direction, FaultDirection::kTx);
  EXPECT_TRUE(s.any());
  const FaultSettings again = settings_of(s.to_string());
  EXPECT_EQ(again.to_string(), s.to_string());
  EXPECT_EQ(settings_of(" dir=both , jitter_us=5 ").direction, FaultDirection::kBoth);
  EXPECT_FALSE(settings_of("").any());
}

TEST(FaultSettings, RejectsUnknownKeysAndValuesOutOfRange) {
  for (const char* bad : {"loss=1.5", "loss=-0.1", "loss=abc", "bogus=1", "dir=up", "seed=-1",
                          "delay_us=1.5", "loss"}) {
    std::string error;
    EXPECT_FALSE(FaultSettings::parse(bad, error).has_value()) << bad;
    EXPECT_NE(error.find("SOFTRDMA_FAULTS"), std::string::npos) << error;
  }
}

// Issue 6 defect 6: a key given twice ("loss=0.1,loss=0.5") is refused, not
// silently decided for one of them.
TEST(FaultSettings, RejectsARepeatedKey) {
  for (const char* bad : {"loss=0.1,loss=0.5", "seed=1,dup=0.1,seed=2", "dir=tx, dir=rx"}) {
    std::string error;
    EXPECT_FALSE(FaultSettings::parse(bad, error).has_value()) << bad;
    EXPECT_NE(error.find("more than once"), std::string::npos) << error;
  }
  std::string error;
  EXPECT_TRUE(FaultSettings::parse("loss=0.1,dup=0.1,seed=2", error).has_value()) << error;
}

TEST(WrapWithFaults, WrapsOnlyWhenAFaultIsConfigured) {
  FakeNetwork net;
  std::unique_ptr<Transport> t = net.attach(ipv4_gid(10, 0, 0, 1));
  Transport* raw = t.get();
  std::string error;
  t = wrap_with_faults(std::move(t), "seed=3", error);
  EXPECT_EQ(t.get(), raw) << "nothing to inject: the transport itself";
  EXPECT_EQ(wrap_with_faults(std::move(t), "loss=2", error), nullptr);
  ASSERT_EQ(t.get(), raw) << "left untouched on a parse error";
  t = wrap_with_faults(std::move(t), "loss=0.5", error);
  EXPECT_NE(dynamic_cast<FaultInjector*>(t.get()), nullptr);
}

struct RateCase {
  const char* settings;
  double rate;
};
class FaultRates : public FaultInjectorTest, public ::testing::WithParamInterface<RateCase> {};

// Over N packets each fault happens within 5 standard deviations of N·p, and what
// the receiver sees matches the injector's counters exactly.
TEST_P(FaultRates, StayWithinStatisticalBoundsAndAccountForEveryPacket) {
  constexpr uint32_t kPackets = 20000;
  wrap_sender(settings_of(GetParam().settings));
  const std::vector<uint32_t> got = run_traffic(kPackets);
  const FaultCounters::Side c = injector_->fault_counters().tx;
  const double p = GetParam().rate;
  const double bound = 5 * std::sqrt(kPackets * p * (1 - p));
  const uint64_t faults = c.dropped + c.duplicated + c.corrupted + c.reordered;
  EXPECT_EQ(c.packets, kPackets);
  EXPECT_NEAR(double(faults), kPackets * p, bound) << GetParam().settings;
  EXPECT_GT(faults, 0u);
  EXPECT_EQ(got.size(), kPackets - c.dropped - c.corrupted + c.duplicated);
  EXPECT_EQ(b_->counters().rx_bad_icrc, c.corrupted) << "every corrupted packet caught by ICRC";
  uint64_t late = 0;  // arrived after a higher PSN
  uint32_t highest = 0;
  for (uint32_t psn : got) {
    late += psn < highest;
    highest = std::max(highest, psn);
  }
  EXPECT_EQ(late, c.reordered);
  EXPECT_EQ(injector_->pending(), 0u);
}

INSTANTIATE_TEST_SUITE_P(EachFault, FaultRates,
                         ::testing::Values(RateCase{"loss=0.05,seed=42", 0.05},
                                           RateCase{"dup=0.02,seed=42", 0.02},
                                           RateCase{"corrupt=0.01,seed=42", 0.01},
                                           RateCase{"reorder=0.03,seed=42", 0.03}));

TEST_F(FaultInjectorTest, SameSeedSameFaultsAndRatesDoNotMoveEachOther) {
  auto lost = [this](const char* settings) {
    FakeNetwork net;
    auto a = net.attach(ipv4_gid(10, 0, 0, 1));
    auto b = net.attach(ipv4_gid(10, 0, 0, 2));
    FaultInjector injector(std::move(a), settings_of(settings), [] { return int64_t(1); });
    std::set<uint32_t> missing;
    for (uint32_t psn = 0; psn < 2000; ++psn) {
      auto bytes = make_packet(wire::op::kRcSendOnly, 1, psn);
      TxPacket p{bytes, injector.local_gid(), b->local_gid(), 0xC001};
      injector.tx_burst({&p, 1});
      std::vector<RxPacket> rx(4);
      if (b->rx_burst(rx) == 0) missing.insert(psn);
    }
    return missing;
  };
  const auto first = lost("loss=0.1,seed=7");
  EXPECT_EQ(lost("loss=0.1,seed=7"), first);
  EXPECT_NE(lost("loss=0.1,seed=8"), first);
  EXPECT_EQ(lost("loss=0.1,corrupt=0,dup=0.3,seed=7"), first) << "dup draws its own numbers";
}

TEST_F(FaultInjectorTest, ScriptedDropHitsOnlyTheMatchingPacketsCountTimes) {
  wrap_sender(FaultSettings{});
  injector_->add_rule({FaultDirection::kTx, psn_is(5), FaultAction::kDrop, 1});
  send_psns({4, 5, 6, 5});
  EXPECT_EQ(received(), (std::vector<uint32_t>{4, 6, 5}));
  EXPECT_EQ(injector_->fault_counters().tx.dropped, 1u);
}

TEST_F(FaultInjectorTest, ScriptedDuplicateDeliversTwice) {
  wrap_sender(FaultSettings{});
  injector_->add_rule({FaultDirection::kTx, psn_is(3), FaultAction::kDuplicate, 1});
  send_psns({2, 3, 4});
  EXPECT_EQ(received(), (std::vector<uint32_t>{2, 3, 3, 4}));
}

TEST_F(FaultInjectorTest, ScriptedReorderSendsThePacketAfterTheNextOne) {
  wrap_sender(FaultSettings{});
  injector_->add_rule({FaultDirection::kTx, psn_is(2), FaultAction::kReorder, 1});
  send_psns({1, 2});
  EXPECT_EQ(received(), (std::vector<uint32_t>{1})) << "2 waits for a successor";
  send_psns({3, 4});
  EXPECT_EQ(received(), (std::vector<uint32_t>{3, 2, 4}));
}

TEST_F(FaultInjectorTest, ReorderedPacketLeavesAfterItsHoldTimeWithoutSuccessor) {
  wrap_sender(FaultSettings{});
  injector_->add_rule({FaultDirection::kTx, psn_is(9), FaultAction::kReorder, 1});
  send_psns({9});
  EXPECT_TRUE(received().empty());
  now_ += FaultInjector::kReorderHoldUs * 1000;
  injector_->tx_burst({});
  EXPECT_EQ(received(), (std::vector<uint32_t>{9}));
}

TEST_F(FaultInjectorTest, ScriptedDelayHoldsThePacketUntilDue) {
  wrap_sender(FaultSettings{});
  injector_->add_rule({FaultDirection::kTx, psn_is(1), FaultAction::kDelay, 1, 500});
  send_psns({1, 2});
  EXPECT_EQ(received(), (std::vector<uint32_t>{2}));
  EXPECT_EQ(injector_->pending(), 1u);
  now_ += 499'000;
  injector_->tx_burst({});
  EXPECT_TRUE(received().empty());
  now_ += 1000;
  injector_->tx_burst({});
  EXPECT_EQ(received(), (std::vector<uint32_t>{1}));
}

TEST_F(FaultInjectorTest, TxCorruptionIsCaughtByTheReceiversIcrcCheck) {
  wrap_sender(FaultSettings{});
  injector_->add_rule({FaultDirection::kTx, psn_is(4), FaultAction::kCorrupt, 1});
  auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, 4, 8);
  const auto before = bytes;
  TxPacket p{bytes, a_->local_gid(), b_->local_gid(), 0xC011};
  injector_->tx_burst({&p, 1});
  EXPECT_TRUE(std::equal(before.begin(), before.end() - 4, bytes.begin()))
      << "the caller's buffer is not corrupted (it may retransmit from it)";
  send_psns({5});
  EXPECT_EQ(received(), (std::vector<uint32_t>{5}));
  EXPECT_EQ(b_->counters().rx_bad_icrc, 1u);
  EXPECT_EQ(injector_->fault_counters().tx.corrupted, 1u);
}

TEST_F(FaultInjectorTest, RxSideRulesActOnReceivedPackets) {
  auto a = net_.attach(ipv4_gid(10, 0, 0, 1));
  FaultInjector rx(std::move(b_), FaultSettings{}, [this] { return now_; });
  rx.add_rule({FaultDirection::kRx, psn_is(2), FaultAction::kDrop, 1});
  rx.add_rule({FaultDirection::kRx, psn_is(3), FaultAction::kCorrupt, 1});
  rx.add_rule({FaultDirection::kRx, psn_is(4), FaultAction::kDuplicate, 1});
  rx.add_rule({FaultDirection::kTx, psn_is(5), FaultAction::kDrop, 1});  // tx rule: not here
  for (uint32_t psn = 1; psn <= 5; ++psn) {
    auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, psn, 8);
    TxPacket p{bytes, a->local_gid(), rx.local_gid(), 0xC011};
    a->tx_burst({&p, 1});
  }
  EXPECT_EQ(received(rx), (std::vector<uint32_t>{1, 4, 4, 5}));
  const FaultCounters c = rx.fault_counters();
  EXPECT_EQ(c.rx.dropped, 1u);
  EXPECT_EQ(c.rx.corrupted, 1u);
  EXPECT_EQ(rx.counters().rx_bad_icrc, 1u) << "the corrupted one failed the ICRC re-check";
}

// Timed release needs no caller: rx_fd() becomes readable when a held packet is
// due, and rx_burst (which a progress loop calls then) releases it.
TEST(FaultInjectorTimer, HeldRxPacketMakesRxFdReadableWhenDue) {
  FakeNetwork net;
  auto a = net.attach(ipv4_gid(10, 0, 0, 1));
  FaultInjector rx(net.attach(ipv4_gid(10, 0, 0, 2)), FaultSettings{});
  rx.add_rule({FaultDirection::kRx, psn_is(1), FaultAction::kDelay, 1, 3000});
  auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, 1, 8);
  TxPacket p{bytes, a->local_gid(), rx.local_gid(), 0xC011};
  a->tx_burst({&p, 1});
  std::vector<RxPacket> burst(4);
  ASSERT_EQ(rx.rx_burst(burst), 0u) << "held for 3 ms";
  pollfd fd{rx.rx_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&fd, 1, 5000), 1) << "the timer made rx_fd readable";
  EXPECT_EQ(rx.rx_burst(burst), 1u);
}

TEST(FaultInjectorTimer, DelayedTxPacketIsReleasedFromRxBurstWhenTheTimerFires) {
  FakeNetwork net;
  auto b = net.attach(ipv4_gid(10, 0, 0, 2));
  FaultInjector tx(net.attach(ipv4_gid(10, 0, 0, 1)), FaultSettings{});
  tx.add_rule({FaultDirection::kTx, psn_is(1), FaultAction::kDelay, 1, 2000});
  auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, 1, 8);
  TxPacket p{bytes, tx.local_gid(), b->local_gid(), 0xC011};
  tx.tx_burst({&p, 1});
  EXPECT_EQ(b->queued(), 0u);
  pollfd fd{tx.rx_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&fd, 1, 5000), 1);
  std::vector<RxPacket> burst(4);
  tx.rx_burst(burst);
  EXPECT_EQ(b->queued(), 1u);
}

// A transport that refuses everything until told otherwise.
class RefusingTransport final : public Transport {
 public:
  size_t tx_burst(std::span<TxPacket> packets) override {
    const size_t n = std::min(packets.size(), accept);
    accept -= n;
    for (size_t i = 0; i < n; ++i) sent.push_back(psn_of(packets[i].bytes));
    return n;
  }
  size_t rx_burst(std::span<RxPacket>) override { return 0; }
  int rx_fd() const override { return -1; }
  Gid local_gid() const override { return ipv4_gid(10, 0, 0, 1); }
  TransportCounters counters() const override { return {}; }
  std::string describe() const override { return "refusing"; }
  size_t accept = 0;
  std::vector<uint32_t> sent;
};

TEST(FaultInjectorBacklog, KeepsWhatTheInnerTransportRefusesAndSendsItInOrder) {
  auto inner = std::make_unique<RefusingTransport>();
  RefusingTransport* refusing = inner.get();
  FaultInjector injector(std::move(inner), settings_of("delay_us=0"));
  std::vector<std::vector<uint8_t>> bytes;
  for (uint32_t psn = 1; psn <= 3; ++psn)
    bytes.push_back(make_packet(wire::op::kRcSendOnly, 1, psn));
  std::vector<TxPacket> burst;
  for (auto& b : bytes) burst.push_back(TxPacket{b, {}, ipv4_gid(10, 0, 0, 2), 0xC001});
  EXPECT_EQ(injector.tx_burst(burst), 3u) << "the injector never pushes back";
  EXPECT_EQ(injector.pending(), 3u);
  refusing->accept = 100;
  auto later = make_packet(wire::op::kRcSendOnly, 1, 4);
  TxPacket p{later, {}, ipv4_gid(10, 0, 0, 2), 0xC001};
  injector.tx_burst({&p, 1});
  EXPECT_EQ(refusing->sent, (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(injector.pending(), 0u);
}

// Over real sockets: tx-side corruption after the ICRC is caught by the UDP
// receiver's ICRC check.
TEST(FaultInjectorOverUdp, CorruptionIsCaughtByTheUdpReceiver) {
  UdpConfig config;
  std::string error;
  config.address = testing::test_address(30);
  auto a = UdpTransport::open(config, error);
  config.address = testing::test_address(31);
  auto b = UdpTransport::open(config, error);
  ASSERT_TRUE(a && b) << error;
  const Gid a_gid = a->local_gid(), b_gid = b->local_gid();
  FaultInjector injector(std::move(a), FaultSettings{});
  injector.add_rule({FaultDirection::kTx, psn_is(1), FaultAction::kCorrupt, 1});
  for (uint32_t psn = 1; psn <= 2; ++psn) {
    auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, psn, 100);
    TxPacket p{bytes, a_gid, b_gid, roce_source_port(0x11)};
    ASSERT_EQ(injector.tx_burst({&p, 1}), 1u);
  }
  const auto got = testing::receive(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(psn_of(got[0].bytes), 2u);
  EXPECT_TRUE(testing::receive_for(*b, 100).empty());
  EXPECT_EQ(b->counters().rx_bad_icrc, 1u);
}

}  // namespace
}  // namespace softrdma::transport
