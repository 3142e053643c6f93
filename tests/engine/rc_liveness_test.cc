// The RC liveness probe (issue 14 defect 10, docs/decisions/retransmission.md "Idle
// connections"): an idle QP whose peer died goes to Error in bounded time; a peer
// that answers never lets the application see the probe. Manual clock throughout.
#include <cstring>
#include <vector>

#include "engine/rc_fixture.h"
#include "wire/fields.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakeNetwork;
namespace match = transport::fake::match;
namespace op = wire::op;

constexpr Nanos kMs = 1'000'000;

class LivenessTest : public RcPairTest {
 protected:
  void SetUp() override {
    RcOptions o;
    o.timeout = 14;  // 67 ms, seven retries: what applications ask for
    o.retry_cnt = 7;
    connect(o);
  }
  std::vector<AsyncEvent> events(Node& n) {
    std::vector<AsyncEvent> out;
    AsyncEvent e{};
    while (n.device->next_async_event(e)) out.push_back(e);
    return out;
  }
};

// Both sides wait for a message that never comes, for several idle intervals.
// Expect: probes (a zero-length RDMA WRITE at the last PSN, AckReq), each drawing
// an ACK; no completion, no receive consumed, no byte changed,
// nothing counted as an error; both QPs stay in RTS.
TEST_F(LivenessTest, AProbeAnsweredIsInvisibleToTheApplication) {
  post_recv(a, 0, 4096, 1);
  post_recv(b, 0, 4096, 2);
  fill(a, 4096, 4096, 41);
  fill(b, 4096, 4096, 42);
  const std::vector<uint8_t> a_before = a.mem, b_before = b.mem;
  advance(3'500 * kMs);
  for (Node* n : {&a, &b}) {
    EXPECT_EQ(n->qp->state(), IBV_QPS_RTS);
    EXPECT_EQ(n->counters().idle_probes_failed.load(), 0u);
    EXPECT_EQ(n->counters().out_of_sequence_responses.load(), 0u);
    EXPECT_EQ(n->counters().error_naks_sent.load(), 0u);
    EXPECT_TRUE(poll(n->scq).empty());
    EXPECT_TRUE(poll(n->rcq).empty());
    EXPECT_EQ(n->qp->rq().size(), 1u);
    EXPECT_TRUE(events(*n).empty());
  }
  // One side's probes keep both alive: its peer hears them and need not ask.
  EXPECT_GE(a.counters().idle_probes_sent.load() + b.counters().idle_probes_sent.load(), 2u);
  EXPECT_EQ(b.counters().duplicate_requests.load(), a.counters().idle_probes_sent.load());
  EXPECT_EQ(a.counters().duplicate_requests.load(), b.counters().idle_probes_sent.load());
  EXPECT_EQ(a.mem, a_before);
  EXPECT_EQ(b.mem, b_before);
  // Traffic after the probes: PSNs and MSNs are where they were.
  fill(a, 8192, 2000, 43);
  ASSERT_EQ(post(a, IBV_WR_SEND, 8192, 2000, 0, 7), 0);
  pump();
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_EQ(poll(b.rcq).at(0).byte_len, 2000u);
  EXPECT_TRUE(same(a, 8192, b, 0, 2000));
}

// The responder's side of a probe, read off the wire after some traffic: a's probe
// is RDMA_WRITE_ONLY, PSN = a's last PSN, DMA length 0, AckReq; b answers with an
// ACK at that PSN carrying b's MSN unchanged (IBA 9.7.5.1.2: a duplicate is
// re-acknowledged, not executed), even though b's QP grants no remote write.
TEST_F(LivenessTest, TheResponderAcknowledgesAProbeWithoutExecutingIt) {
  RcOptions o;
  o.timeout = 14;
  o.retry_cnt = 7;
  o.b_qp_access = 0;  // a WRITE that were executed would draw a NAK
  connect(o);
  post_recv(b, 0, 4096, 1);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 3000, 0, 1), 0);  // PSNs a_psn .. a_psn + 2
  pump();
  ASSERT_EQ(poll(b.rcq).size(), 1u);
  ASSERT_EQ(poll(a.scq).size(), 1u);
  net_.take_sent();
  advance(1'500 * kMs);
  const uint32_t last_psn = options_.a_psn + 2;
  bool saw_probe = false, saw_answer = false;
  for (const auto& p : net_.take_sent()) {
    if (p.dest_qp() == b.qp->qpn() && p.opcode() == op::kRcWriteOnly) {
      saw_probe = true;
      EXPECT_EQ(p.psn(), last_psn);
      EXPECT_TRUE(p.ack_req());
      EXPECT_EQ(p.view().get(wire::reth::kDmaLength), 0u);
    }
    if (p.dest_qp() == a.qp->qpn() && p.opcode() == op::kRcAcknowledge) {
      saw_answer = true;
      EXPECT_EQ(p.psn(), last_psn);
      EXPECT_EQ(p.view().get(wire::aeth::kSyndrome), 0x1fu);  // ACK, no credit count
      EXPECT_EQ(p.view().get(wire::aeth::kMsn), 1u);  // one message, not two
    }
  }
  EXPECT_TRUE(saw_probe);
  EXPECT_TRUE(saw_answer);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(b.counters().error_naks_sent.load(), 0u);
  EXPECT_TRUE(poll(b.rcq).empty());
  EXPECT_TRUE(poll(a.scq).empty());
}

// b goes silent (killed: nothing it would send arrives) while a only waits for a
// message, nothing outstanding. Expect: a probes after the idle interval (1 s),
// retries as the retransmission timer does (67, 134, 268, 537 ms, then 1 s), and
// after retry_cnt + 1 unanswered probes its QP is in Error: the receives flushed
// with IBV_WC_WR_FLUSH_ERR and IBV_EVENT_QP_FATAL raised, within the bound
// idle interval + its tick (0.25 s) + (retry_cnt + 1) x 1 s = 9.25 s.
TEST_F(LivenessTest, AnIdleQpWhosePeerWentSilentFailsWithinTheBound) {
  post_recv(a, 0, 4096, 1);
  post_recv(a, 4096, 4096, 2);
  net_.drop(match::from(b.device->gids()[1]), FakeNetwork::kEvery);
  const Nanos start = clock_.now();
  while (a.qp->state() == IBV_QPS_RTS && clock_.now() - start < 20'000 * kMs) advance(kStep);
  const Nanos took = clock_.now() - start;
  ASSERT_EQ(a.qp->state(), IBV_QPS_ERR);
  EXPECT_GE(took, 1'000 * kMs + 5'000 * kMs);  // idle, then 67 + 134 + 268 + 537 + 4000
  EXPECT_LE(took, 1'250 * kMs + (options_.retry_cnt + 1) * 1'000 * kMs);
  EXPECT_EQ(a.counters().idle_probes_sent.load(), options_.retry_cnt + 1u);
  EXPECT_EQ(a.counters().idle_probes_failed.load(), 1u);
  auto wcs = poll(a.rcq);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  const std::vector<AsyncEvent> raised = events(a);
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0].type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(raised[0].qpn, a.qp->qpn());
}

// SOFTRDMA_IDLE_PROBE_MS=0: no probe, ever; the QP waits as before.
TEST_F(LivenessTest, ProbesCanBeTurnedOff) {
  RcOptions o;
  o.timeout = 14;
  o.idle_probe = 0;
  connect(o);
  net_.drop(match::from(b.device->gids()[1]), FakeNetwork::kEvery);
  advance(12'000 * kMs);
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(a.counters().idle_probes_sent.load(), 0u);
}

}  // namespace
}  // namespace softrdma::engine::testing
