// UDP_SEGMENT and UDP_GRO in the UDP transport (docs/decisions/gso-gro.md).
//
// KernelFacts: DESIGN.md §3 trap 1 for GSO. The kernel writes each datagram's
// IPv4 header when it cuts a GSO send, and the ICRC covers the Identification.
// On lo a GSO send is never cut (lo takes it whole), so the test makes a veth pair
// into a network namespace of its own and turns tx-udp-segmentation off on it:
// the kernel then cuts the send in software before the device, and an AF_PACKET
// socket on the device sees the real datagrams. Every one's ICRC must check
// against the header the kernel really wrote.
#include <arpa/inet.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "support/eventually.h"
#include "transport/interface_capture.h"
#include "transport/transport_test_util.h"
#include "transport/udp/udp_transport.h"
#include "wire/icrc.h"

namespace softrdma::transport {
namespace {

using testing::InterfaceCapture;
using testing::make_packet;
using testing::open_udp_at;
using testing::receive;
using testing::test_address;

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// A veth pair: `host` here with 10.77.N.1/24, its peer in namespace `ns` with
// 10.77.N.2/24; UDP segmentation offload off on the host side. Removed at the end.
class VethPair {
 public:
  VethPair() {
    const std::string id = std::to_string(getpid() % 200 + 20);
    ns_ = "srgso" + id;
    host_ = "srg" + id + "a";
    const std::string peer = "srg" + id + "b";
    local_ = "10.77." + id + ".1";
    remote_ = "10.77." + id + ".2";
    sh("ip netns del " + ns_);
    ok_ = sh("ip netns add " + ns_) == 0 &&
          sh("ip link add " + host_ + " type veth peer name " + peer + " netns " + ns_) == 0 &&
          sh("ip addr add " + local_ + "/24 dev " + host_) == 0 &&
          sh("ip link set " + host_ + " up") == 0 &&
          sh("ip netns exec " + ns_ + " ip addr add " + remote_ + "/24 dev " + peer) == 0 &&
          sh("ip netns exec " + ns_ + " ip link set " + peer + " up") == 0 &&
          sh("ethtool -K " + host_ + " tx-udp-segmentation off") == 0 && wait_until_up();
  }
  ~VethPair() {
    sh("ip link del " + host_);
    sh("ip netns del " + ns_);
  }
  bool ok() const { return ok_; }
  const std::string& host() const { return host_; }
  const std::string& local() const { return local_; }
  const std::string& remote() const { return remote_; }

 private:
  // A packet sent before the link is up is dropped: wait for the event (the
  // kernel's operstate), bounded against hanging.
  bool wait_until_up() const {
    return testing_support::eventually([&] {
      std::FILE* f = std::fopen(("/sys/class/net/" + host_ + "/operstate").c_str(), "r");
      char state[16] = {};
      if (f != nullptr) {
        if (std::fgets(state, sizeof state, f) == nullptr) state[0] = 0;
        std::fclose(f);
      }
      return std::string(state).rfind("up", 0) == 0;
    });
  }

