// An iWARP device's address (transport/udp/address_only.h): no UDP port held, so
// any number of processes' devices share one address, and the address is still
// checked to be this host's.
#include "transport/udp/address_only.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "wire/ip_udp.h"

namespace softrdma::transport {
namespace {

// An address of lo's 127/8 that no other test uses, from this process's pid.
std::string own_loopback_address() {
  const uint32_t pid = uint32_t(getpid());
  return "127.91." + std::to_string((pid >> 8) & 0xff) + "." + std::to_string(1 + pid % 250);
}

TEST(AddressOnlyTransport, SharesAnAddressWhoseUdp4791IsHeld) {
  const std::string address = own_loopback_address();
  // Another process's RoCE device, as far as the kernel can tell.
  const int held = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(wire::kRoceUdpPort);
  inet_pton(AF_INET, address.c_str(), &at.sin_addr);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&at), sizeof at), 0) << errno;
  UdpConfig config;
  config.address = address;
  std::string error;
  auto first = AddressOnlyTransport::open(config, error);
  ASSERT_NE(first, nullptr) << error;
  auto second = AddressOnlyTransport::open(config, error);
  ASSERT_NE(second, nullptr) << error;
  EXPECT_EQ(first->local_gid(), second->local_gid());
  EXPECT_EQ(wire::gid_to_ipv4(first->local_gid()), ntohl(at.sin_addr.s_addr));
  EXPECT_EQ(first->local_gids().size(), 1u);  // loopback: no link-local address
  EXPECT_EQ(first->rx_fd(), -1);
  EXPECT_NE(first->describe().find("no UDP port"), std::string::npos) << first->describe();
  close(held);
}

TEST(AddressOnlyTransport, WhatIsSentIsCountedAsRefused) {
  std::string error;
  auto transport = AddressOnlyTransport::open(UdpConfig{}, error);
  ASSERT_NE(transport, nullptr) << error;
  EXPECT_EQ(wire::gid_to_ipv4(transport->local_gid()) >> 24, 127u);  // the default
  TxPacket packets[2];
  EXPECT_EQ(transport->tx_burst(packets), 2u);
  EXPECT_EQ(transport->counters().tx_errors, 2u);
  RxPacket received[1];
  EXPECT_EQ(transport->rx_burst(received), 0u);
}

TEST(AddressOnlyTransport, AnAddressNotOfThisHostIsRefusedWithItsName) {
  UdpConfig config;
  config.address = "192.0.2.77";  // TEST-NET-1: never a local address
  std::string error;
  EXPECT_EQ(AddressOnlyTransport::open(config, error), nullptr);
  EXPECT_NE(error.find("192.0.2.77"), std::string::npos) << error;
  config.address = "0.0.0.0";
  EXPECT_EQ(AddressOnlyTransport::open(config, error), nullptr);
  EXPECT_NE(error.find("wildcard"), std::string::npos) << error;
  config.address = "not-an-address";
  EXPECT_EQ(AddressOnlyTransport::open(config, error), nullptr);
  EXPECT_NE(error.find("not an IPv4 or IPv6 address"), std::string::npos) << error;
}

}  // namespace
}  // namespace softrdma::transport
