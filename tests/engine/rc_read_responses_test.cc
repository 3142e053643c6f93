// Issue 6 defect 2: the requester accepts a READ's data only as the responses IBA
// 9.7.5.2.5 defines, FIRST, MIDDLE ..., LAST or one ONLY, with an ACK in the AETH.
// b's own responses are dropped; forged ones are sent to a in their place, with
// the right PSNs. A malformed stream never completes the READ; it is counted.
#include <vector>

#include "engine/rc_fixture.h"
#include "wire/fields.h"
#include "wire/opcodes.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace softrdma::engine::testing {
namespace {

namespace op = wire::op;

constexpr uint16_t kForgedPort = 0xC001;

struct Forged {
  const char* name;
  uint32_t read_packets;          // the READ asks for this many MTUs
  std::vector<uint8_t> opcodes;   // what comes back, PSN by PSN
  uint8_t syndrome = wire::syndrome::ack();
  bool completes = false;         // a well-formed stream (the control case)
};

std::vector<uint8_t> response(uint8_t opcode, uint32_t qpn, uint32_t psn, uint8_t syndrome) {
  const size_t payload = 1024;
  std::vector<uint8_t> bytes(wire::packet_bytes(opcode, payload));
  wire::PacketView p = wire::build_packet(bytes, opcode, payload);
  p.set(wire::bth::kPkey, 0xffff);
  p.set(wire::bth::kDestQp, qpn);
  p.set(wire::bth::kPsn, psn);
  if (p.info().has(wire::Header::kAeth)) p.set(wire::aeth::kSyndrome, syndrome);
  return bytes;
}

class ForgedReadResponses : public RcPairTest, public ::testing::WithParamInterface<Forged> {};

TEST_P(ForgedReadResponses, OnlyAWellFormedStreamCompletesTheRead) {
  const Forged& f = GetParam();
  // b's own answers (to the READ, and to any re-request) never arrive; the forged
  // ones, sent from another source port, do.
  const auto b_gid = b.device->gids()[1];
  net_.drop([b_gid](const transport::fake::FakePacket& p) {
    return p.src == b_gid && p.src_port != kForgedPort;
  }, transport::fake::FakeNetwork::kEvery);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, f.read_packets * 1024, 0, 1), 0);
  pump();  // b answered; its responses were dropped
  for (size_t i = 0; i < f.opcodes.size(); ++i) {
    net_.inject(b.device->gids()[1], a.device->gids()[1],
                response(f.opcodes[i], a.qp->qpn(),
                         wire::psn_add(options_.a_psn, int32_t(i)), f.syndrome),
                kForgedPort);
  }
  pump();
  const auto done = poll(a.scq);
  if (f.completes) {
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(a.counters().bad_read_responses.load(), 0u);
  } else {
    for (const ibv_wc& wc : done) EXPECT_NE(wc.status, IBV_WC_SUCCESS) << f.name;
    EXPECT_GE(a.counters().bad_read_responses.load(), 1u) << f.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Streams, ForgedReadResponses,
    ::testing::Values(
        Forged{"first_middle_last", 3,
               {op::kRcReadResponseFirst, op::kRcReadResponseMiddle, op::kRcReadResponseLast},
               wire::syndrome::ack(), true},
        Forged{"three_only", 3,
               {op::kRcReadResponseOnly, op::kRcReadResponseOnly, op::kRcReadResponseOnly}},
        Forged{"three_last", 3,
               {op::kRcReadResponseLast, op::kRcReadResponseLast, op::kRcReadResponseLast}},
        Forged{"first_middle_middle", 3,
               {op::kRcReadResponseFirst, op::kRcReadResponseMiddle,
                op::kRcReadResponseMiddle}},
        Forged{"first_first", 2, {op::kRcReadResponseFirst, op::kRcReadResponseFirst}},
        Forged{"lone_last", 1, {op::kRcReadResponseLast}},
        Forged{"only_with_nak", 1, {op::kRcReadResponseOnly},
               wire::syndrome::nak(wire::syndrome::kNakRemoteAccess)}),
    [](const ::testing::TestParamInfo<Forged>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace softrdma::engine::testing
