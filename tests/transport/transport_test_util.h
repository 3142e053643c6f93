// Helpers for the transport tests: building packets and receiving with a bound wait.
#pragma once

#include <arpa/inet.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/transport.h"
#include "transport/udp/udp_transport.h"
#include "wire/fields.h"
#include "wire/opcodes.h"
#include "wire/packet.h"

namespace softrdma::transport::testing {

// A well-formed RoCEv2 packet (P_Key 0xffff, payload bytes `fill`); ICRC not written.
inline std::vector<uint8_t> make_packet(uint8_t opcode, uint32_t qpn, uint32_t psn,
                                        size_t payload_len = 0, uint8_t fill = 0x5a) {
  if (!wire::kOpcodes[opcode].any(wire::kOpPayload)) payload_len = 0;
  std::vector<uint8_t> bytes(wire::packet_bytes(opcode, payload_len));
  wire::PacketView p = wire::build_packet(bytes, opcode, payload_len);
  p.set(wire::bth::kPkey, 0xffff);
  p.set(wire::bth::kDestQp, qpn);
  p.set(wire::bth::kPsn, psn);
  for (uint8_t& b : p.payload()) b = fill;
  return bytes;
}

inline uint32_t psn_of(std::span<const uint8_t> bytes) {
  return uint32_t(bytes[9]) << 16 | uint32_t(bytes[10]) << 8 | bytes[11];  // IBA 9.2 BTH
}

inline int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

// A received packet, copied out of the transport's buffers.
struct Received {
  std::vector<uint8_t> bytes;
  RxPacket meta;
};

// Receives until `count` packets arrived or `limit_ms` passed (a bound against
// hanging, not a speed assertion), waiting in poll() on rx_fd.
inline std::vector<Received> receive(Transport& t, size_t count, int limit_ms = 5000) {
  std::vector<Received> out;
  std::vector<RxPacket> burst(32);
  const int64_t give_up = now_ms() + limit_ms;
  while (out.size() < count && now_ms() < give_up) {
    const size_t n = t.rx_burst(burst);
    for (size_t i = 0; i < n; ++i)
      out.push_back({{burst[i].bytes.begin(), burst[i].bytes.end()}, burst[i]});
    if (n == 0) {
      pollfd p{t.rx_fd(), POLLIN, 0};
      poll(&p, 1, 20);
    }
  }
  return out;
}

// Drains whatever arrives within `ms` (for "nothing more came" checks).
inline std::vector<Received> receive_for(Transport& t, int ms) {
  return receive(t, SIZE_MAX, ms);
}

// A loopback address of this test process's own (DESIGN.md §6), so that tests
// running in parallel processes never collide.
inline std::string test_address(unsigned k) {
  const uint32_t a = default_loopback_address_for(uint32_t(getpid()), 1000 + k);
  in_addr in{htonl(a)};
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &in, text, sizeof text);
  return text;
}

// A UDP transport at `address` (a test address), or null with the reason reported.
inline std::unique_ptr<UdpTransport> open_udp_at(const std::string& address) {
  UdpConfig config;
  config.address = address;
  std::string error;
  auto t = UdpTransport::open(config, error);
  EXPECT_NE(t, nullptr) << error;
  return t;
}

}  // namespace softrdma::transport::testing
