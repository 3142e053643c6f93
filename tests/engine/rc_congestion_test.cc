// Congestion control of an RC QP, role by role (rc_role_fixture.h): the
// notification point answers CE-marked packets with CNPs (RoCEv2 Annex A17.9),
// the reaction point paces its requests after a CNP (DCQCN; rate_control.h).
#include <gtest/gtest.h>

#include "engine/rc_role_fixture.h"
#include "wire/fields.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakePacket;
namespace op = wire::op;

size_t count_opcode(const std::vector<FakePacket>& packets, uint8_t opcode) {
  size_t n = 0;
  for (const FakePacket& p : packets) n += p.opcode() == opcode;
  return n;
}

class RcCongestionTest : public RcRoleTest {};

TEST_F(RcCongestionTest, ACeMarkedRequestIsAnsweredWithOneCnpPerInterval) {
  post_recv(0, 4096, 1);
  post_recv(0, 4096, 2);
  post_recv(0, 4096, 3);
  std::vector<FakePacket> sent = deliver(send_only(5000, 64), /*marked=*/true);
  ASSERT_EQ(count_opcode(sent, op::kCnp), 1u);
  const FakePacket* cnp = nullptr;
  for (const FakePacket& p : sent)
    if (p.opcode() == op::kCnp) cnp = &p;
  // A17.9.3: to the sending QP, BECN set, PSN 0, 16 reserved bytes, no AckReq.
  EXPECT_EQ(cnp->dest_qp(), kPeerQpn);
  EXPECT_EQ(cnp->view().get(wire::bth::kBecn), 1u);
  EXPECT_EQ(cnp->psn(), 0u);
  EXPECT_FALSE(cnp->ack_req());
  EXPECT_EQ(cnp->bytes.size(), wire::kBthBytes + op::kCnpReservedBytes + wire::kIcrcBytes);
  EXPECT_EQ(cnp->dst, peer_gid_);
  // The request itself was executed and acknowledged as usual.
  EXPECT_EQ(count_opcode(sent, op::kRcAcknowledge), 1u);

  // Another mark within 50 us: no second CNP (DCQCN's N).
  clock_.advance(10'000);
  EXPECT_EQ(count_opcode(deliver(send_only(5001, 64), true), op::kCnp), 0u);
  // An unmarked packet: none.
  clock_.advance(60'000);
  EXPECT_EQ(count_opcode(deliver(send_only(5002, 64), false), op::kCnp), 0u);
  EXPECT_EQ(counters().ce_marked_received.load(), 2u);
  EXPECT_EQ(counters().cnps_sent.load(), 1u);
}

TEST_F(RcCongestionTest, AfterACnpTheRequesterSendsABurstThenPacesAtTheCutRate) {
  RoleOptions options;
  options.line_rate_bytes_per_ns = 0.125;  // 1 Gbit/s; a CNP cuts it to 500 Mbit/s
  open(options);
  // Unpaced before any CNP: a 32-packet message goes at once.
  ASSERT_EQ(post_send(0, 32 * 1024, 1), 0);
  EXPECT_EQ(count_opcode(run(), op::kRcSendMiddle), 30u);
  EXPECT_EQ(deliver(ack(100 + 31)).size(), 0u);

  EXPECT_EQ(deliver(PeerPacket(op::kCnp, qp_->qpn(), 0, op::kCnpReservedBytes)).size(), 0u);
  EXPECT_EQ(counters().cnps_received.load(), 1u);
  EXPECT_EQ(qp_->counters().cnps_received.load(), 1u);
  EXPECT_EQ(qp_->counters().rate_mbps.load(), 500u);  // `softrdma status` shows it
  // 64 packets: the bucket's 64 KiB lets 61 go (1084 bytes each on the wire) ...
  ASSERT_EQ(post_send(0, 64 * 1024, 2), 0);
  const size_t burst = run().size();
  EXPECT_EQ(burst, 61u);
  // ... and the rest leave one per 1084 B / 0.0625 B/ns = 17.3 us, from the pacer's
  // timer: 3 more within 60 us (before DCQCN's first increase, at 300 us).
  EXPECT_EQ(advance(60'000, 1'000).size(), 3u);
  EXPECT_EQ(deliver(ack(132 + 63)).size(), 0u);
  EXPECT_EQ(poll(scq_).size(), 2u);
  // Without further CNPs the rate recovers to the line: unpaced again.
  advance(3'000'000, 100'000);
  ASSERT_EQ(post_send(0, 64 * 1024, 3), 0);
  EXPECT_EQ(run().size(), 64u);
  EXPECT_EQ(qp_->counters().rate_mbps.load(), 0u);
}

TEST_F(RcCongestionTest, AfterACnpReadResponsesArePacedToo) {
  RoleOptions options;
  options.line_rate_bytes_per_ns = 0.125;
  open(options);
  deliver(PeerPacket(op::kCnp, qp_->qpn(), 0, op::kCnpReservedBytes));
  // A 64-packet READ: the responder's bucket lets 61 responses go, the pacer's
  // timer the rest.
  const std::vector<FakePacket> burst = deliver(read_request(5000, 0, 64 * 1024));
  EXPECT_EQ(burst.size(), 61u);
  EXPECT_EQ(burst.back().psn(), 5060u);
  const std::vector<FakePacket> rest = advance(200'000, 1'000);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest.back().opcode(), op::kRcReadResponseLast);
  EXPECT_EQ(rest.back().psn(), 5063u);
}

TEST_F(RcCongestionTest, ACnpForAnotherQpOrFromAStrangerChangesNothing) {
  RoleOptions options;
  options.line_rate_bytes_per_ns = 0.125;
  open(options);
  PeerPacket cnp(op::kCnp, qp_->qpn(), 0, op::kCnpReservedBytes);
  net_.inject(transport::fake::ipv4_gid(10, 0, 0, 9), qp_gid_, cnp.take());
  run();
  EXPECT_EQ(counters().cnps_received.load(), 0u);
  EXPECT_EQ(counters().rx_wrong_source.load(), 1u);
  ASSERT_EQ(post_send(0, 64 * 1024, 1), 0);
  EXPECT_EQ(run().size(), 64u);  // unpaced
}

}  // namespace
}  // namespace softrdma::engine::testing
