// wire::crc32_update: the ICRC's CRC-32 must be exactly zlib's (the reference the
// Soft-RoCE vectors and the GF(2) solver were checked against), whole and in pieces,
// whichever library computes it.
#include "wire/crc32.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string_view>
#include <vector>

namespace softrdma::wire {
namespace {

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

uint32_t zlib_crc(std::span<const uint8_t> bytes) {
  return uint32_t(crc32_z(0, bytes.data(), bytes.size()));
}

// The CRC-32/ISO-HDLC catalogue check value: catches a wrong init, xor or reflection.
TEST(Crc32Test, CheckValueOfTheDigits) {
  constexpr std::string_view kDigits = "123456789";
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(kDigits.data()),
                                       kDigits.size());
  EXPECT_EQ(crc32_update(0, bytes), 0xcbf43926u);
}

TEST(Crc32Test, NothingLeavesTheCrcUnchanged) {
  EXPECT_EQ(crc32_update(0, {}), 0u);
  EXPECT_EQ(crc32_update(0xdeadbeef, {}), 0xdeadbeefu);
}

// Sizes around the vector widths the libraries switch between (16, 64, 256 bytes).
TEST(Crc32Test, EqualsZlibAtEverySize) {
  std::mt19937_64 rng(11);
  for (size_t n = 0; n <= 1100; ++n) {
    const std::vector<uint8_t> v = random_bytes(rng, n);
    ASSERT_EQ(crc32_update(0, v), zlib_crc(v)) << n << " bytes";
  }
  for (size_t n : {4096u, 4097u, 9000u, 65507u}) {
    const std::vector<uint8_t> v = random_bytes(rng, n);
    EXPECT_EQ(crc32_update(0, v), zlib_crc(v)) << n << " bytes";
  }
}

// Continuing a running CRC is what the pieced ICRC (IcrcStream) relies on.
TEST(Crc32Test, PiecesGiveTheCrcOfTheWhole) {
  std::mt19937_64 rng(12);
  for (int round = 0; round < 2000; ++round) {
    const std::vector<uint8_t> v = random_bytes(rng, rng() % 5000);
    const std::span<const uint8_t> all(v);
    uint32_t crc = 0;
    size_t at = 0;
    while (at < v.size()) {
      const size_t n = std::min<size_t>(v.size() - at, rng() % 700);
      crc = crc32_update(crc, all.subspan(at, n));
      at += n;
    }
    ASSERT_EQ(crc, zlib_crc(v)) << v.size() << " bytes, round " << round;
  }
}

}  // namespace
}  // namespace softrdma::wire
