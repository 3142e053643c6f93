// MPA (RFC 5044, RFC 6581; wire/iwarp/mpa.h): start frames byte for byte, their
// parsing from a stream that delivers them in pieces, the refusals of what is not
// an MPA frame, and FPDUs whose CRC-32C is the standard one, least significant
// byte first (what Wireshark's MPA dissector and Linux siw check:
// iwarp_capture_test.cc has tshark judge it).
#include "wire/iwarp/mpa.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "wire/crc32.h"

namespace softrdma::wire::iwarp {
namespace {

// CRC-32C bit by bit, as RFC 3385 defines it (reflected polynomial 0x82F63B78):
// the reference the library's CRC is checked against.
uint32_t reference_crc32c(std::span<const uint8_t> bytes) {
  uint32_t crc = 0xffffffff;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0x82f63b78 & (0u - (crc & 1)));
  }
  return ~crc;
}

std::span<const uint8_t> text(const char* s) {
  return {reinterpret_cast<const uint8_t*>(s), std::strlen(s)};
}

TEST(IwarpMpa, Crc32cIsCastagnolis) {
  EXPECT_EQ(crc32c_update(0, text("123456789")), 0xe3069283u);
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + 3);
  EXPECT_EQ(crc32c_update(0, bytes), reference_crc32c(bytes));
  const uint32_t first = crc32c_update(0, std::span(bytes).first(333));
  EXPECT_EQ(crc32c_update(first, std::span(bytes).subspan(333)), reference_crc32c(bytes));
}

TEST(IwarpMpa, AnEnhancedRequestIsLaidOutAsRfc6581Says) {
  const uint8_t ulp[] = {'a', 'b', 'c'};
  MpaStart request;
  request.crc = true;
  request.revision = 2;
  request.enhanced = MpaEnhanced{true, false, false, true, 16, 8};
  request.private_data = ulp;
  std::array<uint8_t, 64> out{};
  ASSERT_EQ(write_mpa_start(request, out), 27u);
  EXPECT_EQ(std::memcmp(out.data(), "MPA ID Req Frame", 16), 0);
  const uint8_t rest[] = {0x40, 2, 0, 7, 0x80, 16, 0x40, 8, 'a', 'b', 'c'};
  EXPECT_EQ(std::memcmp(out.data() + 16, rest, sizeof rest), 0);

  MpaStart parsed;
  size_t used = 0;
  ASSERT_EQ(parse_mpa_start(std::span(out).first(27), false, parsed, used), MpaParse::kDone);
  EXPECT_EQ(used, 27u);
  EXPECT_TRUE(parsed.crc);
  EXPECT_FALSE(parsed.markers);
  EXPECT_FALSE(parsed.reject);
  ASSERT_TRUE(parsed.enhanced.has_value());
  EXPECT_TRUE(parsed.enhanced->peer_to_peer);
  EXPECT_TRUE(parsed.enhanced->rtr_read);
  EXPECT_FALSE(parsed.enhanced->rtr_write);
  EXPECT_EQ(parsed.enhanced->ird, 16);
  EXPECT_EQ(parsed.enhanced->ord, 8);
  ASSERT_EQ(parsed.private_data.size(), 3u);
  EXPECT_EQ(std::memcmp(parsed.private_data.data(), "abc", 3), 0);
}

// A stream delivers the frame in pieces: every prefix asks for more, a wrong key
// is refused at its first wrong byte.
TEST(IwarpMpa, AFrameInPiecesNeedsMoreAndAWrongKeyIsRefusedAtOnce) {
  MpaStart reply;
  reply.reply = true;
  reply.reject = true;
  const uint8_t why[] = {1, 2, 3, 4, 5};
  reply.private_data = why;
  std::array<uint8_t, 64> out{};
  const size_t n = write_mpa_start(reply, out);
  ASSERT_EQ(n, 25u);
  MpaStart parsed;
  size_t used = 0;
  for (size_t prefix = 0; prefix < n; ++prefix)
    EXPECT_EQ(parse_mpa_start(std::span(out).first(prefix), true, parsed, used),
              MpaParse::kNeedMore) << prefix;
  ASSERT_EQ(parse_mpa_start(std::span(out).first(n), true, parsed, used), MpaParse::kDone);
  EXPECT_TRUE(parsed.reject);
  EXPECT_EQ(parsed.revision, 1);
  EXPECT_FALSE(parsed.enhanced.has_value());
  EXPECT_EQ(parse_mpa_start(std::span(out).first(n), false, parsed, used), MpaParse::kBadKey)
      << "a reply where a request is expected";
  EXPECT_EQ(parse_mpa_start(text("GET / HTTP"), false, parsed, used), MpaParse::kBadKey);
}

