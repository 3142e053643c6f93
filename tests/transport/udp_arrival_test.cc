// When a datagram arrived (RxPacket::arrival_ns): the kernel's receive timestamp
// (SO_TIMESTAMPNS) on the engine's clock (CLOCK_MONOTONIC), so that the congestion
// control's round trip ends at the arrival and not when a busy or descheduled
// process got round to the packet (docs/decisions/congestion-control.md, "Host
// delay").
#include <arpa/inet.h>
#include <poll.h>
#include <time.h>

#include <gtest/gtest.h>

#include "transport/transport_test_util.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::transport {
namespace {

using testing::make_packet;
using testing::open_udp_at;
using testing::receive;
using testing::test_address;

int64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void send_one(UdpTransport& from, const UdpTransport& to, uint32_t psn) {
  auto bytes = make_packet(wire::op::kRcSendOnly, 0x11, psn, 64);
  TxPacket p{bytes, from.local_gid(), to.local_gid(), roce_source_port(0x11)};
  ASSERT_EQ(from.tx_burst({&p, 1}), 1u);
}

TEST(UdpArrival, APacketLeftWaitingInTheSocketSaysWhenItArrived) {
  auto a = open_udp_at(test_address(60));
  auto b = open_udp_at(test_address(61));
  ASSERT_TRUE(a && b);
  const int64_t before_send = monotonic_ns();
  send_one(*a, *b, 1);
  // Arrived (readable), then left there for 3 ms at least.
  pollfd readable{b->rx_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&readable, 1, 5000), 1) << "the packet never arrived";
  const int64_t arrived_by = monotonic_ns();
  while (monotonic_ns() - arrived_by < 3'000'000) {
  }
  auto got = receive(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GE(got[0].meta.arrival_ns, before_send) << "on CLOCK_MONOTONIC, after its sending";
  EXPECT_LE(got[0].meta.arrival_ns, arrived_by) << "when it arrived, not when it was taken";
}

}  // namespace
}  // namespace softrdma::transport
