// ICRC (IBA Annex A17.3.3): what it covers, what it masks, its byte order, and
// solving the IPv4 Identification that a receiving socket never sees.
#include "wire/icrc.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <vector>

#include "wire/crc32_gf2.h"
#include "wire/test_packets.h"

namespace softrdma::wire {
namespace {

using testing::random_ipv4_info;
using testing::random_ipv6_info;
using testing::random_packet;
using testing::random_valid_opcode;

std::vector<uint8_t> signed_packet(std::mt19937_64& rng, const IpUdpInfo& info,
                                   size_t payload_len) {
  std::vector<uint8_t> p = random_packet(rng, random_valid_opcode(rng), payload_len);
  write_icrc(info, p);
  return p;
}

TEST(Crc32Gf2Test, ByteTableMatchesZlib) {
  const z_crc_t* zlib_table = get_crc_table();
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(crc_math::kByteTable[i], zlib_table[i]) << i;
}

// Feeding n zero bytes multiplies by x^(8n); undo_zero_bytes must take it back.
TEST(Crc32Gf2Test, UndoZeroBytesInvertsFeedingZeros) {
  std::mt19937_64 rng(1);
  for (uint32_t n : {0u, 1u, 2u, 3u, 7u, 64u, 1000u, 4137u, 65535u, 70001u}) {
    const uint32_t start = uint32_t(rng());
    uint32_t r = start;
    for (uint32_t i = 0; i < n; ++i) r = (r >> 8) ^ crc_math::kByteTable[r & 0xff];
    EXPECT_EQ(crc_math::undo_zero_bytes(r, n), start) << n;
    if (n != 0) {
      EXPECT_NE(crc_math::undo_zero_bytes(r, n - 1), start) << n;
    }
  }
}

TEST(Crc32Gf2Test, TwoByteRegistersInvertForAllValues) {
  for (uint32_t v = 0; v <= 0xffff; ++v) {
    const uint32_t r = crc_math::register_of_two_bytes(uint8_t(v >> 8), uint8_t(v));
    ASSERT_EQ(crc_math::two_bytes_of_register(r), std::optional<uint16_t>(uint16_t(v)));
  }
}

// Only 2^16 of the 2^32 registers come from two bytes: a random one is accepted
// with probability 2^-16 (expected ~15 of a million).
TEST(Crc32Gf2Test, RandomRegistersAreRarelyTwoBytes) {
  std::mt19937_64 rng(2);
  int accepted = 0;
  for (int i = 0; i < 1'000'000; ++i) accepted += crc_math::two_bytes_of_register(uint32_t(rng())) ? 1 : 0;
  EXPECT_LT(accepted, 60);
}

TEST(IcrcTest, StoredLeastSignificantByteFirst) {
  std::mt19937_64 rng(3);
  const IpUdpInfo info = random_ipv4_info(rng);
  std::vector<uint8_t> p = signed_packet(rng, info, 100);
  const uint32_t crc = compute_icrc(info, p);
  const size_t n = p.size();
  EXPECT_EQ(p[n - 4], uint8_t(crc));
  EXPECT_EQ(p[n - 1], uint8_t(crc >> 24));
  EXPECT_EQ(stored_icrc(p), crc);
  EXPECT_TRUE(check_icrc(info, p));
}

// zlib's crc32 over the A17.3.3 input for `p`, written out by hand.
uint32_t annex_icrc(const IpUdpInfo& info, const std::vector<uint8_t>& p) {
  std::vector<uint8_t> input(8, 0xff);
  std::array<uint8_t, 48> ip_udp{};
  const size_t n = build_ip_udp_headers(info, p.size(), ip_udp);
  input.insert(input.end(), ip_udp.begin(), ip_udp.begin() + n);
  const size_t ip = 8, ip_bytes = n - 8;
  if (info.ipv6()) {
    input[ip] |= 0x0f;                                            // traffic class
    input[ip + 1] = input[ip + 2] = input[ip + 3] = 0xff;         // and flow label
    input[ip + 7] = 0xff;                                         // hop limit
  } else {
    input[ip + 1] = input[ip + 8] = 0xff;                         // TOS, TTL
    input[ip + 10] = input[ip + 11] = 0xff;                       // header checksum
  }
  input[ip + ip_bytes + 6] = input[ip + ip_bytes + 7] = 0xff;     // UDP checksum
  input.insert(input.end(), p.begin(), p.end() - 4);
  input[ip + n + 4] = 0xff;                                       // BTH byte 4
  return uint32_t(::crc32(0, input.data(), uInt(input.size())));
}

// The headers' CRC is kept per flow and length, and the IPv4 ID and DF are folded
// into it: flows, lengths, IDs and DF bits that change from one packet to the next
// (each a miss of the kept one) and that repeat (a hit) give the annex's value.
TEST(IcrcTest, TheKeptHeadersGiveTheAnnexValueForEveryFlowLengthIdAndDf) {
  std::mt19937_64 rng(40);
  std::vector<IpUdpInfo> flows;
  for (int i = 0; i < 3; ++i) flows.push_back(random_ipv4_info(rng));
  flows.push_back(random_ipv6_info(rng));
  for (int i = 0; i < 4000; ++i) {
    IpUdpInfo info = flows[rng() % flows.size()];
    info.ipv4_id = i % 3 == 0 ? uint16_t(i % 64) : uint16_t(rng());
    info.ipv4_df = rng() % 4 != 0;
    info.ttl = uint8_t(rng());
    std::vector<uint8_t> p = random_packet(rng, op::kRcSendOnly, i % 5 == 0 ? 1024 : rng() % 2000);
    const uint32_t expected = annex_icrc(info, p);
    ASSERT_EQ(compute_icrc(info, p), expected) << i;
    ASSERT_EQ(compute_icrc(info, p), expected) << i;  // the same flow and length again
  }
}

// The ICRC equals zlib's crc32 over the A17.3.3 input written out by hand.
TEST(IcrcTest, MatchesTheAnnexInputWrittenOut) {
  std::mt19937_64 rng(4);
  IpUdpInfo info = random_ipv4_info(rng);
  std::vector<uint8_t> p = random_packet(rng, op::kRcSendOnly, 37);
  std::vector<uint8_t> input(8, 0xff);
  std::array<uint8_t, 48> ip_udp{};
  const size_t n = build_ip_udp_headers(info, p.size(), ip_udp);
  input.insert(input.end(), ip_udp.begin(), ip_udp.begin() + n);
  input[8 + 1] = 0xff;                       // TOS
  input[8 + 8] = 0xff;                       // TTL
  input[8 + 10] = input[8 + 11] = 0xff;      // IP header checksum
  input[8 + 20 + 6] = input[8 + 20 + 7] = 0xff;  // UDP checksum
  input.insert(input.end(), p.begin(), p.end() - 4);
  input[8 + 28 + 4] = 0xff;                  // BTH byte 4
  EXPECT_EQ(compute_icrc(info, p), uint32_t(::crc32(0, input.data(), uInt(input.size()))));
}

TEST(IcrcTest, MaskedFieldsDoNotCount) {
  std::mt19937_64 rng(5);
  IpUdpInfo info = random_ipv4_info(rng);
  std::vector<uint8_t> p = signed_packet(rng, info, 64);
  info.ttl ^= 0x5a;
  info.tos ^= 0xa5;
  EXPECT_TRUE(check_icrc(info, p));
  p[4] ^= 0xc0;  // FECN and BECN: switches may set them in flight
  EXPECT_TRUE(check_icrc(info, p));
  p[4] ^= 0x3f;  // the rest of the reserved byte
  EXPECT_TRUE(check_icrc(info, p));
}

TEST(IcrcTest, CoveredHeaderFieldsCount) {
  std::mt19937_64 rng(6);
  const IpUdpInfo info = random_ipv4_info(rng);
  const std::vector<uint8_t> p = signed_packet(rng, info, 64);
  auto changed = [&](auto change) {
    IpUdpInfo other = info;
    change(other);
    return !check_icrc(other, p);
  };
  EXPECT_TRUE(changed([](IpUdpInfo& i) { i.ipv4_id ^= 0x0100; }));
  EXPECT_TRUE(changed([](IpUdpInfo& i) { i.ipv4_df = !i.ipv4_df; }));
  EXPECT_TRUE(changed([](IpUdpInfo& i) { i.src[15] ^= 1; }));
  EXPECT_TRUE(changed([](IpUdpInfo& i) { i.dst[12] ^= 0x80; }));
  EXPECT_TRUE(changed([](IpUdpInfo& i) { i.src_port ^= 1; }));
  EXPECT_TRUE(changed([](IpUdpInfo& i) { i.dst_port ^= 1; }));
}

TEST(IcrcTest, Ipv6MasksTrafficClassAndHopLimit) {
  std::mt19937_64 rng(7);
  IpUdpInfo info = random_ipv6_info(rng);
  std::vector<uint8_t> p = signed_packet(rng, info, 200);
  info.tos ^= 0xff;
  info.ttl ^= 0xff;
  info.ipv4_id ^= 0xffff;  // no such field in IPv6
  EXPECT_TRUE(check_icrc(info, p));
  info.src[7] ^= 4;
  EXPECT_FALSE(check_icrc(info, p));
}

TEST(IcrcTest, TooShortPayloadsNeverCheck) {
  const IpUdpInfo info;
  std::vector<uint8_t> p(kBthBytes + kIcrcBytes - 1, 0);
  EXPECT_FALSE(check_icrc(info, p));
  EXPECT_FALSE(solve_icrc_ipv4(info, p).has_value());
  EXPECT_FALSE(check_icrc(info, std::span<const uint8_t>()));
  // The writers stay inside such bytes too (checked by ASan in build-wire-asan).
  std::vector<uint8_t> tiny(3, 0x77);
  EXPECT_EQ(compute_icrc(info, tiny), 0u);
  EXPECT_EQ(stored_icrc(tiny), 0u);
  write_icrc(info, tiny);
  EXPECT_EQ(tiny, std::vector<uint8_t>(3, 0x77));
}

// softrdma's own senders: ID 0, DF set. Any claimed ID/DF in info is ignored.
TEST(SolveIcrcTest, FastPathIdZeroWithDf) {
  std::mt19937_64 rng(8);
  IpUdpInfo info = random_ipv4_info(rng);
  info.ipv4_id = 0;
  info.ipv4_df = true;
  std::vector<uint8_t> p = signed_packet(rng, info, 512);
  info.ipv4_id = 1234;
  info.ipv4_df = false;
  auto solved = solve_icrc_ipv4(info, p);
  ASSERT_TRUE(solved.has_value());
  EXPECT_EQ(solved->id, 0);
  EXPECT_TRUE(solved->df);
}

// Random packets, IDs and DF: the solver returns the sender's values. With 2^-16
// chance per packet, another (id, DF=1) also fits a DF=0 packet; such a collision
// must be a genuine one and stay rare.
TEST(SolveIcrcTest, RecoversRandomIdentifications) {
  std::mt19937_64 rng(9);
  int collisions = 0;
  for (int i = 0; i < 5000; ++i) {
    const IpUdpInfo sent = random_ipv4_info(rng);
    std::vector<uint8_t> p = signed_packet(rng, sent, rng() % 4097);
    IpUdpInfo received = sent;
    received.ipv4_id = uint16_t(rng());
    received.ttl = uint8_t(rng());
    auto solved = solve_icrc_ipv4(received, p);
    ASSERT_TRUE(solved.has_value()) << i;
    if (solved->id == sent.ipv4_id && solved->df == sent.ipv4_df) continue;
    ++collisions;
    received.ipv4_id = solved->id;
    received.ipv4_df = solved->df;
    EXPECT_TRUE(check_icrc(received, p));
    EXPECT_TRUE(solved->df && !sent.ipv4_df);
  }
  EXPECT_LE(collisions, 2);
}

// The receiver's guess (segment i of a GSO send carries ID i) is only a first
// try: right or wrong, with DF set or clear, the sender's ID comes back.
TEST(SolveIcrcTest, ALikelyIdRightOrWrongFindsTheSendersId) {
  std::mt19937_64 rng(41);
  for (int i = 0; i < 2000; ++i) {
    IpUdpInfo sent = random_ipv4_info(rng);
    sent.ipv4_id = uint16_t(i % 64);
    sent.ipv4_df = i % 7 != 0;
    std::vector<uint8_t> p = signed_packet(rng, sent, 1 + rng() % 4096);
    for (const uint16_t likely : {sent.ipv4_id, uint16_t(sent.ipv4_id ^ 0x2c), uint16_t(0)}) {
      auto solved = solve_icrc_ipv4(sent, p, likely);
      ASSERT_TRUE(solved.has_value()) << i << " " << likely;
      IpUdpInfo found = sent;
      found.ipv4_id = solved->id;
      found.ipv4_df = solved->df;
      EXPECT_TRUE(check_icrc(found, p)) << i;
      // A DF-clear packet may also fit some ID with DF set (2^-16); else exact.
      if (sent.ipv4_df || !solved->df) EXPECT_EQ(solved->id, sent.ipv4_id) << i << " " << likely;
    }
    p[p.size() / 2] ^= 0x08;  // a covered bit: no guess makes it pass for certain
    IpUdpInfo check = sent;
    if (auto solved = solve_icrc_ipv4(sent, p, sent.ipv4_id)) {
      check.ipv4_id = solved->id;
      check.ipv4_df = solved->df;
      EXPECT_TRUE(check_icrc(check, p));  // a genuine 2^-15 coincidence, if ever
      EXPECT_FALSE(solved->id == sent.ipv4_id && solved->df == sent.ipv4_df) << i;
    }
  }
}

TEST(SolveIcrcTest, Ipv6IsAPlainCheck) {
  std::mt19937_64 rng(10);
  const IpUdpInfo info = random_ipv6_info(rng);
  std::vector<uint8_t> p = signed_packet(rng, info, 300);
  EXPECT_TRUE(solve_icrc_ipv4(info, p).has_value());
  p[20] ^= 1;
  EXPECT_FALSE(solve_icrc_ipv4(info, p).has_value());
}

// The corruption tests flip bits of the UDP payload a socket delivers. BTH byte 4
// is masked by design (FECN/BECN), so flips there are invisible to any ICRC.
size_t random_covered_bit(std::mt19937_64& rng, size_t bytes) {
  for (;;) {
    const size_t bit = rng() % (bytes * 8);
    if (bit / 8 != 4) return bit;
  }
}

// With every header field known, the CRC detects every single-bit error.
TEST(IcrcTest, DetectsEverySingleBitErrorWithKnownHeaders) {
  std::mt19937_64 rng(11);
  const IpUdpInfo info = random_ipv4_info(rng);
  std::vector<uint8_t> p = random_packet(rng, op::kRcSendOnly, 1000);
  write_icrc(info, p);
  int missed = 0;
  for (size_t bit = 0; bit < p.size() * 8; ++bit) {
    if (bit / 8 == 4) continue;  // masked by design
    p[bit / 8] ^= uint8_t(1u << (bit % 8));
    missed += check_icrc(info, p) ? 1 : 0;
    p[bit / 8] ^= uint8_t(1u << (bit % 8));
  }
  EXPECT_EQ(missed, 0);
}

// Solving for 17 unknown bits (ID and DF) leaves 15 of the CRC's 32: each bit
// position of the packet has a 2^-15 chance that its flip equals the effect of
// some other ID with DF flipped. Which positions depends only on their distance
// from the ID, so it is a fixed list; for packets up to the largest RoCEv2 MTU
// (4096 payload + headers) it is these two, both needing DF flipped. Keeping DF
// as sent, no single-bit error goes unseen at these lengths.
TEST(SolveIcrcTest, SingleBitErrorsTheSolverCannotSee) {
  std::mt19937_64 rng(12);
  IpUdpInfo info = random_ipv4_info(rng);
  info.ipv4_df = true;
  std::vector<uint8_t> p = random_packet(rng, op::kRcWriteOnly, 4096);  // 4128 bytes
  write_icrc(info, p);
  std::vector<std::pair<size_t, size_t>> unseen;  // (UDP payload byte, bit)
  for (size_t bit = 0; bit < p.size() * 8; ++bit) {
    if (bit / 8 == 4) continue;
    p[bit / 8] ^= uint8_t(1u << (bit % 8));
    if (auto solved = solve_icrc_ipv4(info, p)) {
      unseen.emplace_back(bit / 8, bit % 8);
      EXPECT_FALSE(solved->df);
      EXPECT_NE(solved->id, info.ipv4_id);
    }
    p[bit / 8] ^= uint8_t(1u << (bit % 8));
  }
  const std::vector<std::pair<size_t, size_t>> expected = {{173, 3}, {1834, 6}};
  EXPECT_EQ(unseen, expected);
}

// The same over random packets and positions: a rate, ~2 in 33000 for full-MTU
// packets, ~1 in 5000 for the mix of lengths here.
TEST(SolveIcrcTest, RejectsRandomSingleBitErrors) {
  std::mt19937_64 rng(13);
  constexpr int kTrials = 100'000;
  int rejected = 0;
  for (int i = 0; i < kTrials; ++i) {
    const IpUdpInfo info = random_ipv4_info(rng);
    std::vector<uint8_t> p = signed_packet(rng, info, rng() % 1025);
    const size_t bit = random_covered_bit(rng, p.size());
    p[bit / 8] ^= uint8_t(1u << (bit % 8));
    rejected += solve_icrc_ipv4(info, p) ? 0 : 1;
  }
  const double rate = double(rejected) / kTrials;
  RecordProperty("single_bit_rejection_rate", std::to_string(rate));
  EXPECT_GE(rate, 0.999) << rejected << " of " << kTrials;
}

TEST(SolveIcrcTest, RejectsRandomGarbage) {
  std::mt19937_64 rng(12);
  constexpr int kTrials = 100'000;
  int trials = 0, rejected = 0;
  while (trials < kTrials) {
    const IpUdpInfo info = random_ipv4_info(rng);
    std::vector<uint8_t> p = signed_packet(rng, info, rng() % 1025);
    // Overwrite a random run of 1..16 bytes with random bytes (a bad buffer).
    const size_t run = 1 + rng() % 16;
    const size_t at = rng() % (p.size() - run + 1);
    bool changed = false;
    for (size_t k = at; k < at + run; ++k) {
      const uint8_t b = uint8_t(rng());
      changed |= k != 4 && b != p[k];
      p[k] = b;
    }
    if (!changed) continue;  // not a corruption (or only the masked byte)
    ++trials;
    rejected += solve_icrc_ipv4(info, p) ? 0 : 1;
  }
  const double rate = double(rejected) / kTrials;
  RecordProperty("garbage_rejection_rate", std::to_string(rate));
  EXPECT_GT(rate, 0.999) << rejected << " of " << kTrials;
}

}  // namespace
}  // namespace softrdma::wire
