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

namespace softrdma::engine::testing {
namespace {

// Issue 14 defect 2: Linux Soft-RoCE answers a READ re-requested from inside
// the message by continuing the first request's sequence (MIDDLE ... LAST at the
// re-requested PSNs), never with a new FIRST; late answers to the first request
// look the same. Both carry the right bytes at the right PSNs.
class ContinuedReadResponses : public RcPairTest {};

TEST_F(ContinuedReadResponses, ReRequestAnsweredAsAContinuationCompletesTheRead) {
  constexpr uint32_t kPackets = 4;
  constexpr uint32_t kLostFrom = 2;  // b's answers from here on are lost
  fill(b, 0, kPackets * 1024, 7);
  const auto b_gid = b.device->gids()[1];
  const uint32_t a_psn = options_.a_psn;
  net_.drop([b_gid, a_psn](const transport::fake::FakePacket& p) {
    return p.src == b_gid && p.src_port != kForgedPort &&
           !wire::psn_before(p.psn(), wire::psn_add(a_psn, kLostFrom));
  }, transport::fake::FakeNetwork::kEvery);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, kPackets * 1024, 0, 1), 0);
  pump();  // FIRST and MIDDLE placed; the rest lost
  // The timeout re-requests from the first missing PSN.
  const uint64_t requests_before = a.counters().retries.load();
  ASSERT_TRUE(run_until([&] { return a.counters().retries.load() > requests_before; }));
  // The answer comes as Soft-RoCE sends it: the first request's MIDDLE and LAST.
  const uint8_t continuation[] = {op::kRcReadResponseMiddle, op::kRcReadResponseLast};
  for (uint32_t k = 0; k < 2; ++k) {
    const uint32_t index = kLostFrom + k;
    auto bytes = response(continuation[k], a.qp->qpn(), wire::psn_add(a_psn, int32_t(index)),
                          wire::syndrome::ack());
    wire::PacketView view(bytes);
    auto payload = view.payload();
    std::copy_n(b.mem.data() + index * 1024, payload.size(), payload.begin());
    net_.inject(b_gid, a.device->gids()[1], std::move(bytes), kForgedPort);
  }
  pump();
  const auto done = poll(a.scq);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, 0, kPackets * 1024));
  EXPECT_EQ(a.counters().bad_read_responses.load(), 0u);
}

}  // namespace
}  // namespace softrdma::engine::testing