TEST(IwarpMpa, LyingFramesAreRefused) {
  std::array<uint8_t, 600> frame{};
  std::memcpy(frame.data(), "MPA ID Req Frame", 16);
  MpaStart parsed;
  size_t used = 0;
  frame[17] = 3;  // revision 3
  EXPECT_EQ(parse_mpa_start(frame, false, parsed, used), MpaParse::kBadRevision);
  frame[17] = 1;
  frame[18] = 0x02;  // PD_Length 513
  frame[19] = 0x01;
  EXPECT_EQ(parse_mpa_start(frame, false, parsed, used), MpaParse::kTooLong);
  frame[17] = 2;  // revision 2 with 2 bytes of private data: no IRD/ORD
  frame[18] = 0;
  frame[19] = 2;
  EXPECT_EQ(parse_mpa_start(frame, false, parsed, used), MpaParse::kBadEnhanced);
  std::vector<uint8_t> too_much(509);
  MpaStart big;
  big.revision = 2;
  big.private_data = too_much;  // 509 + 4 > 512
  EXPECT_EQ(write_mpa_start(big, frame), 0u);
}

// Every padding length; the CRC is the standard CRC-32C of length, ULPDU and pad,
// least significant byte first; one flipped bit anywhere is caught, and nothing is
// checked without CRC.
TEST(IwarpMpa, FpdusArePaddedAndCarryTheCrcLeastSignificantByteFirst) {
  for (size_t length = 14; length < 22; ++length) {
    SCOPED_TRACE(length);
    std::vector<uint8_t> fpdu(fpdu_bytes(length), 0xee);
    EXPECT_EQ(fpdu.size() % 4, 0u);
    for (size_t i = 0; i < length; ++i) fpdu[2 + i] = uint8_t(i + 1);
    seal_fpdu(fpdu, length, true);
    EXPECT_EQ(fpdu[0] << 8 | fpdu[1], int(length));
    const size_t covered = fpdu.size() - 4;
    for (size_t i = 2 + length; i < covered; ++i) EXPECT_EQ(fpdu[i], 0) << "pad at " << i;
    const uint32_t crc = reference_crc32c(std::span(fpdu).first(covered));
    EXPECT_EQ(uint32_t(fpdu[covered + 3]) << 24 | uint32_t(fpdu[covered + 2]) << 16 |
                  uint32_t(fpdu[covered + 1]) << 8 | fpdu[covered],
              crc);
    std::span<const uint8_t> ulpdu;
    size_t used = 0;
    ASSERT_EQ(parse_fpdu(fpdu, true, ulpdu, used), FpduParse::kDone);
    EXPECT_EQ(used, fpdu.size());
    EXPECT_EQ(ulpdu.size(), length);
    EXPECT_EQ(ulpdu[0], 1);
    EXPECT_EQ(parse_fpdu(std::span(fpdu).first(fpdu.size() - 1), true, ulpdu, used),
              FpduParse::kNeedMore);
    for (size_t at = 0; at < fpdu.size(); at += 3) {
      std::vector<uint8_t> bad = fpdu;
      bad[at] ^= 0x10;
      const FpduParse result = parse_fpdu(bad, true, ulpdu, used);
      EXPECT_TRUE(result == FpduParse::kBadCrc || result == FpduParse::kNeedMore ||
                  result == FpduParse::kTooShort) << at;
    }
    seal_fpdu(fpdu, length, false);
    EXPECT_EQ(fpdu[covered] | fpdu[covered + 1] | fpdu[covered + 2] | fpdu[covered + 3], 0);
    EXPECT_EQ(parse_fpdu(fpdu, false, ulpdu, used), FpduParse::kDone);
  }
}

TEST(IwarpMpa, AnFpduShorterThanADdpHeaderIsRefused) {
  std::array<uint8_t, 20> fpdu{};
  fpdu[1] = 13;
  std::span<const uint8_t> ulpdu;
  size_t used = 0;
  EXPECT_EQ(parse_fpdu(fpdu, false, ulpdu, used), FpduParse::kTooShort);
  EXPECT_EQ(parse_fpdu(std::span(fpdu).first(1), false, ulpdu, used), FpduParse::kNeedMore);
}

}  // namespace
}  // namespace softrdma::wire::iwarp
