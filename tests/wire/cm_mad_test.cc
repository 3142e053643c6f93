// The CM MADs of a real rping connection between two Linux Soft-RoCE hosts
// (tests/data/rdma_cm.pcap, MANIFEST.md): client 10.77.0.2, server 10.77.0.3 port
// 7174. Each MAD is decoded, its fields compared with what tshark shows
// (`tshark -r tests/data/rdma_cm.pcap -V -d udp.port==4791,infiniband`), then the
// decoded message is encoded again and must reproduce the captured packet byte for byte.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "support/pcap_reader.h"
#include "wire/cm_gsi.h"
#include "wire/cm_ip.h"
#include "wire/cm_mad.h"
#include "wire/icrc.h"

namespace softrdma::wire {
namespace {

using test::RoceFrame;

constexpr uint32_t kClientIp = 0x0a4d0002;  // 10.77.0.2
constexpr uint32_t kServerIp = 0x0a4d0003;  // 10.77.0.3
constexpr uint64_t kTid = 0x00000002090100bf;  // one transaction ID for the whole exchange
constexpr uint32_t kClientCommId = 0xbf000109;
constexpr uint32_t kServerCommId = 0x34986c78;

// The RoCEv2 packets of the capture that carry a MAD to QP1, in capture order.
const std::vector<RoceFrame>& cm_frames() {
  static const std::vector<RoceFrame> frames = [] {
    test::RoceCapture capture =
        test::read_roce_pcap(std::string(SOFTRDMA_TEST_DATA) + "/rdma_cm.pcap");
    EXPECT_EQ(capture.error, "");
    std::vector<RoceFrame> out;
    for (RoceFrame& f : capture.packets) {
      PacketView view;
      if (parse_packet(f.udp_payload, view) == ParseError::kNone && !gsi_mad(view).empty())
        out.push_back(std::move(f));
    }
    return out;
  }();
  return frames;
}

std::span<const uint8_t> mad_of(const RoceFrame& frame) {
  PacketView view;
  std::vector<uint8_t>& bytes = const_cast<std::vector<uint8_t>&>(frame.udp_payload);
  EXPECT_EQ(parse_packet(bytes, view), ParseError::kNone);
  return gsi_mad(view);
}

template <class Msg>
Msg decoded(size_t index) {
  Msg m;
  EXPECT_EQ(decode(mad_of(cm_frames().at(index)), m), MadError::kNone);
  return m;
}

TEST(CmCaptureTest, HoldsFiveCmMadsToQp1InConnectionOrder) {
  const std::vector<RoceFrame>& frames = cm_frames();
  ASSERT_EQ(frames.size(), 5u);
  const std::array<CmAttr, 5> expected = {CmAttr::kReq, CmAttr::kRep, CmAttr::kRtu,
                                          CmAttr::kDreq, CmAttr::kDrep};
  const std::array<uint32_t, 5> psns = {0, 0, 1, 2, 1};  // each side's QP1 counts its own
  for (size_t i = 0; i < frames.size(); ++i) {
    MadHeader h;
    ASSERT_EQ(decode_mad_header(mad_of(frames[i]), h), MadError::kNone);
    EXPECT_EQ(h.base_version, 1);
    EXPECT_EQ(h.mgmt_class, 0x07);
    EXPECT_EQ(h.class_version, 2);
    EXPECT_FALSE(h.response);
    EXPECT_EQ(h.method, 0x03);
    EXPECT_EQ(h.status, 0);
    EXPECT_EQ(h.transaction_id, kTid);
    EXPECT_EQ(h.attribute_id, uint16_t(expected[i])) << to_string(expected[i]);
    EXPECT_EQ(h.attribute_modifier, 0u);
    PacketView view;
    ASSERT_EQ(parse_packet(const_cast<std::vector<uint8_t>&>(frames[i].udp_payload), view),
              ParseError::kNone);
    EXPECT_EQ(view.get(bth::kPkey), 0xffffu);
    EXPECT_EQ(view.get(deth::kSrcQp), 1u);
    EXPECT_TRUE(view.ack_req());
    EXPECT_EQ(view.psn(), psns[i]);
  }
}

TEST(CmCaptureTest, ReqFieldsAreTheOnesTsharkShows) {
  const CmReq req = decoded<CmReq>(0);
  EXPECT_EQ(req.transaction_id, kTid);
  EXPECT_EQ(req.local_comm_id, kClientCommId);
  EXPECT_EQ(req.service_id, 0x0000000001061c06u);
  EXPECT_EQ(parse_ip_service_id(req.service_id), (IpService{IpProtocol::kTcp, 0x1c06}));
  EXPECT_EQ(req.local_ca_guid, 0x505400fffe770002u);
  EXPECT_EQ(req.local_qkey, 0u);
  EXPECT_EQ(req.local_qpn, 0x11u);
  EXPECT_EQ(req.responder_resources, 1);
  EXPECT_EQ(req.initiator_depth, 1);
  EXPECT_EQ(req.local_eecn, 0u);
  EXPECT_EQ(req.remote_eecn, 0u);
  EXPECT_EQ(req.remote_cm_response_timeout, 0x14);
  EXPECT_EQ(req.transport_service_type, 0);  // RC
  EXPECT_FALSE(req.end_to_end_flow_control);
  EXPECT_EQ(req.starting_psn, 0x50cae8u);
  EXPECT_EQ(req.local_cm_response_timeout, 0x14);
  EXPECT_EQ(req.retry_count, 7);
  EXPECT_EQ(req.pkey, 0xffff);
  EXPECT_EQ(req.path_mtu, CmMtu::k1024);  // MANIFEST: active_mtu 1024
  EXPECT_FALSE(req.rdc_exists);
  EXPECT_EQ(req.rnr_retry_count, 7);
  EXPECT_EQ(req.max_cm_retries, 15);
  EXPECT_FALSE(req.srq);
  EXPECT_EQ(req.extended_transport_type, 0);
  EXPECT_EQ(req.vendor_id, 0u);
  EXPECT_EQ(req.alternate, CmPath{});
  EXPECT_FALSE(req.alternate_sap_supported);
}

TEST(CmCaptureTest, ReqPrimaryPathIsTheRocePath) {
  const CmReq req = decoded<CmReq>(0);
  const CmPath& p = req.primary;
  EXPECT_EQ(p.local_lid, 0xffff);  // RoCE: the permissive LID
  EXPECT_EQ(p.remote_lid, 0xffff);
  EXPECT_EQ(p.local_gid, gid_from_ipv4(kClientIp));
  EXPECT_EQ(p.remote_gid, gid_from_ipv4(kServerIp));
  EXPECT_EQ(p.local_gid, cm_frames()[0].ip.src);
  EXPECT_EQ(p.remote_gid, cm_frames()[0].ip.dst);
  // tshark 4.0 prints 0x00346 and packet rate 0x34: it reads the 32-bit word one byte
  // short. IBA Table 106 puts the flow label in the top 20 bits of bytes 88-91, and
  // the RC packets that follow prove the value: Soft-RoCE makes their UDP source
  // port from it, 0xc000 | (fl & 0x3fff) ^ (fl >> 14) = 0xc68d.
  EXPECT_EQ(p.flow_label, 0x34680u);
  EXPECT_EQ(0xc000u | ((p.flow_label & 0x3fff) ^ (p.flow_label >> 14)), 0xc68du);
  EXPECT_EQ(p.packet_rate, 0);
  EXPECT_EQ(p.traffic_class, 0);
  EXPECT_EQ(p.hop_limit, 0x40);
  EXPECT_EQ(p.sl, 0);
  EXPECT_FALSE(p.subnet_local);
  EXPECT_EQ(p.local_ack_timeout, 0x13);
}

TEST(CmCaptureTest, RcPacketsUseTheSourcePortTheFlowLabelGives) {
  test::RoceCapture capture =
      test::read_roce_pcap(std::string(SOFTRDMA_TEST_DATA) + "/rdma_cm.pcap");
  size_t rc_packets = 0;
  for (const RoceFrame& f : capture.packets) {
    if (f.udp_payload[0] >= op::kUc) continue;  // RC opcodes are 0x00..0x1f
    ++rc_packets;
    EXPECT_EQ(f.ip.src_port, 0xc68d) << "record " << f.record_index;
  }
  EXPECT_EQ(rc_packets, 36u);
}

TEST(CmCaptureTest, ReqPrivateDataLeadsWithTheIpCmHeader) {
  const CmReq req = decoded<CmReq>(0);
  IpCmHeader ip;
  ASSERT_EQ(decode_ip_cm_header(req.private_data, ip), IpCmError::kNone);
  EXPECT_EQ(ip.major_version, 0);
  EXPECT_EQ(ip.minor_version, 0);
  EXPECT_EQ(ip.ip_version, 4);
  EXPECT_EQ(ip.src_port, 0x9e46);
  EXPECT_EQ(ip.src_ip, ip_cm_ipv4(kClientIp));
  EXPECT_EQ(ip.dst_ip, ip_cm_ipv4(kServerIp));
  EXPECT_EQ(ip_cm_to_ipv4(ip.src_ip), kClientIp);
  EXPECT_EQ(ip_cm_to_ipv4(ip.dst_ip), kServerIp);
  // rping sends no consumer data: the 56 bytes after the header are zero.
  for (size_t i = kIpCmHeaderBytes; i < req.private_data.size(); ++i)
    EXPECT_EQ(req.private_data[i], 0) << i;
  // Encoding the decoded header reproduces the captured 36 bytes.
  std::array<uint8_t, kIpCmHeaderBytes> again{};
  ASSERT_TRUE(encode_ip_cm_header(ip, again));
  EXPECT_TRUE(std::equal(again.begin(), again.end(), req.private_data.begin()));
}

TEST(CmCaptureTest, RepFieldsAreTheOnesTsharkShows) {
  const CmRep rep = decoded<CmRep>(1);
  EXPECT_EQ(rep.transaction_id, kTid);
  EXPECT_EQ(rep.local_comm_id, kServerCommId);
  EXPECT_EQ(rep.remote_comm_id, kClientCommId);
  EXPECT_EQ(rep.local_qkey, 0u);
  EXPECT_EQ(rep.local_qpn, 0x11u);
  EXPECT_EQ(rep.local_eecn, 0u);
  EXPECT_EQ(rep.starting_psn, 0x23ee94u);
  EXPECT_EQ(rep.responder_resources, 1);
  EXPECT_EQ(rep.initiator_depth, 1);
  EXPECT_EQ(rep.target_ack_delay, 0x0f);
  EXPECT_EQ(rep.failover_accepted, 0);
  EXPECT_FALSE(rep.end_to_end_flow_control);
  EXPECT_EQ(rep.rnr_retry_count, 7);
  EXPECT_FALSE(rep.srq);
  EXPECT_EQ(rep.vendor_id, 0u);
  EXPECT_EQ(rep.local_ca_guid, 0x505400fffe770003u);
  EXPECT_EQ(rep.private_data, decltype(rep.private_data){});
}

TEST(CmCaptureTest, RtuDreqDrepFieldsAreTheOnesTsharkShows) {
  const CmRtu rtu = decoded<CmRtu>(2);
  EXPECT_EQ(rtu.local_comm_id, kClientCommId);
  EXPECT_EQ(rtu.remote_comm_id, kServerCommId);
  const CmDreq dreq = decoded<CmDreq>(3);
  EXPECT_EQ(dreq.transaction_id, kTid);
  EXPECT_EQ(dreq.local_comm_id, kClientCommId);
  EXPECT_EQ(dreq.remote_comm_id, kServerCommId);
  EXPECT_EQ(dreq.remote_qpn_eecn, 0x11u);
  const CmDrep drep = decoded<CmDrep>(4);
  EXPECT_EQ(drep.local_comm_id, kServerCommId);
  EXPECT_EQ(drep.remote_comm_id, kClientCommId);
}

// Decode through the dispatcher, encode the message alone, frame it as QP1 does,
// write the ICRC: the whole UDP payload must come back byte for byte.
TEST(CmCaptureTest, EveryCmPacketReencodesByteForByte) {
  for (const RoceFrame& frame : cm_frames()) {
    SCOPED_TRACE("record " + std::to_string(frame.record_index));
    CmMessage msg;
    ASSERT_EQ(decode_cm(mad_of(frame), msg), MadError::kNone);
    std::array<uint8_t, kMadBytes> mad{};
    encode(msg, mad);
    EXPECT_TRUE(std::equal(mad.begin(), mad.end(), mad_of(frame).begin()));

    PacketView captured;
    ASSERT_EQ(parse_packet(const_cast<std::vector<uint8_t>&>(frame.udp_payload), captured),
              ParseError::kNone);
    std::vector<uint8_t> rebuilt(kGsiPacketBytes);
    GsiSend send;
    send.psn = captured.psn();
    build_gsi_packet(rebuilt, send, mad);
    write_icrc(frame.ip, rebuilt);
    EXPECT_EQ(rebuilt, frame.udp_payload);
  }
}

}  // namespace
}  // namespace softrdma::wire
