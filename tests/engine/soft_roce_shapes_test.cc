// softrdma's UC, UD, SRQ and XRC packets against Linux Soft-RoCE's (tests/data:
// uc_send, uc_write, uc_imm, ud_send, ud_imm, srq; and, as Soft-RoCE has no XRC,
// XRC's against its RC captures plus the XRCETH; issue 7): for every opcode both sides sent,
// the same headers in the same places (so the same payload offset), the same BTH
// flags a peer acts on (AckReq, TVer, P_Key, pad for the payload's length), a
// DETH's reserved byte zero; and every softrdma packet's ICRC checks.
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "engine/xrc_fixture.h"
#include "support/pcap_reader.h"
#include "wire/icrc.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

// What a receiver reads of a packet beyond its addresses and sequence numbers.
struct Shape {
  size_t payload_offset = 0;
  bool ack_req = false;
  uint64_t tver = 0;
  uint64_t pkey = 0;
  bool pad_fits = false;  // pad == (4 - payload % 4) % 4 of the unpadded payload
  bool deth_reserved_zero = true;
  bool operator==(const Shape&) const = default;
};

Shape shape_of(std::span<uint8_t> bytes) {
  wire::PacketView p;
  EXPECT_EQ(wire::parse_packet(bytes, p), wire::ParseError::kNone);
  Shape s;
  s.payload_offset = p.info().header_bytes;
  s.ack_req = p.get(wire::bth::kAckReq) != 0;
  s.tver = p.get(wire::bth::kTver);
  s.pkey = p.get(wire::bth::kPkey);
  const uint64_t pad = p.get(wire::bth::kPadCount);
  const size_t unpadded = p.payload().size();  // PacketView's payload leaves the pad out
  s.pad_fits = pad == (4 - unpadded % 4) % 4;
  if (p.info().has(wire::Header::kDeth)) s.deth_reserved_zero = p.get(wire::deth::kReserved) == 0;
  return s;
}

// opcode -> shape of the captures' packets (all of one opcode must agree).
std::map<uint8_t, Shape> captured_shapes(std::initializer_list<const char*> names) {
  std::map<uint8_t, Shape> shapes;
  for (const char* name : names) {
    test::RoceCapture c =
        test::read_roce_pcap(std::string(SOFTRDMA_TEST_DATA) + "/" + name + ".pcap");
    EXPECT_TRUE(c.error.empty()) << name << ": " << c.error;
    for (test::RoceFrame& f : c.packets) {
      const Shape s = shape_of(f.udp_payload);
      auto [it, fresh] = shapes.emplace(f.udp_payload[0], s);
      EXPECT_TRUE(fresh || it->second == s) << name << ": opcode " << int(f.udp_payload[0]);
    }
  }
  return shapes;
}

// Compares what the fake network carried with the captures; returns the opcodes seen.
std::set<uint8_t> expect_same_shapes(const std::vector<transport::fake::FakePacket>& sent,
                                     const std::map<uint8_t, Shape>& captured) {
  std::set<uint8_t> seen;
  for (transport::fake::FakePacket p : sent) {
    const wire::IpUdpInfo info{.src = p.src, .dst = p.dst, .src_port = p.src_port};
    EXPECT_TRUE(wire::check_icrc(info, p.bytes)) << p.summary();
    auto it = captured.find(p.opcode());
    if (it == captured.end()) continue;
    seen.insert(p.opcode());
    EXPECT_TRUE(shape_of(p.bytes) == it->second) << "unlike Soft-RoCE's: " << p.summary();
  }
  return seen;
}

TEST_F(RcPairTest, UcPacketsAreShapedAsSoftRoces) {
  RcOptions options;
  options.type = IBV_QPT_UC;
  options.mtu = IBV_MTU_1024;  // the captures' active MTU
  options.b_qp_access = IBV_ACCESS_REMOTE_WRITE;
  connect(options);
  for (uint64_t i = 0; i < 4; ++i) post_recv(b, 8192 * i, 8192, i);
  // The captures' operations: SENDs of 64 and 4096 B, WRITEs of 3000 and 8 B, and
  // both with immediate.
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 4096, 0, 2), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 3000, 65536, 3), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 8, 65536, 4), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND_WITH_IMM, 0, 2049, 0, 5), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 2049, 65536, 6), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 16, 65536, 7), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND_WITH_IMM, 0, 16, 0, 8), 0);
  pump();
  const auto captured = captured_shapes({"uc_send", "uc_write", "uc_imm"});
  const std::set<uint8_t> seen = expect_same_shapes(net_.take_sent(), captured);
  for (const auto& [opcode, shape] : captured)
    EXPECT_TRUE(seen.contains(opcode)) << "softrdma sent no opcode " << int(opcode);
}

