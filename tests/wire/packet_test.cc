// PacketView, parse_packet and build_packet: layout, field access, parse errors,
// and that parsing never reads outside the bytes it is given (run under ASan).
#include "wire/packet.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string_view>
#include <vector>

#include "wire/test_packets.h"

namespace softrdma::wire {
namespace {

using testing::random_packet;
using testing::random_valid_opcode;
using testing::valid_opcodes;

TEST(BuildPacketTest, PadsPayloadToFourBytes) {
  for (size_t len = 0; len <= 8; ++len) {
    std::vector<uint8_t> buf(packet_bytes(op::kRcSendOnly, len), 0xee);
    PacketView p = build_packet(buf, op::kRcSendOnly, len);
    EXPECT_EQ(p.bytes().size(), kBthBytes + len + (4 - len % 4) % 4 + kIcrcBytes);
    EXPECT_EQ(p.pad(), (4 - len % 4) % 4) << len;
    EXPECT_EQ(p.payload().size(), len);
    EXPECT_EQ(p.opcode(), op::kRcSendOnly);
    EXPECT_EQ(p.get(bth::kTver), 0u);
    // Headers, pad and ICRC zeroed; the payload bytes are the caller's.
    for (size_t i = 1; i < kBthBytes; ++i) EXPECT_EQ(buf[i] & (i == 1 ? 0xcf : 0xff), 0) << i;
    for (size_t i = kBthBytes + len; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0) << i;
  }
}

TEST(BuildPacketTest, BuiltPacketsParseBack) {
  std::mt19937_64 rng(1);
  for (uint8_t opcode : valid_opcodes()) {
    for (size_t len : {0, 1, 2, 3, 4, 255, 1024, 4096}) {
      std::vector<uint8_t> bytes = random_packet(rng, opcode, len);
      PacketView p;
      ASSERT_EQ(parse_packet(bytes, p), ParseError::kNone) << kOpcodes[opcode].name;
      const size_t expected = kOpcodes[opcode].any(kOpPayload) ? len : 0;
      EXPECT_EQ(p.payload().size(), expected);
      EXPECT_EQ(p.payload().data(), bytes.data() + kOpcodes[opcode].header_bytes);
      EXPECT_EQ(p.icrc_bytes().data(), bytes.data() + bytes.size() - 4);
    }
  }
}

// set() changes its own bits only; get() reads back the masked value.
TEST(PacketViewTest, SetTouchesOnlyItsField) {
  std::mt19937_64 rng(2);
  for (uint8_t opcode : valid_opcodes()) {
    const OpcodeInfo& info = kOpcodes[opcode];
    for (size_t h = 0; h < kNumHeaders; ++h) {
      if (!info.has(Header(h))) continue;
      for (const FieldSpec& f : header_fields(Header(h))) {
        if (f.header == Header::kBth && f.offset == 0) continue;  // the opcode picks the layout
        std::vector<uint8_t> bytes(info.header_bytes + kIcrcBytes);
        for (auto& b : bytes) b = uint8_t(rng());
        bytes[0] = opcode;
        std::vector<uint8_t> before = bytes;
        PacketView p(bytes);
        const uint64_t value = rng();
        p.set(f, value);
        EXPECT_EQ(p.get(f), value & f.mask());
        p.set(f, PacketView(before).get(f));
        EXPECT_EQ(bytes, before) << info.name;
      }
    }
  }
}

TEST(PacketViewTest, BthFieldsSitWhereIbaPutsThem) {
  std::vector<uint8_t> bytes(packet_bytes(op::kRcSendOnly, 0));
  PacketView p = build_packet(bytes, op::kRcSendOnly, 0);
  p.set(bth::kSolicited, 1);
  p.set(bth::kPkey, 0xffff);
  p.set(bth::kDestQp, 0x123456);
  p.set(bth::kAckReq, 1);
  p.set(bth::kPsn, 0xfffff8);
  p.set(bth::kFecn, 1);
  const std::vector<uint8_t> expected = {0x04, 0x80, 0xff, 0xff, 0x80, 0x12, 0x34, 0x56,
                                         0x80, 0xff, 0xff, 0xf8, 0,    0,    0,    0};
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(p.psn(), 0xfffff8u);
  EXPECT_EQ(p.dest_qp(), 0x123456u);
  EXPECT_TRUE(p.ack_req());
}

TEST(ParseTest, RejectsTruncatedPackets) {
  std::mt19937_64 rng(3);
  for (uint8_t opcode : valid_opcodes()) {
    std::vector<uint8_t> full = random_packet(rng, opcode, 0);
    for (size_t n = 0; n < kOpcodes[opcode].header_bytes + kIcrcBytes; ++n) {
      std::vector<uint8_t> cut(full.begin(), full.begin() + n);
      PacketView p;
      EXPECT_EQ(parse_packet(cut, p), ParseError::kTruncated) << kOpcodes[opcode].name << n;
    }
  }
}

TEST(ParseTest, RejectsOpcodesOutsideTheTable) {
  int rejected = 0;
  for (int opcode = 0; opcode < 256; ++opcode) {
    std::vector<uint8_t> bytes(64, 0);
    bytes[0] = uint8_t(opcode);
    PacketView p;
    const ParseError e = parse_packet(bytes, p);
    EXPECT_EQ(e == ParseError::kBadOpcode, !kOpcodes[opcode].valid()) << opcode;
    rejected += e == ParseError::kBadOpcode ? 1 : 0;
  }
  // RC 24, UC 12, UD 2, XRC 24 (IBA Table 39), SACK, timed ACK, CNP
  EXPECT_EQ(rejected, 256 - 65);
}

TEST(ParseTest, RejectsTransportVersionOtherThanZero) {
  std::mt19937_64 rng(4);
  std::vector<uint8_t> bytes = random_packet(rng, op::kRcSendOnly, 8);
  for (uint8_t tver = 1; tver < 16; ++tver) {
    PacketView(bytes).set(bth::kTver, tver);
    PacketView p;
    EXPECT_EQ(parse_packet(bytes, p), ParseError::kBadVersion) << int(tver);
  }
}

TEST(ParseTest, RejectsImpossiblePad) {
  std::mt19937_64 rng(5);
  // Pad larger than the bytes between headers and ICRC.
  std::vector<uint8_t> send = random_packet(rng, op::kRcSendOnly, 0);
  PacketView(send).set(bth::kPadCount, 1);
  PacketView p;
  EXPECT_EQ(parse_packet(send, p), ParseError::kBadPad);
  // Pad on a packet that carries no payload (an ACK).
  std::vector<uint8_t> ack = random_packet(rng, op::kRcAcknowledge, 0);
  ack.insert(ack.begin() + 16, 4, 0);  // room for a pad, still no payload allowed
  PacketView(ack).set(bth::kPadCount, 2);
  EXPECT_EQ(parse_packet(ack, p), ParseError::kBadPad);
  // A pad exactly as long as the bytes left is fine (payload of zero bytes).
  std::vector<uint8_t> padded = random_packet(rng, op::kRcSendOnly, 3);  // 3 + pad 1
  PacketView(padded).set(bth::kPadCount, 3);
  ASSERT_EQ(parse_packet(padded, p), ParseError::kNone);
  EXPECT_EQ(p.payload().size(), 1u);
}

TEST(ParseTest, ErrorsHaveNames) {
  std::set<std::string_view> names;
  for (int e = 0; e < int(ParseError::kCount); ++e) names.insert(to_string(ParseError(e)));
  EXPECT_EQ(names.size(), size_t(ParseError::kCount));
  EXPECT_EQ(names.count("?"), 0u);
}

// Reads everything a parsed view offers; under ASan any stray byte read fails.
uint64_t touch_everything(const PacketView& p) {
  uint64_t sum = 0;
  for (size_t h = 0; h < kNumHeaders; ++h)
    if (p.info().has(Header(h)))
      for (const FieldSpec& f : header_fields(Header(h))) sum += p.get(f);
  for (uint8_t b : p.payload()) sum += b;
  for (uint8_t b : p.icrc_bytes()) sum += b;
  return sum;
}

// Property: whatever the bytes (exactly sized heap buffers, so ASan sees a read
// one past the end), parse either rejects them or yields a view inside them.
TEST(ParseTest, NeverReadsOutOfBounds) {
  std::mt19937_64 rng(6);
  int parsed = 0;
  for (int i = 0; i < 200'000; ++i) {
    std::vector<uint8_t> bytes;
    if (i % 2 == 0) {  // random bytes, often with a valid opcode in front
      bytes.resize(rng() % 96);
      for (auto& b : bytes) b = uint8_t(rng());
      if (!bytes.empty() && rng() % 2) bytes[0] = random_valid_opcode(rng);
      if (bytes.size() > 1 && rng() % 2) bytes[1] &= 0xf0;  // TVer 0
    } else {  // a valid packet cut at a random length
      bytes = random_packet(rng, random_valid_opcode(rng), rng() % 64);
      bytes.resize(rng() % (bytes.size() + 1));
    }
    bytes.shrink_to_fit();
    PacketView p;
    if (parse_packet(bytes, p) != ParseError::kNone) continue;
    ++parsed;
    ASSERT_LE(p.info().header_bytes + p.pad() + kIcrcBytes, bytes.size());
    ASSERT_GE(p.payload().data(), bytes.data());
    ASSERT_LE(p.payload().data() + p.payload().size() + p.pad() + kIcrcBytes,
              bytes.data() + bytes.size());
    touch_everything(p);
  }
  EXPECT_GT(parsed, 10'000);  // the property was exercised on accepted packets too
}

}  // namespace
}  // namespace softrdma::wire
