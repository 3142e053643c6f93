// The iWARP parsers (wire/iwarp/: FPDU, DDP/RDMAP, READ request, Terminate, MPA
// start frame) on 100k deterministic inputs: random bytes with a well-formed
// control word favoured, and well-formed segments cut short or with bytes
// flipped. Every received byte is untrusted (DESIGN.md §7): a parser never reads
// past its input (ASan builds check that), what it accepts lies inside the input,
// and a DDP header it accepts is written back to the same fields.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "wire/iwarp/ddp_rdmap.h"
#include "wire/iwarp/mpa.h"

namespace softrdma::wire::iwarp {
namespace {

std::vector<uint8_t> next_input(std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(rng() % 64);
  for (auto& b : bytes) b = uint8_t(rng());
  if (bytes.size() >= 2 && rng() % 4 != 0) {  // DDP and RDMAP version 1, an opcode 0..9
    bytes[0] = uint8_t((bytes[0] & 0xc0) | kDdpVersion);
    bytes[1] = uint8_t(kRdmapVersion << 6 | rng() % 10);
  }
  if (rng() % 3 == 0) {  // a well-formed segment, cut or flipped
    DdpHeader h;
    h.opcode = RdmapOpcode(rng() % 8);
    h.queue = rdmap_info(h.opcode).tagged ? 0 : rdmap_info(h.opcode).queue;
    bytes.assign(64, 0);
    const size_t n = write_ddp(h, bytes);
    bytes.resize(rng() % 2 == 0 ? rng() % (n + 30) : n + 28);
    if (!bytes.empty() && rng() % 2 == 0) bytes[rng() % bytes.size()] ^= uint8_t(1 + rng() % 255);
  }
  return bytes;
}

void check_ddp(std::span<const uint8_t> in) {
  DdpHeader h;
  size_t header = 0;
  if (parse_ddp(in, h, header) != DdpParse::kDone) return;
  ASSERT_LE(header, in.size());
  ASSERT_EQ(header, rdmap_info(h.opcode).ddp_bytes);
  std::array<uint8_t, kUntaggedHeaderBytes> again{};
  ASSERT_EQ(write_ddp(h, again), header);
  DdpHeader back;
  size_t back_bytes = 0;
  ASSERT_EQ(parse_ddp(again, back, back_bytes), DdpParse::kDone);
  EXPECT_EQ(back.opcode, h.opcode);
  EXPECT_EQ(back.last, h.last);
  EXPECT_EQ(back.stag, h.stag);
  EXPECT_EQ(back.offset, h.offset);
  EXPECT_EQ(back.msn, h.msn);
  EXPECT_EQ(back.queue, h.queue);
  // Everything but the reserved bits is as it arrived.
  std::array<uint8_t, kUntaggedHeaderBytes> masked{};
  std::memcpy(masked.data(), in.data(), header);
  masked[0] &= 0xc3;
  masked[1] &= 0xcf;
  ASSERT_EQ(std::memcmp(masked.data(), again.data(), header), 0);
  ReadRequest r;
  Terminate t;
  const auto rest = in.subspan(header);
  if (parse_read_request(rest, r)) EXPECT_GE(rest.size(), kReadRequestBytes);
  if (parse_terminate(rest, t)) EXPECT_LE(uint8_t(t.layer), uint8_t(TerminateLayer::kMpa));
}

TEST(IwarpFuzz, ParsersStayInsideTheirInputAndRoundTripWhatTheyAccept) {
  std::mt19937_64 rng(26);
  size_t accepted = 0;
  for (int i = 0; i < 100000; ++i) {
    const std::vector<uint8_t> in = next_input(rng);
    check_ddp(in);
    DdpHeader h;
    size_t header = 0;
    accepted += parse_ddp(in, h, header) == DdpParse::kDone;
    std::span<const uint8_t> ulpdu;
    size_t used = 0;
    if (parse_fpdu(in, rng() % 2 == 0, ulpdu, used) == FpduParse::kDone) {
      ASSERT_LE(used, in.size());
      ASSERT_GE(ulpdu.data(), in.data());
      ASSERT_LE(ulpdu.data() + ulpdu.size(), in.data() + used);
    }
    MpaStart frame;
    std::vector<uint8_t> keyed(in);
    if (rng() % 2 == 0 && keyed.size() >= kMpaKeyBytes) std::memcpy(keyed.data(), kMpaReplyKey, 16);
    if (parse_mpa_start(keyed, true, frame, used) == MpaParse::kDone) {
      ASSERT_LE(used, keyed.size());
      ASSERT_LE(frame.private_data.data() + frame.private_data.size(), keyed.data() + used);
    }
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(accepted, 10000u) << "the inputs reach past the first checks";
}

}  // namespace
}  // namespace softrdma::wire::iwarp
