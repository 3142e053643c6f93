// The opcode table (IBA 9.2, Tables 38/39) and the field lists of every header.
#include "wire/opcodes.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "wire/fields.h"
#include "wire/test_packets.h"

namespace softrdma::wire {
namespace {

TEST(OpcodesTest, ExactlyTheRcUcUdXrcOpcodesAreValid) {
  // RC: 24 operations (IBA 1.5's ATOMIC WRITE among them), UC: 12 (no READ,
  // ATOMIC, ACK, INVALIDATE), UD: 2 SENDs, XRC: RC's 24; and softrdma's own SACK
  // and timed ACK in the manufacturer-specific range (docs/decisions/
  // selective-repeat.md, congestion-control.md); and RoCEv2's CNP (Annex A17.9.3),
  // a BTH and 16 reserved bytes.
  EXPECT_EQ(testing::valid_opcodes().size(), 24u + 12u + 2u + 24u + 2u + 1u);
  EXPECT_EQ(kOpcodes[0xc1].name, "SOFTRDMA_SACK");
  EXPECT_EQ(kOpcodes[0xc2].name, "SOFTRDMA_TIMED_ACK");
  EXPECT_TRUE(kOpcodes[0xc2].is(kOpAck)) << "acknowledges as an ACK does";
  EXPECT_FALSE(kOpcodes[0xc3].valid());
  EXPECT_EQ(kOpcodes[0x81].name, "CNP");
  EXPECT_EQ(kOpcodes[0x81].header_bytes, kBthBytes);
  EXPECT_EQ(kOpcodes[0x81].headers, header_bit(Header::kBth));
  EXPECT_FALSE(kOpcodes[0x80].valid());
  EXPECT_FALSE(kOpcodes[0x82].valid());
  EXPECT_FALSE(kOpcodes[0xc0].valid());
  EXPECT_EQ(kOpcodes[0x1d].name, "RC_ATOMIC_WRITE");
  EXPECT_FALSE(kOpcodes[0x1c].valid());  // FLUSH: not offered
  EXPECT_FALSE(kOpcodes[0x15].valid());                            // reserved
  EXPECT_FALSE(kOpcodes[op::kXrc | 0x15].valid());
  EXPECT_FALSE(kOpcodes[op::kRd | op::kSendOnly].valid());         // RD: not served
  EXPECT_FALSE(kOpcodes[op::kUc | op::kAcknowledge].valid());
  EXPECT_FALSE(kOpcodes[op::kUd | op::kWriteOnly].valid());
  EXPECT_FALSE(kOpcodes[0xff].valid());
}

TEST(OpcodesTest, NamesAreUniqueAndCarryTheTransport) {
  std::set<std::string> names;
  for (uint8_t opcode : testing::valid_opcodes()) {
    const std::string name(kOpcodes[opcode].name);
    EXPECT_TRUE(names.insert(name).second) << name;
    const uint8_t transport = opcode & 0xe0;
    const char* prefix = opcode >= 0xc0         ? "SOFTRDMA_"  // IBA: manufacturer specific
                         : opcode == op::kCnp   ? "CNP"
                         : transport == op::kRc ? "RC_"
                         : transport == op::kUc ? "UC_"
                         : transport == op::kUd ? "UD_"
                                                : "XRC_";
    EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
  }
  EXPECT_EQ(kOpcodes[0x64].name, "UD_SEND_ONLY");
  EXPECT_EQ(kOpcodes[0x11].name, "RC_ACKNOWLEDGE");
  EXPECT_EQ(kOpcodes[0x2b].name, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
  EXPECT_EQ(kOpcodes[0xb1].name, "XRC_ACKNOWLEDGE");
}

// IBA A14: every XRC request carries an XRCETH right after the BTH; responses
// (to the XRC send QP) carry none, and no other transport has one.
TEST(OpcodesTest, XrcethIsOnXrcRequestsOnly) {
  for (uint8_t opcode : testing::valid_opcodes()) {
    const OpcodeInfo& i = kOpcodes[opcode];
    SCOPED_TRACE(std::string(i.name));
    EXPECT_EQ(i.has(Header::kXrceth), i.is(kOpXrc | kOpRequest));
    if (i.has(Header::kXrceth)) {
      EXPECT_EQ(i.offset[size_t(Header::kXrceth)], kBthBytes);
    }
    if (i.is(kOpXrc)) {
      EXPECT_EQ(i.flags & ~kOpXrc, kOpcodes[opcode & 0x1f].flags & ~kOpRc);
    }
  }
}

// Headers follow the BTH in IBA order, back to back, and header_bytes is their sum.
TEST(OpcodesTest, OffsetsAreContiguousInIbaOrder) {
  for (uint8_t opcode : testing::valid_opcodes()) {
    const OpcodeInfo& info = kOpcodes[opcode];
    ASSERT_TRUE(info.has(Header::kBth));
    size_t at = 0;
    for (size_t h = 0; h < kNumHeaders; ++h) {
      if (!info.has(Header(h))) continue;
      EXPECT_EQ(info.offset[h], at) << info.name << " header " << h;
      at += kHeaderBytes[h];
    }
    EXPECT_EQ(info.header_bytes, at) << info.name;
  }
}

// Which headers a packet carries follows from what it means (IBA 9.2-9.5).
TEST(OpcodesTest, HeadersAgreeWithMeaning) {
  for (uint8_t opcode : testing::valid_opcodes()) {
    const OpcodeInfo& i = kOpcodes[opcode];
    SCOPED_TRACE(std::string(i.name));
    if (i.any(kOpCnp)) continue;  // neither request nor response: its shape is checked above
    EXPECT_EQ(i.has(Header::kImmDt), i.any(kOpImmediate));
    EXPECT_EQ(i.has(Header::kIeth), i.any(kOpInvalidate));
    EXPECT_EQ(i.has(Header::kAtomicEth), i.any(kOpAtomic));
    EXPECT_EQ(i.has(Header::kAtomicAckEth), i.any(kOpAtomicAck));
    EXPECT_EQ(i.has(Header::kDeth), i.any(kOpUd));
    EXPECT_FALSE(i.has(Header::kRdeth));
    const bool reth = i.any(kOpReadRequest | kOpAtomicWrite) || (i.any(kOpWrite) && i.any(kOpFirst));
    EXPECT_EQ(i.has(Header::kReth), reth);
    const bool aeth = i.any(kOpAck | kOpAtomicAck | kOpSack) ||
                      (i.any(kOpReadResponse) && !i.any(kOpMiddle));
    EXPECT_EQ(i.has(Header::kAeth), aeth);
    EXPECT_NE(i.any(kOpRequest), i.any(kOpResponse));
    const int position = (i.any(kOpFirst) ? 1 : 0) + (i.any(kOpMiddle) ? 2 : 0) +
                         (i.any(kOpLast) ? 4 : 0);
    EXPECT_TRUE(position == 1 || position == 2 || position == 4 || position == 5);
    EXPECT_EQ(i.any(kOpPayload),
              i.any(kOpSend | kOpWrite | kOpReadResponse | kOpAtomicWrite | kOpSack) ||
                  opcode == op::kRcTimedAck);
  }
}

// Copying every field of every header reproduces any header bytes exactly (the
// field lists tile each header; fields.h also checks it at compile time).
TEST(FieldsTest, FieldListsCoverEveryHeaderBit) {
  std::mt19937_64 rng(1);
  for (uint8_t opcode : testing::valid_opcodes()) {
    const OpcodeInfo& info = kOpcodes[opcode];
    std::vector<uint8_t> src(info.header_bytes + kIcrcBytes), dst(src.size(), 0);
    for (size_t i = 0; i < info.header_bytes; ++i) src[i] = uint8_t(rng());
    src[0] = dst[0] = opcode;
    PacketView from(src), to(dst);
    for (size_t h = 0; h < kNumHeaders; ++h)
      if (info.has(Header(h)))
        for (const FieldSpec& f : header_fields(Header(h))) to.set(f, from.get(f));
    EXPECT_EQ(dst, src) << info.name;
  }
}

TEST(FieldsTest, SyndromeHelpersFollowTable42) {
  EXPECT_EQ(syndrome::ack(), 0x1f);                 // as Soft-RoCE sends it
  EXPECT_EQ(syndrome::rnr_nak(26), 0x3a);           // rc_rnr_nak vector
  EXPECT_EQ(syndrome::nak(syndrome::kNakPsnSequence), 0x60);  // rc_seq_nak vector
  EXPECT_EQ(syndrome::type(0x3a), syndrome::kRnrNak);
  EXPECT_EQ(syndrome::value(0x63), syndrome::kNakRemoteOperational);
  EXPECT_EQ(kRnrTimerMicros[26], 81920u);           // MANIFEST: 81.92 ms
  EXPECT_EQ(kRnrTimerMicros[0], 655360u);
}

}  // namespace
}  // namespace softrdma::wire
