// DDP and RDMAP headers (RFC 5041 §5, RFC 5040 §4; wire/iwarp/ddp_rdmap.h): the
// control half-word and both buffer models byte for byte, a READ request and a
// Terminate, and the refusals a responder answers with a Terminate.
#include "wire/iwarp/ddp_rdmap.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

namespace softrdma::wire::iwarp {
namespace {

TEST(IwarpDdp, ATaggedWriteIsLaidOutAsRfc5041Says) {
  DdpHeader write;
  write.opcode = RdmapOpcode::kWrite;
  write.last = true;
  write.stag = 0x11223344;
  write.offset = 0x0102030405060708;
  std::array<uint8_t, 32> out{};
  ASSERT_EQ(write_ddp(write, out), kTaggedHeaderBytes);
  const uint8_t expected[] = {0xc1, 0x40, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(std::memcmp(out.data(), expected, sizeof expected), 0);
  DdpHeader parsed;
  size_t bytes = 0;
  ASSERT_EQ(parse_ddp(out, parsed, bytes), DdpParse::kDone);
  EXPECT_EQ(bytes, kTaggedHeaderBytes);
  EXPECT_EQ(parsed.opcode, RdmapOpcode::kWrite);
  EXPECT_TRUE(parsed.last);
  EXPECT_EQ(parsed.stag, 0x11223344u);
  EXPECT_EQ(parsed.offset, 0x0102030405060708u);
}

TEST(IwarpDdp, AnUntaggedSendWithInvalidateCarriesItsStagInRsvdUlp) {
  DdpHeader send;
  send.opcode = RdmapOpcode::kSendInvalidate;
  send.last = false;
  send.invalidate_stag = 0xabcd0001;
  send.queue = kQueueSend;
  send.msn = 7;
  send.message_offset = 4096;
  std::array<uint8_t, 32> out{};
  ASSERT_EQ(write_ddp(send, out), kUntaggedHeaderBytes);
  const uint8_t expected[] = {0x01, 0x44, 0xab, 0xcd, 0x00, 0x01, 0, 0, 0, 0,
                              0,    0,    0,    7,    0,    0,    0x10, 0};
  EXPECT_EQ(std::memcmp(out.data(), expected, sizeof expected), 0);
  DdpHeader parsed;
  size_t bytes = 0;
  ASSERT_EQ(parse_ddp(out, parsed, bytes), DdpParse::kDone);
  EXPECT_FALSE(parsed.last);
  EXPECT_EQ(parsed.invalidate_stag, 0xabcd0001u);
  EXPECT_EQ(parsed.msn, 7u);
  EXPECT_EQ(parsed.message_offset, 4096u);
  EXPECT_EQ(parse_ddp(std::span(out).first(kUntaggedHeaderBytes - 1), parsed, bytes),
            DdpParse::kTooShort);
}

// What a responder answers with a Terminate (RFC 5040 §7.2, RFC 5041 §7.2).
TEST(IwarpDdp, WrongVersionsAndOpcodesAreRefused) {
  std::array<uint8_t, 32> header{};
  DdpHeader parsed;
  size_t bytes = 0;
  header = {0x42, 0x43};  // DDP version 2
  EXPECT_EQ(parse_ddp(header, parsed, bytes), DdpParse::kBadDdpVersion);
  header = {0x41, 0x03};  // RDMAP version 0
  EXPECT_EQ(parse_ddp(header, parsed, bytes), DdpParse::kBadRdmapVersion);
  header = {0xc1, 0x43};  // a tagged SEND
  EXPECT_EQ(parse_ddp(header, parsed, bytes), DdpParse::kBadOpcode);
  header = {0x41, 0x40};  // an untagged WRITE
  EXPECT_EQ(parse_ddp(header, parsed, bytes), DdpParse::kBadOpcode);
  header = {0x41, 0x48};  // RFC 7306's immediate data: not offered
  EXPECT_EQ(parse_ddp(header, parsed, bytes), DdpParse::kBadOpcode);
  EXPECT_EQ(parse_ddp(std::span(header).first(1), parsed, bytes), DdpParse::kTooShort);
}

TEST(IwarpRdmap, AReadRequestRoundTrips) {
  const ReadRequest request{0x1111, 0x2222333344445555, 65536, 0x6666, 0x7777888899990000};
  std::array<uint8_t, kReadRequestBytes> out{};
  write_read_request(request, out);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[3], 0x11);
  EXPECT_EQ(out[12], 0);
  EXPECT_EQ(out[13], 1);  // 65536, big-endian
  ReadRequest parsed;
  ASSERT_TRUE(parse_read_request(out, parsed));
  EXPECT_EQ(parsed.sink_stag, request.sink_stag);
  EXPECT_EQ(parsed.sink_offset, request.sink_offset);
  EXPECT_EQ(parsed.size, request.size);
  EXPECT_EQ(parsed.source_stag, request.source_stag);
  EXPECT_EQ(parsed.source_offset, request.source_offset);
  EXPECT_FALSE(parse_read_request(std::span(out).first(27), parsed));
}

// A DDP tagged-buffer error, invalid STag (layer 1, type 1, code 0), with the
// offending DDP header attached: 0x11004000.
TEST(IwarpRdmap, ATerminatesControlWordNamesLayerTypeAndCode) {
  Terminate t;
  t.layer = TerminateLayer::kDdp;
  t.error_type = 1;
  t.error_code = 0;
  t.has_ddp_header = true;
  std::array<uint8_t, kTerminateControlBytes> out{};
  write_terminate(t, out);
  const uint8_t expected[] = {0x11, 0x00, 0x40, 0x00};
  EXPECT_EQ(std::memcmp(out.data(), expected, 4), 0);
  Terminate parsed;
  ASSERT_TRUE(parse_terminate(out, parsed));
  EXPECT_EQ(parsed.layer, TerminateLayer::kDdp);
  EXPECT_EQ(parsed.error_type, 1);
  EXPECT_TRUE(parsed.has_ddp_header);
  EXPECT_FALSE(parsed.has_rdmap_header);
  out[0] = 0x31;  // layer 3 does not exist
  EXPECT_FALSE(parse_terminate(out, parsed));
}

// RDMAP's opcode table (wire/iwarp/opcodes.h) drives both directions: every
// opcode it has is written with its buffer model's header and parsed back the
// same, and its reserved bits leave as zero (RFC 5041 §5.1, RFC 5040 §4.1).
TEST(IwarpRdmap, EveryOpcodeOfTheTableRoundTripsWithReservedBitsZero) {
  for (size_t code = 0; code < kNumRdmapOpcodes; ++code) {
    const RdmapOpInfo& info = kRdmapOpcodes[code];
    if (!info.valid()) continue;
    SCOPED_TRACE(info.name);
    DdpHeader h;
    h.opcode = RdmapOpcode(code);
    h.last = false;
    h.stag = 0xa1b2c3d4;
    h.offset = 0x1122334455667788;
    h.invalidate_stag = info.tagged ? 0 : 0x0badf00d;
    h.queue = info.tagged ? kQueueSend : info.queue;
    h.msn = 0x01020304;
    h.message_offset = 0x0a0b0c0d;
    std::array<uint8_t, 32> out;
    out.fill(0xff);
    ASSERT_EQ(write_ddp(h, out), info.ddp_bytes);
    EXPECT_EQ(load_field(out.data(), control::kDdpReserved), 0u);
    EXPECT_EQ(load_field(out.data(), control::kRdmapReserved), 0u);
    DdpHeader parsed;
    size_t bytes = 0;
    ASSERT_EQ(parse_ddp(std::span(out).first(info.ddp_bytes), parsed, bytes), DdpParse::kDone);
    EXPECT_EQ(bytes, info.ddp_bytes);
    EXPECT_EQ(parsed.opcode, h.opcode);
    EXPECT_FALSE(parsed.last);
    if (info.tagged) {
      EXPECT_EQ(parsed.stag, h.stag);
      EXPECT_EQ(parsed.offset, h.offset);
    } else {
      EXPECT_EQ(parsed.invalidate_stag, h.invalidate_stag);
      EXPECT_EQ(parsed.queue, info.queue);
      EXPECT_EQ(parsed.msn, h.msn);
      EXPECT_EQ(parsed.message_offset, h.message_offset);
    }
  }
  DdpHeader unknown;
  unknown.opcode = RdmapOpcode(9);
  std::array<uint8_t, 32> out{};
  EXPECT_EQ(write_ddp(unknown, out), 0u) << "an opcode the table lacks is not written";
}

TEST(IwarpRdmap, ATerminatesReservedBitsAreZeroAndItsMBitIsIgnored) {
  std::array<uint8_t, kTerminateControlBytes> out;
  out.fill(0xff);
  write_terminate(Terminate{TerminateLayer::kRdmap, 1, 2, false, true}, out);
  const uint8_t expected[] = {0x01, 0x02, 0x20, 0x00};
  EXPECT_EQ(std::memcmp(out.data(), expected, 4), 0);
  out[2] |= 0x80;  // M: a segment length follows (marker-framed peers)
  Terminate parsed;
  ASSERT_TRUE(parse_terminate(out, parsed));
  EXPECT_TRUE(parsed.has_rdmap_header);
  EXPECT_EQ(parsed.error_code, 2);
}

}  // namespace
}  // namespace softrdma::wire::iwarp
