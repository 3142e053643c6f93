// The ICRC computed over a packet in pieces (IcrcStream, compute_icrc_gathered), as
// a sender that gathers the payload from registered memory into the socket call
// does: always the same value as compute_icrc over the packet laid out contiguously.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "wire/icrc.h"
#include "wire/packet.h"
#include "wire/test_packets.h"

namespace softrdma::wire {
namespace {

using testing::random_ipv4_info;
using testing::random_ipv6_info;
using testing::random_packet;
using testing::random_valid_opcode;

// Cuts `bytes` into random pieces (empty ones included) pointing into it.
std::vector<iovec> random_pieces(std::mt19937_64& rng, std::span<const uint8_t> bytes) {
  std::vector<iovec> pieces;
  size_t at = 0;
  while (at < bytes.size() || rng() % 4 == 0) {
    const size_t n = std::min<size_t>(bytes.size() - at, rng() % 1500);
    pieces.push_back({const_cast<uint8_t*>(bytes.data() + at), n});
    at += n;
    if (at == bytes.size() && rng() % 2 == 0) break;
  }
  return pieces;
}

// The packet as the engine will send it: headers (BTH and extension headers) from
// its own buffer, then payload and pad gathered from elsewhere.
TEST(IcrcGatheredTest, PiecesGiveTheContiguousIcrc) {
  std::mt19937_64 rng(21);
  for (int round = 0; round < 3000; ++round) {
    const IpUdpInfo info = rng() % 2 ? random_ipv4_info(rng) : random_ipv6_info(rng);
    const uint8_t opcode = random_valid_opcode(rng);
    const std::vector<uint8_t> p = random_packet(rng, opcode, rng() % 5000);
    const size_t header_bytes = kOpcodes[opcode].header_bytes;
    const std::span<const uint8_t> all(p);
    const std::span<const uint8_t> rest =
        all.subspan(header_bytes, p.size() - header_bytes - kIcrcBytes);
    const std::vector<iovec> pieces = random_pieces(rng, rest);
    ASSERT_EQ(compute_icrc_gathered(info, all.first(header_bytes), pieces),
              compute_icrc(info, p))
        << "opcode " << int(opcode) << ", " << p.size() << " bytes, round " << round;
  }
}

// Headers cut anywhere after the BTH (the stream does not care where pieces end).
TEST(IcrcGatheredTest, StreamFedByteRunsGivesTheContiguousIcrc) {
  std::mt19937_64 rng(22);
  for (int round = 0; round < 500; ++round) {
    const IpUdpInfo info = random_ipv4_info(rng);
    std::vector<uint8_t> p = random_packet(rng, random_valid_opcode(rng), rng() % 300);
    write_icrc(info, p);
    const std::span<const uint8_t> all(p);
    IcrcStream icrc(info, all.first<kBthBytes>(), p.size());
    for (size_t at = kBthBytes; at < p.size() - kIcrcBytes;) {
      const size_t n = std::min<size_t>(p.size() - kIcrcBytes - at, 1 + rng() % 40);
      icrc.add(all.subspan(at, n));
      at += n;
    }
    ASSERT_EQ(icrc.finish(), stored_icrc(p)) << round;
  }
}

TEST(IcrcGatheredTest, FewerOrMoreBytesThanAnnouncedGiveNoIcrc) {
  std::mt19937_64 rng(23);
  const IpUdpInfo info = random_ipv4_info(rng);
  const std::vector<uint8_t> p = random_packet(rng, op::kRcSendOnly, 100);
  const std::span<const uint8_t> all(p);
  const std::span<const uint8_t> rest = all.subspan(kBthBytes, p.size() - kBthBytes - kIcrcBytes);

  IcrcStream short_of_one(info, all.first<kBthBytes>(), p.size());
  short_of_one.add(rest.first(rest.size() - 1));
  EXPECT_EQ(short_of_one.finish(), std::nullopt);

  IcrcStream one_too_many(info, all.first<kBthBytes>(), p.size() - 1);
  one_too_many.add(rest);
  EXPECT_EQ(one_too_many.finish(), std::nullopt);

  IcrcStream exact(info, all.first<kBthBytes>(), p.size());
  exact.add(rest);
  EXPECT_EQ(exact.finish(), compute_icrc(info, p));
}

TEST(IcrcGatheredTest, OutOfRangeLengthsGiveNoIcrc) {
  std::mt19937_64 rng(24);
  const IpUdpInfo info = random_ipv4_info(rng);
  const std::vector<uint8_t> p = random_packet(rng, op::kRcSendOnly, 0);
  const std::span<const uint8_t> bth = std::span<const uint8_t>(p).first(kBthBytes);
  // Headers shorter than a BTH.
  EXPECT_EQ(compute_icrc_gathered(info, bth.first(kBthBytes - 1), {}), std::nullopt);
  // More than a UDP datagram can carry (65507 bytes of payload).
  std::vector<uint8_t> big(65507 - kBthBytes - kIcrcBytes + 1);
  const iovec too_big{big.data(), big.size()};
  EXPECT_EQ(compute_icrc_gathered(info, bth, {&too_big, 1}), std::nullopt);
  const iovec largest{big.data(), big.size() - 1};
  EXPECT_NE(compute_icrc_gathered(info, bth, {&largest, 1}), std::nullopt);
}

}  // namespace
}  // namespace softrdma::wire
