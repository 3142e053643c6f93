// Round trips of the CM messages the capture does not hold (MRA, REJ with ARI,
// SIDR_REQ/REP), bit positions checked against IBA 12.6 by hand, the Annex A11
// service IDs, and refusal of short, long, foreign and malformed MADs.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "wire/cm_gsi.h"
#include "wire/cm_ip.h"
#include "wire/cm_mad.h"
#include "wire/cm_random.h"

namespace softrdma::wire {
namespace {

using Mad = std::array<uint8_t, kMadBytes>;
constexpr size_t kData = kMadHeaderBytes;  // IBA tables count from MAD byte 24

template <class Msg>
Mad encoded(const Msg& m) {
  Mad mad{};
  encode(m, mad);
  return mad;
}

template <class Msg>
Msg round_trip(const Msg& m) {
  Msg back;
  EXPECT_EQ(decode(encoded(m), back), MadError::kNone);
  return back;
}

TEST(CmCodecTest, MraRoundTripsAndPlacesItsBits) {
  CmMra mra;
  mra.transaction_id = 0x1122334455667788;
  mra.local_comm_id = 0xdeadbeef;
  mra.remote_comm_id = 0x01020304;
  mra.message_mraed = CmMsgKind::kRep;
  mra.service_timeout = 0x1f;
  mra.private_data.back() = 0x5a;
  EXPECT_EQ(round_trip(mra), mra);
  const Mad mad = encoded(mra);
  EXPECT_EQ(mad[16], 0x00);  // attribute ID 0x0011
  EXPECT_EQ(mad[17], 0x11);
  EXPECT_EQ(mad[kData + 8], 0x40);  // Message MRAed: bits 7..6
  EXPECT_EQ(mad[kData + 9], 0xf8);  // Service Timeout: bits 7..3
  EXPECT_EQ(mad[kData + 10 + 221], 0x5a);  // 222 bytes of private data end the MAD
  EXPECT_EQ(mad[255], 0x5a);
}

TEST(CmCodecTest, RejWithAriRoundTrips) {
  CmRej rej;
  rej.transaction_id = 7;
  rej.local_comm_id = 1;
  rej.remote_comm_id = 2;
  rej.message_rejected = CmMsgKind::kReq;
  rej.reason = RejReason::kInvalidGid;
  rej.ari_length = 16;
  for (size_t i = 0; i < 16; ++i) rej.ari[i] = uint8_t(0xa0 + i);  // the GID it wants
  rej.private_data[0] = 0x42;
  rej.private_data[147] = 0x43;
  EXPECT_EQ(round_trip(rej), rej);
  const Mad mad = encoded(rej);
  EXPECT_EQ(mad[kData + 9], 16 << 1);  // Rejected Info Length: bits 7..1
  EXPECT_EQ(mad[kData + 10], 0);
  EXPECT_EQ(mad[kData + 11], 12);  // Reason
  EXPECT_EQ(mad[kData + 12], 0xa0);
  EXPECT_EQ(mad[kData + 84], 0x42);
  EXPECT_EQ(mad[255], 0x43);
}

TEST(CmCodecTest, RejReasonsHaveTheirIbaNumbers) {
  EXPECT_EQ(uint16_t(RejReason::kNoQp), 1);
  EXPECT_EQ(uint16_t(RejReason::kTimeout), 4);
  EXPECT_EQ(uint16_t(RejReason::kInvalidServiceId), 8);
  EXPECT_EQ(uint16_t(RejReason::kStaleConnection), 10);
  EXPECT_EQ(uint16_t(RejReason::kInsufficientRespResources), 27);
  EXPECT_EQ(uint16_t(RejReason::kConsumerReject), 28);
  EXPECT_EQ(uint16_t(RejReason::kVendorOptionNotSupported), 35);
  EXPECT_EQ(to_string(RejReason::kConsumerReject), "consumer reject");
  EXPECT_EQ(to_string(RejReason(34)), "unknown reason");
  // A reason this end has no name for is still carried.
  CmRej rej;
  rej.reason = RejReason(0x1234);
  EXPECT_EQ(round_trip(rej).reason, RejReason(0x1234));
}

TEST(CmCodecTest, SidrReqCarriesTheIpCmHeaderForUdp) {
  CmSidrReq req;
  req.transaction_id = 0xabc;
  req.request_id = 0x55aa55aa;
  req.pkey = 0xffff;
  req.service_id = ip_service_id({IpProtocol::kUdp, 7174});
  IpCmHeader ip;
  ip.ip_version = 6;
  ip.src_port = 40000;
  for (size_t i = 0; i < 16; ++i) ip.src_ip[i] = uint8_t(0xfe - i), ip.dst_ip[i] = uint8_t(i);
  ASSERT_TRUE(encode_ip_cm_header(ip, req.private_data));
  req.private_data[kIpCmHeaderBytes] = 0x99;  // first consumer byte
  const CmSidrReq back = round_trip(req);
  EXPECT_EQ(back, req);
  EXPECT_EQ(parse_ip_service_id(back.service_id), (IpService{IpProtocol::kUdp, 7174}));
  IpCmHeader ip_back;
  ASSERT_EQ(decode_ip_cm_header(back.private_data, ip_back), IpCmError::kNone);
  EXPECT_EQ(ip_back, ip);
  const Mad mad = encoded(req);
  EXPECT_EQ(mad[kData + 4], 0xff);  // P_Key at byte 4
  EXPECT_EQ(mad[kData + 16], 0x00);  // private data from byte 16: version byte
  EXPECT_EQ(mad[kData + 17], 0x60);  // IP version 6 in the high nibble
  EXPECT_EQ(mad[kData + 16 + kIpCmHeaderBytes], 0x99);
  EXPECT_EQ(kIpCmSidrReqConsumerBytes, 180u);
}

TEST(CmCodecTest, SidrRepRoundTripsWithSplitVendorId) {
  CmSidrRep rep;
  rep.transaction_id = 0xabc;
  rep.request_id = 0x55aa55aa;
  rep.status = SidrStatus::kRedirect;
  rep.additional_info_length = 72;
  rep.additional_info.fill(0x11);
  rep.vendor_id = 0xabcdef;
  rep.qpn = 0x123456;
  rep.service_id = ip_service_id({IpProtocol::kUdp, 7174});
  rep.qkey = 0x01234567;
  rep.private_data.back() = 0x77;
  EXPECT_EQ(round_trip(rep), rep);
  const Mad mad = encoded(rep);
  EXPECT_EQ(mad[kData + 4], 4);
  EXPECT_EQ(mad[kData + 5], 72);
  EXPECT_EQ(mad[kData + 6], 0xab);  // vendor ID high 16 bits at 6..7 ...
  EXPECT_EQ(mad[kData + 7], 0xcd);
  EXPECT_EQ(mad[kData + 8], 0x12);  // QPN at 8..10
  EXPECT_EQ(mad[kData + 11], 0xef);  // ... low 8 bits at 11
  EXPECT_EQ(mad[kData + 12 + 6], 0x1c);  // service ID at 12 (unaligned)
  EXPECT_EQ(mad[kData + 20], 0x01);  // Q_Key at 20
  EXPECT_EQ(mad[kData + 24], 0x11);  // additional information at 24
  EXPECT_EQ(mad[255], 0x77);
}

TEST(CmCodecTest, RepVendorIdSpansThreeReservedBytes) {
  CmRep rep;
  rep.vendor_id = 0x123456;
  rep.local_qpn = 0xffffff;
  rep.local_eecn = 0xffffff;
  rep.starting_psn = 0xffffff;
  rep.attribute_modifier = 0x80000001;  // ECE options ride in the attribute modifier
  const Mad mad = encoded(rep);
  EXPECT_EQ(mad[kData + 15], 0x12);
  EXPECT_EQ(mad[kData + 19], 0x34);
  EXPECT_EQ(mad[kData + 23], 0x56);
  EXPECT_EQ(mad[20], 0x80);
  EXPECT_EQ(mad[23], 0x01);
  EXPECT_EQ(round_trip(rep), rep);
}

TEST(CmCodecTest, ReqPathBitsSitWhereTable106PutsThem) {
  CmReq req;
  req.primary.subnet_local = true;
  req.primary.sl = 0xf;
  req.primary.packet_rate = 0x3f;
  req.alternate.local_ack_timeout = 0x1f;
  req.alternate_sap_supported = true;
  req.path_mtu = CmMtu::k4096;
  const Mad mad = encoded(req);
  EXPECT_EQ(mad[kData + 91], 0x3f);  // primary packet rate: low 6 bits of 88..91
  EXPECT_EQ(mad[kData + 94], 0xf8);  // SL 7..4, Subnet Local 3
  EXPECT_EQ(mad[kData + 139], 0xfc);  // alternate Local ACK Timeout 7..3, SAP 2
  EXPECT_EQ(mad[kData + 50], 0x50);
  EXPECT_EQ(round_trip(req), req);
}

// Random bytes under a valid header: each decodes; encoding the message and decoding
// again gives it back, and encoding is stable (only reserved bits were dropped).
TEST(CmCodecTest, RandomMessagesOfEveryKindRoundTrip) {
  std::mt19937_64 rng(8);
  std::array<int, std::variant_size_v<CmMessage>> kinds{};
  for (int i = 0; i < 5000; ++i) {
    const Mad random = testing::random_cm_mad(rng, /*valid_lengths=*/true);
    CmMessage msg;
    ASSERT_EQ(decode_cm(random, msg), MadError::kNone);
    ++kinds[msg.index()];
    Mad mad{};
    encode(msg, mad);
    CmMessage back;
    ASSERT_EQ(decode_cm(mad, back), MadError::kNone);
    EXPECT_EQ(back, msg);
    Mad again{};
    encode(back, again);
    EXPECT_EQ(again, mad);
    // The header fields decode() does not keep are the ones encode() writes as zero.
    EXPECT_EQ(mad[4] | mad[5] | mad[6] | mad[7] | mad[18] | mad[19], 0);
  }
  for (int n : kinds) EXPECT_GT(n, 400);
}

TEST(CmCodecTest, WideValuesAreCutToTheirField) {
  CmDreq dreq;
  dreq.remote_qpn_eecn = 0xff123456;
  CmDreq back = round_trip(dreq);
  EXPECT_EQ(back.remote_qpn_eecn, 0x123456u);
  EXPECT_EQ(encoded(dreq)[kData + 11], 0);  // the reserved byte stays zero
}

TEST(CmCodecTest, IpServiceIdsComposeAndParse) {
  EXPECT_EQ(ip_service_id({IpProtocol::kTcp, 0x1c06}), 0x0000000001061c06u);
  EXPECT_EQ(ip_service_id({IpProtocol::kUdp, 0x1234}), 0x0000000001111234u);
  EXPECT_EQ(ip_service_id({IpProtocol::kIb, 0xffff}), 0x00000000013fffffu);
  EXPECT_EQ(parse_ip_service_id(0x00000000013f0001), (IpService{IpProtocol::kIb, 1}));
  EXPECT_EQ(parse_ip_service_id(0x0000000000020001), std::nullopt);  // RDMA_PS_IPOIB
  EXPECT_EQ(parse_ip_service_id(0x1000000001061c06), std::nullopt);
}

TEST(CmCodecTest, IpCmHeaderRefusesWhatA11DoesNotDefine) {
  std::array<uint8_t, kIpCmHeaderBytes> bytes{};
  IpCmHeader h;
  h.src_port = 1;
  ASSERT_TRUE(encode_ip_cm_header(h, bytes));
  IpCmHeader out;
  out.src_port = 99;
  EXPECT_EQ(decode_ip_cm_header(std::span(bytes).first(35), out), IpCmError::kTruncated);
  EXPECT_FALSE(encode_ip_cm_header(h, std::span(bytes).first(35)));
  bytes[0] = 0x10;  // major version 1
  EXPECT_EQ(decode_ip_cm_header(bytes, out), IpCmError::kBadMajorVersion);
  bytes[0] = 0x01;  // minor version 1: readable
  EXPECT_EQ(decode_ip_cm_header(bytes, out), IpCmError::kNone);
  EXPECT_EQ(out.minor_version, 1);
  bytes[0] = 0;
  bytes[1] = 0x50;  // IP version 5
  out.src_port = 99;
  EXPECT_EQ(decode_ip_cm_header(bytes, out), IpCmError::kBadIpVersion);
  EXPECT_EQ(out.src_port, 99);  // untouched on failure
  bytes[1] = 0x4f;  // reserved low nibble is ignored
  EXPECT_EQ(decode_ip_cm_header(bytes, out), IpCmError::kNone);
  EXPECT_EQ(out.ip_version, 4);
}

// ---- Refusals ----------------------------------------------------------------------

Mad valid_rtu() {
  CmRtu rtu;
  rtu.local_comm_id = 5;
  return encoded(rtu);
}

// A decoder that refuses leaves its output as it was.
void expect_refused(std::span<const uint8_t> mad, MadError expected) {
  CmRtu out;
  out.local_comm_id = 0x77;
  EXPECT_EQ(decode(mad, out), expected);
  EXPECT_EQ(out.local_comm_id, 0x77u);
  CmMessage any = CmDrep{};
  std::get<CmDrep>(any).local_comm_id = 0x66;
  EXPECT_EQ(decode_cm(mad, any), expected);
  ASSERT_TRUE(std::holds_alternative<CmDrep>(any));
  EXPECT_EQ(std::get<CmDrep>(any).local_comm_id, 0x66u);
}

TEST(CmRefusalTest, WrongSizesAreRefused) {
  const Mad mad = valid_rtu();
  expect_refused(std::span(mad).first(0), MadError::kBadSize);
  expect_refused(std::span(mad).first(24), MadError::kBadSize);
  expect_refused(std::span(mad).first(255), MadError::kBadSize);
  std::vector<uint8_t> longer(mad.begin(), mad.end());
  longer.push_back(0);
  expect_refused(longer, MadError::kBadSize);
  MadHeader h;
  EXPECT_EQ(decode_mad_header(std::span(mad).first(23), h), MadError::kBadSize);
}

TEST(CmRefusalTest, ForeignHeadersAreRefused) {
  struct Case { size_t byte; uint8_t value; MadError error; };
  const Case cases[] = {
      {0, 2, MadError::kBadBaseVersion},
      {1, 0x04, MadError::kBadClass},      // Performance Management
      {1, 0x81, MadError::kBadClass},      // subnet management, directed route
      {2, 1, MadError::kBadClassVersion},
      {2, 3, MadError::kBadClassVersion},
      {3, 0x01, MadError::kBadMethod},     // Get
      {3, 0x83, MadError::kBadMethod},     // the response bit set on Send
      {17, 0x19, MadError::kBadAttribute}, // LAP: not covered
      {17, 0x01, MadError::kBadAttribute}, // ClassPortInfo
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("byte " + std::to_string(c.byte) + " = " + std::to_string(c.value));
    Mad mad = valid_rtu();
    mad[c.byte] = c.value;
    expect_refused(mad, c.error);
  }
}

TEST(CmRefusalTest, AMessageOfAnotherAttributeIsNotDecodedAsThisOne) {
  CmRep rep;
  rep.local_comm_id = 9;
  CmReq req;
  req.local_comm_id = 0x77;
  EXPECT_EQ(decode(encoded(rep), req), MadError::kBadAttribute);
  EXPECT_EQ(req.local_comm_id, 0x77u);
}

TEST(CmRefusalTest, InformationLengthsBeyondTheirFieldAreRefused) {
  CmRej rej;
  Mad mad = encoded(rej);
  mad[kData + 9] = 73 << 1;
  CmRej out;
  EXPECT_EQ(decode(mad, out), MadError::kBadLength);
  mad[kData + 9] = 72 << 1;
  EXPECT_EQ(decode(mad, out), MadError::kNone);
  CmSidrRep sidr;
  mad = encoded(sidr);
  mad[kData + 5] = 200;
  CmSidrRep sidr_out;
  EXPECT_EQ(decode(mad, sidr_out), MadError::kBadLength);
}

TEST(CmRefusalTest, ReservedBitsAreIgnoredOnReceipt) {
  CmDreq dreq;
  dreq.remote_qpn_eecn = 0x11;
  Mad mad = encoded(dreq);
  mad[kData + 11] = 0xff;  // reserved byte after the QPN
  mad[18] = 0xff;          // reserved MAD header bytes
  CmDreq out;
  ASSERT_EQ(decode(mad, out), MadError::kNone);
  EXPECT_EQ(out, dreq);
}

TEST(CmRefusalTest, GarbageNeverDecodesOutOfBounds) {
  // Whatever the bytes, decoding stays in bounds (ASan builds check) and answers.
  std::mt19937_64 rng(99);
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bytes(rng() % 2 ? kMadBytes : rng() % 300);
    for (auto& b : bytes) b = uint8_t(rng());
    if (bytes.size() >= 4 && rng() % 2) bytes[0] = 1, bytes[1] = 7, bytes[2] = 2, bytes[3] = 3;
    if (bytes.size() >= 18 && rng() % 2) bytes[16] = 0, bytes[17] = uint8_t(0x10 + rng() % 10);
    CmMessage msg;
    if (decode_cm(bytes, msg) == MadError::kNone) ++decoded;
  }
  EXPECT_GT(decoded, 1000);
}

TEST(CmGsiTest, OnlyUdSendOnlyToQp1WithTheGsiQkeyCarriesAMad) {
  std::vector<uint8_t> pkt(kGsiPacketBytes);
  const Mad mad = valid_rtu();
  build_gsi_packet(pkt, GsiSend{}, mad);
  PacketView view;
  ASSERT_EQ(parse_packet(pkt, view), ParseError::kNone);
  ASSERT_EQ(gsi_mad(view).size(), kMadBytes);
  EXPECT_TRUE(std::equal(mad.begin(), mad.end(), gsi_mad(view).begin()));
  EXPECT_EQ(view.get(deth::kQkey), 0x80010000u);

  view.set(deth::kQkey, 0x80010001);  // another Q_Key
  EXPECT_TRUE(gsi_mad(view).empty());
  view.set(deth::kQkey, kGsiQkey);
  view.set(bth::kDestQp, 2);  // another QP
  EXPECT_TRUE(gsi_mad(view).empty());
  view.set(bth::kDestQp, kGsiQpn);
  ASSERT_FALSE(gsi_mad(view).empty());

  // A UD SEND of another length to QP1.
  std::vector<uint8_t> shorter(packet_bytes(op::kUdSendOnly, 252));
  PacketView s = build_packet(shorter, op::kUdSendOnly, 252);
  s.set(bth::kDestQp, kGsiQpn);
  s.set(deth::kQkey, kGsiQkey);
  EXPECT_TRUE(gsi_mad(s).empty());
  // An RC SEND to QP 1 is no MAD.
  std::vector<uint8_t> rc(packet_bytes(op::kRcSendOnly, kMadBytes));
  PacketView r = build_packet(rc, op::kRcSendOnly, kMadBytes);
  r.set(bth::kDestQp, kGsiQpn);
  EXPECT_TRUE(gsi_mad(r).empty());
}

}  // namespace
}  // namespace softrdma::wire
