// What must not happen to an RC connection whatever arrives or whatever the
// application does next: stale timers, stale or forged responses, small windows.
#include <vector>

#include "engine/rc_fixture.h"
#include "wire/fields.h"
#include "wire/opcodes.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace softrdma::engine::testing {
namespace {

namespace match = transport::fake::match;
namespace op = wire::op;

constexpr size_t kDst = 128 * 1024;

// An ACKNOWLEDGE from b to a's QP with the given syndrome and PSN, as a peer (or an
// attacker on the path) could send it.
std::vector<uint8_t> ack_packet(uint32_t dest_qpn, uint8_t syndrome, uint32_t psn) {
  std::vector<uint8_t> bytes(wire::packet_bytes(op::kRcAcknowledge, 0));
  wire::PacketView p = wire::build_packet(bytes, op::kRcAcknowledge, 0);
  p.set(wire::bth::kPkey, 0xffff);
  p.set(wire::bth::kDestQp, dest_qpn);
  p.set(wire::bth::kPsn, psn);
  p.set(wire::aeth::kSyndrome, syndrome);
  return bytes;
}

// A QP fails with packets in flight, then is reconnected (ERR -> RESET -> INIT ->
// RTR). Expect: the retransmission timer armed before the error never acts on the
// reconnected QP (it stays in RTR however long we wait).
TEST_F(RcPairTest, TimersFromBeforeAnErrorDoNotHitTheReconnectedQp) {
  net_.drop(match::from(a.device->gids()[1]), transport::fake::FakeNetwork::kEvery);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1), 0);
  pump();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE), 0);
  attr.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE), 0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                   IBV_QP_ACCESS_FLAGS), 0);
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = b.qp->qpn();
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.grh.sgid_index = 1;
  std::copy(b.device->gids()[1].begin(), b.device->gids()[1].end(), attr.ah_attr.grh.dgid.raw);
  ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER), 0);
  post_recv(a, 0, 64, 9);
  advance(1'000'000'000);  // far past every retry of the old timer
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTR);
  EXPECT_EQ(a.qp->rq().size(), 1u);  // the receive was not flushed
}

// A window smaller than the AckReq interval: a long WRITE still flows on ACKs, not
// on the ACK timer (IBA 9.7.5.1.4: the requester asks for ACKs in time).
TEST_F(RcPairTest, SmallWindowStillFlowsOnAcks) {
  RcOptions o;
  o.window = 4;
  connect(o);
  fill(a, 0, 40 * 1024, 21);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 40 * 1024, kDst, 1), 0);
  pump();  // no time passes: only ACKs can open the window
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 40 * 1024));
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), 0u);
}

// The RNR NAK is duplicated by the network: the second copy arrives after the
// retry. Expect: no lost, reordered or repeated work; the data is right.
TEST_F(RcPairTest, DuplicatedRnrNakIsHarmless) {
  net_.duplicate(match::opcode(op::kRcAcknowledge), 1);
  fill(a, 0, 300, 22);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post(a, IBV_WR_SEND, 100 * i, 100, 0, i), 0);
  pump();
  for (int i = 0; i < 3; ++i) post_recv(b, kDst + 100 * i, 100, i);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 3u);
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(sent[i].wr_id, i);
  }
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wr_id, i);
  EXPECT_TRUE(same(a, 0, b, kDst, 300));
}

// An ACK for PSNs never sent (a ghost), and a NAK of a reserved type, are dropped
// and counted: no completion, no state change (IBA 9.7.5.2.1, Table 42).
TEST_F(RcPairTest, GhostAndReservedResponsesAreIgnored) {
  net_.hold(match::to(b.device->gids()[1]));  // a's request stays unanswered
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 1), 0);
  pump();
  const uint64_t before = a.counters().out_of_sequence_responses.load();
  const auto from = b.device->gids()[1];
  const auto to = a.device->gids()[1];
  net_.inject(from, to, ack_packet(a.qp->qpn(), wire::syndrome::ack(),
                                   wire::psn_add(options_.a_psn, 50)));
  net_.inject(from, to, ack_packet(a.qp->qpn(), 0x40, options_.a_psn));  // reserved type
  pump();
  EXPECT_TRUE(poll(a.scq).empty());
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(a.counters().out_of_sequence_responses.load(), before + 2);
  net_.clear_rules();
  net_.release_held();
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
}

// Issue 6 defect 3: a READ request that carries payload bytes (its opcode has
// none) is malformed. Expect: NAK invalid request, b's QP in Error, no READ
// response, and no byte of b's memory sent (IBA 9.7.5.1.5).
TEST_F(RcPairTest, ReadRequestWithPayloadIsNakedAsInvalid) {
  const size_t headers = wire::packet_bytes(op::kRcReadRequest, 0) - wire::kIcrcBytes;
  std::vector<uint8_t> bytes(headers + 8 + wire::kIcrcBytes, 0x77);
  wire::PacketView p = wire::build_packet(std::span(bytes).first(headers + wire::kIcrcBytes),
                                          op::kRcReadRequest, 0);
  p.set(wire::bth::kPkey, 0xffff);
  p.set(wire::bth::kDestQp, b.qp->qpn());
  p.set(wire::bth::kPsn, options_.a_psn);
  p.set(wire::reth::kVa, b.addr(0));
  p.set(wire::reth::kRkey, b.mr->key);
  p.set(wire::reth::kDmaLength, 16);
  net_.inject(a.device->gids()[1], b.device->gids()[1], bytes);
  b.device->progress();
  std::vector<transport::fake::FakePacket> sent;
  for (auto& packet : net_.take_sent())
    if (packet.src == b.device->gids()[1]) sent.push_back(packet);
  ASSERT_EQ(sent.size(), 1u) << "one answer";
  EXPECT_EQ(sent[0].opcode(), op::kRcAcknowledge);
  const uint8_t syndrome = uint8_t(sent[0].view().get(wire::aeth::kSyndrome));
  EXPECT_EQ(syndrome, wire::syndrome::nak(wire::syndrome::kNakInvalidRequest));
  EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(b.counters().error_naks_sent.load(), 1u);
}

}  // namespace
}  // namespace softrdma::engine::testing
