// Runs the fuzz entry on 100k deterministic inputs so that every CI run fuzzes a
// little, with or without clang's libFuzzer (run under ASan for out-of-bounds reads).
#include "wire/fuzz_parse.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "wire/cm_gsi.h"
#include "wire/cm_random.h"
#include "wire/test_packets.h"

namespace softrdma::wire::testing {
namespace {

// One input: random bytes, a valid packet cut or lengthened, or a valid packet
// with a few bytes flipped. Valid opcodes and TVer 0 are favoured so that most
// inputs get past the first checks.
std::vector<uint8_t> next_input(std::mt19937_64& rng) {
  std::vector<uint8_t> bytes;
  switch (rng() % 3) {
    case 0:
      bytes.resize(rng() % 80);
      for (auto& b : bytes) b = uint8_t(rng());
      if (!bytes.empty() && rng() % 4 != 0) bytes[0] = random_valid_opcode(rng);
      if (bytes.size() > 1 && rng() % 4 != 0) bytes[1] &= 0xf0;
      break;
    case 1:
      bytes = random_packet(rng, random_valid_opcode(rng), rng() % 40);
      bytes.resize(rng() % (bytes.size() + 8));
      break;
    default:
      bytes = random_packet(rng, random_valid_opcode(rng), rng() % 40);
      for (int flips = 1 + int(rng() % 3); flips > 0; --flips)
        bytes[rng() % bytes.size()] ^= uint8_t(1 + rng() % 255);
      break;
  }
  return bytes;
}

TEST(FuzzParseTest, HundredThousandDeterministicInputs) {
  std::mt19937_64 rng(20240611);
  std::array<int, size_t(ParseError::kCount)> outcomes{};
  for (int i = 0; i < 100'000; ++i) {
    const std::vector<uint8_t> input = next_input(rng);
    ++outcomes[size_t(fuzz_parse_one(input.data(), input.size()))];
  }
  // Every outcome was reached, accepted packets included, so the invariants in
  // fuzz_parse_one were exercised on all paths.
  for (size_t e = 0; e < outcomes.size(); ++e)
    EXPECT_GT(outcomes[e], 100) << to_string(ParseError(e));
  EXPECT_GT(outcomes[size_t(ParseError::kNone)], 20'000);
}

// One CM input: a random CM MAD (ARI lengths valid or not), then header bytes flipped,
// the size changed, or left whole.
std::vector<uint8_t> next_cm_input(std::mt19937_64& rng) {
  const auto mad = random_cm_mad(rng, rng() % 2 == 0);
  std::vector<uint8_t> bytes(mad.begin(), mad.end());
  switch (rng() % 4) {
    case 0:
      for (int flips = 1 + int(rng() % 2); flips > 0; --flips)
        bytes[rng() % kMadHeaderBytes] ^= uint8_t(1 + rng() % 255);
      break;
    case 1:
      bytes.resize(rng() % (kMadBytes + 16));
      break;
    default:
      break;
  }
  return bytes;
}

TEST(FuzzParseTest, HundredThousandDeterministicCmMads) {
  std::mt19937_64 rng(20260101);
  std::array<int, size_t(MadError::kCount)> outcomes{};
  for (int i = 0; i < 100'000; ++i) {
    const std::vector<uint8_t> input = next_cm_input(rng);
    ++outcomes[size_t(fuzz_cm_mad_one(input.data(), input.size()))];
  }
  for (size_t e = 0; e < outcomes.size(); ++e)
    EXPECT_GT(outcomes[e], 100) << to_string(MadError(e));
  EXPECT_GT(outcomes[size_t(MadError::kNone)], 30'000);
}

// A MAD framed as QP1 receives it reaches the CM decoder through the packet parser.
TEST(FuzzParseTest, CmMadsToQp1GoThroughThePacketParser) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const auto mad = random_cm_mad(rng, rng() % 2 == 0);
    std::vector<uint8_t> pkt(kGsiPacketBytes);
    build_gsi_packet(pkt, GsiSend{}, mad);
    ASSERT_EQ(fuzz_parse_one(pkt.data(), pkt.size()), ParseError::kNone);
  }
}

}  // namespace
}  // namespace softrdma::wire::testing
