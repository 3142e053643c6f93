// softrdma's UC and UD packets against Linux Soft-RoCE's (tests/data: uc_send,
// uc_write, uc_imm, ud_send, ud_imm; issue 7): for every opcode both sides sent,
// the same headers in the same places (so the same payload offset), the same BTH
// flags a peer acts on (AckReq, TVer, P_Key, pad for the payload's length), a
// DETH's reserved byte zero; and every softrdma packet's ICRC checks.
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "engine/rc_fixture.h"
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

}  // namespace
}  // namespace softrdma::engine::testing