TEST_F(RcPairTest, UdPacketsAreShapedAsSoftRoces) {
  RcOptions options;
  options.type = IBV_QPT_UD;
  connect(options);
  Ah* ah = make_ah(a, b);
  ASSERT_NE(ah, nullptr);
  for (uint64_t i = 0; i < 4; ++i) post_recv(b, 8192 * i, 8192, i);
  const auto send = [&](ibv_wr_opcode opcode, uint32_t length, uint64_t wr_id) {
    return post_ud(a, ah, opcode, 0, length, wr_id, options.qkey);
  };
  ASSERT_EQ(send(IBV_WR_SEND, 512, 1), 0);   // ibv_ud_pingpong -s 512
  ASSERT_EQ(send(IBV_WR_SEND, 1024, 2), 0);  // ib_send_bw -c UD -s 1024
  ASSERT_EQ(send(IBV_WR_SEND_WITH_IMM, 6, 3), 0);
  pump();
  const auto captured = captured_shapes({"ud_send", "ud_imm"});
  const std::set<uint8_t> seen = expect_same_shapes(net_.take_sent(), captured);
  for (const auto& [opcode, shape] : captured)
    EXPECT_TRUE(seen.contains(opcode)) << "softrdma sent no opcode " << int(opcode);
  EXPECT_EQ(poll(b.rcq).size(), 3u);
}


// ibv_srq_pingpong -q 2 -s 2048, as captured: two-packet SENDs into an SRQ and
// their ACKs.
TEST_F(RcPairTest, SrqTrafficIsShapedAsSoftRoces) {
  RcOptions options;
  options.srq_wrs = 16;
  connect(options);
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_sge sge{b.addr(4096 * i), 4096, b.mr->key};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(b.srq->post_recv(&wr, &bad), 0);
  }
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(post(a, IBV_WR_SEND, 0, 2048, 0, i), 0);
  pump();
  const auto captured = captured_shapes({"srq"});
  const std::set<uint8_t> seen = expect_same_shapes(net_.take_sent(), captured);
  for (const auto& [opcode, shape] : captured)
    EXPECT_TRUE(seen.contains(opcode)) << "softrdma sent no opcode " << int(opcode);
  EXPECT_EQ(poll(b.rcq).size(), 4u);
}

// XRC (IBA A14) is RC with the XRC transport bits and, on requests, a 4-byte
// XRCETH after the BTH: Soft-RoCE's RC shapes so moved, for the captured
// operations (SEND, WRITE, READ, both atomics) and their responses.
TEST_F(XrcPairTest, XrcTrafficIsShapedAsSoftRocesRcPlusTheXrceth) {
  std::map<uint8_t, Shape> as_xrc;
  for (auto [opcode, shape] :
       captured_shapes({"rc_send", "rc_write", "rc_read", "rc_atomic"})) {
    const uint8_t xrc = uint8_t(wire::op::kXrc | (opcode & 0x1f));
    if (wire::opcode_info(xrc).has(wire::Header::kXrceth)) shape.payload_offset += 4;
    as_xrc.emplace(xrc, shape);
  }
  for (uint64_t i = 0; i < 6; ++i) post_srq(*srq1_, 8192 * i, 8192, i);
  const uint32_t srqn = srq1_->srqn();
  for (uint32_t size : {64u, 4096u, 2049u}) ASSERT_EQ(post_xrc(IBV_WR_SEND, 0, size, srqn, 1), 0);
  pump();  // SENDs alone, acknowledged by an ACK (READ responses would do it otherwise)
  for (uint32_t size : {3000u, 8u}) {
    ASSERT_EQ(post_xrc(IBV_WR_RDMA_WRITE, 0, size, srqn, 2, 65536), 0);
    ASSERT_EQ(post_xrc(IBV_WR_RDMA_READ, 0, size, srqn, 3, 65536), 0);
  }
  ASSERT_EQ(post_xrc(IBV_WR_ATOMIC_CMP_AND_SWP, 0, 8, srqn, 4, 65536), 0);
  ASSERT_EQ(post_xrc(IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, srqn, 5, 65536), 0);
  pump();
  const auto sent = net_.take_sent();
  ASSERT_FALSE(sent.empty());
  for (transport::fake::FakePacket p : sent) {
    wire::PacketView view;
    ASSERT_EQ(wire::parse_packet(p.bytes, view), wire::ParseError::kNone);
    if (view.info().has(wire::Header::kXrceth)) {
      EXPECT_EQ(view.get(wire::xrceth::kSrqn), srqn);
    }
  }
  const std::set<uint8_t> seen = expect_same_shapes(sent, as_xrc);
  for (const auto& [opcode, shape] : as_xrc)
    EXPECT_TRUE(seen.contains(opcode)) << "softrdma sent no opcode " << int(opcode);
  for (const ibv_wc& wc : poll(a.scq)) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace softrdma::engine::testing