  bool ok_ = false;
  std::string ns_, host_, local_, remote_;
};

wire::Gid gid_of(const std::string& ipv4) { return wire::gid_from_ipv4(ntohl(inet_addr(ipv4.c_str()))); }

TEST(KernelFacts, GsoSegmentsCarryConsecutiveIpv4Ids) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns / veth / ethtool";
  VethPair veth;
  if (!veth.ok()) GTEST_SKIP() << "cannot make a veth pair in a namespace here (ip, ethtool)";
  InterfaceCapture capture;
  std::string why;
  ASSERT_TRUE(capture.open(veth.host(), 4791, why, /*outgoing=*/true)) << why;
  auto a = open_udp_at(veth.local());
  ASSERT_TRUE(a);
  constexpr size_t kSegments = 6;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TxPacket> burst;
  for (uint32_t psn = 0; psn < kSegments; ++psn) {
    // Equal sizes but the last, below the veth's 1500-byte MTU.
    bytes.push_back(make_packet(wire::op::kRcSendMiddle, 0x21, psn, psn + 1 < kSegments ? 1024 : 300));
  }
  for (auto& b : bytes)
    burst.push_back(TxPacket{b, a->local_gid(), gid_of(veth.remote()), roce_source_port(0x21)});
  ASSERT_EQ(a->tx_burst(burst), kSegments);
  EXPECT_EQ(a->counters().tx_gso_sends, 1u) << "one send of several segments";
  EXPECT_EQ(a->counters().tx_gso_segments, kSegments);
  for (size_t i = 0; i < kSegments; ++i) {
    const auto frame = capture.next(a->local_gid());
    ASSERT_TRUE(frame.has_value()) << "segment " << i << " not seen on " << veth.host();
    EXPECT_EQ(frame->ip.ipv4_id, i) << "segment " << i;
    EXPECT_TRUE(frame->ip.ipv4_df);
    EXPECT_EQ(testing::psn_of(frame->udp_payload), i) << "in order";
    EXPECT_TRUE(wire::check_icrc(frame->ip, frame->udp_payload))
        << "segment " << i << ": the ICRC checks against the header the kernel wrote";
  }
}

// Over lo: a GSO run arrives as one coalesced datagram (UDP_GRO) and is taken
// apart into its packets, in order, each checked; a burst smaller than the
// datagram returns the rest on the next call.
TEST(UdpGsoGro, ARunArrivesAsItsPacketsAcrossSmallBursts) {
  auto a = open_udp_at(test_address(30));
  auto b = open_udp_at(test_address(31));
  ASSERT_TRUE(a && b);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TxPacket> burst;
  for (uint32_t psn = 0; psn < 10; ++psn)
    bytes.push_back(make_packet(wire::op::kRcSendMiddle, 0x22, psn, psn < 9 ? 4096 : 100));
  bytes.push_back(make_packet(wire::op::kRcAcknowledge, 0x23, 77));  // another size: a send of its own
  for (auto& x : bytes) burst.push_back(TxPacket{x, a->local_gid(), b->local_gid(), roce_source_port(0x22)});
  ASSERT_EQ(a->tx_burst(burst), burst.size());
  EXPECT_EQ(a->counters().tx_gso_sends, 1u);
  EXPECT_EQ(a->counters().tx_gso_segments, 10u);
  std::vector<RxPacket> small(3);
  std::vector<uint32_t> psns;
  const int64_t give_up = testing::now_ms() + 5000;
  while (psns.size() < burst.size() && testing::now_ms() < give_up) {
    const size_t n = b->rx_burst(small);
    EXPECT_LE(n, small.size());
    for (size_t i = 0; i < n; ++i) psns.push_back(testing::psn_of(small[i].bytes));
  }
  const std::vector<uint32_t> expected = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 77};
  EXPECT_EQ(psns, expected);
  EXPECT_EQ(b->counters().rx_bad_icrc, 0u);
  EXPECT_GE(b->counters().rx_gro_datagrams, 1u) << "the run was read as one datagram";
}

// A segment corrupted in flight is dropped and counted; its neighbours in the same
// coalesced datagram still arrive.
TEST(UdpGsoGro, ACorruptedSegmentIsDroppedAndTheOthersPass) {
  auto a = open_udp_at(test_address(32));
  auto b = open_udp_at(test_address(33));
  ASSERT_TRUE(a && b);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TxPacket> burst;
  for (uint32_t psn = 0; psn < 4; ++psn)
    bytes.push_back(make_packet(wire::op::kRcSendMiddle, 0x24, psn, 1024));
  for (auto& x : bytes) burst.push_back(TxPacket{x, a->local_gid(), b->local_gid(), roce_source_port(0x24)});
  const BitError flip{2, 40, 0x01};  // a payload byte, after the ICRC was written
  ASSERT_EQ(a->tx_burst_with_errors(burst, {&flip, 1}), 4u);
  const auto got = receive(*b, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(testing::psn_of(got[0].bytes), 0u);
  EXPECT_EQ(testing::psn_of(got[1].bytes), 1u);
  EXPECT_EQ(testing::psn_of(got[2].bytes), 3u);
  EXPECT_EQ(b->counters().rx_bad_icrc, 1u);
}

}  // namespace
}  // namespace softrdma::transport
