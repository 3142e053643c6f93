// Unreliable Connected QPs (IBA 9.8): the RC engine's packets with the UC opcodes,
// no acknowledgement, no retry; a message that loses a packet, finds no receive
// WQE or a bad R_Key is dropped whole and silently, and the QPs stay in RTS.
#include <algorithm>
#include <cstring>

#include "engine/rc_fixture.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

namespace op = wire::op;
using transport::fake::match::all_of;
using transport::fake::match::opcode;
using transport::fake::match::psn;

constexpr size_t kSrc = 0;
constexpr size_t kDst = 64 * 1024;
constexpr uint32_t kPsnA = 100;  // RcOptions::a_psn: a's first send PSN

class UcPairTest : public RcPairTest {
 protected:
  void SetUp() override {
    RcOptions options;
    options.type = IBV_QPT_UC;
    options.b_qp_access = IBV_ACCESS_REMOTE_WRITE;
    options.memory = 512 * 1024;
    connect(options);
  }
  uint64_t dropped_messages() { return b.counters().uc_messages_dropped.load(); }
};

// Over both paths: the wire carries them without any acknowledgement; on one host
// the sender places them in the peer's WQEs and sends no packet at all.
class UcPathTest : public UcPairTest, public ::testing::WithParamInterface<TestPath> {
 protected:
  void SetUp() override {
    take_path(GetParam());
    UcPairTest::SetUp();
  }
};
INSTANTIATE_TEST_SUITE_P(Paths, UcPathTest, ::testing::Values(TestPath::kWire, TestPath::kHost,
                                           TestPath::kSharedAddress),
                         path_name);

TEST_P(UcPathTest, SendAndWriteWithImmediateArriveWithoutAnyAcknowledgement) {
  fill(a, kSrc, 3000, 1);
  post_recv(b, kDst, 4096, 7);
  post_recv(b, kDst + 8192, 64, 8);
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 3000, 0, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE_WITH_IMM, kSrc, 3000, kDst + 16384, 2), 0);
  pump();
  std::vector<uint8_t> opcodes;
  for (const auto& p : net_.take_sent()) {
    EXPECT_EQ(p.src, a.transport->local_gid()) << "b sent " << p.summary();
    EXPECT_FALSE(p.ack_req()) << "UC asks for no ACK: " << p.summary();
    opcodes.push_back(p.opcode());
  }
  if (GetParam() == TestPath::kWire) {
    const std::vector<uint8_t> expected = {
        op::kUc | op::kSendFirst,  op::kUc | op::kSendMiddle,  op::kUc | op::kSendLast,
        op::kUc | op::kWriteFirst, op::kUc | op::kWriteMiddle, op::kUc | op::kWriteLastImm};
    EXPECT_EQ(opcodes, expected);
  } else {
    EXPECT_TRUE(opcodes.empty()) << "placed by the sender";
    EXPECT_EQ(a.counters().host_sends.load(), 2u);
  }
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[1].status, IBV_WC_SUCCESS);
  auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].wr_id, 7u);
  EXPECT_EQ(received[0].byte_len, 3000u);
  EXPECT_EQ(received[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_TRUE(same(a, kSrc, b, kDst, 3000));
  EXPECT_TRUE(same(a, kSrc, b, kDst + 16384, 3000));
}

// IBA 9.8.3: a missing packet loses its message, silently; the receive WQE it
// would have filled takes the next message.
TEST_F(UcPairTest, ALostMiddlePacketDropsTheWholeSendAndTheNextOneTakesItsWqe) {
  fill(a, kSrc, 3000, 2);
  post_recv(b, kDst, 4096, 7);
  net_.drop(all_of({opcode(op::kUc | op::kSendMiddle), psn(kPsnA + 1)}));
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 3000, 0, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc + 3000, 100, 0, 2), 0);
  pump();
  EXPECT_EQ(poll(a.scq).size(), 2u) << "the sender completes both: UC never knows";
  auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 7u);
  EXPECT_EQ(received[0].byte_len, 100u);
  EXPECT_TRUE(same(a, kSrc + 3000, b, kDst, 100));
  EXPECT_EQ(dropped_messages(), 1u);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  for (const auto& p : net_.take_sent()) EXPECT_EQ(p.src, a.transport->local_gid());
}

// The LAST packet lost: the next FIRST begins a new message (IBA 9.8.3.1), the
// unfinished one is given up.
TEST_F(UcPairTest, ALostLastPacketIsNoticedAtTheNextMessagesFirst) {
  fill(a, kSrc, 4096, 3);
  post_recv(b, kDst, 4096, 7);
  net_.drop(opcode(op::kUc | op::kSendLast));
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 2048, 0, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc + 2048, 2048, 0, 2), 0);
  pump();
  auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].byte_len, 2048u);
  EXPECT_TRUE(same(a, kSrc + 2048, b, kDst, 2048));
  EXPECT_EQ(dropped_messages(), 1u);
}

// No receive WQE, a bad R_Key: UC has no NAK; the message is dropped and counted.
TEST_F(UcPairTest, NoReceiveWqeOrABadRkeyDropsTheMessageAndTheQpLives) {
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 64, 0, 1), 0);
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE, kSrc, 64, kDst, 2,
                      [](ibv_send_wr& wr, ibv_sge&) { wr.wr.rdma.rkey ^= 0x5a5a; }),
            0);
  pump();
  EXPECT_EQ(dropped_messages(), 2u);
  EXPECT_TRUE(poll(b.rcq).empty());
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  for (const auto& p : net_.take_sent()) EXPECT_EQ(p.src, a.transport->local_gid());
  // The QP goes on: the next SEND finds its WQE.
  post_recv(b, kDst, 64, 9);
  fill(a, kSrc, 64, 4);
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 64, 0, 3), 0);
  pump();
  auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 9u);
  EXPECT_TRUE(same(a, kSrc, b, kDst, 64));
}

// On the same-host path the requester checks the R_Key itself; what it refuses
// it drops as the wire's UC responder would: the WQE completes as sent, nothing
// lands, no fault reaches the peer, and both QPs stay in RTS.
class UcHostTest : public UcPairTest {
 protected:
  void SetUp() override {
    same_host_ = true;
    UcPairTest::SetUp();
  }
};

TEST_F(UcHostTest, ABadRkeyDropsTheWriteSilentlyAndTheQpsLive) {
  fill(a, kSrc, 64, 3);
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE, kSrc, 64, kDst, 1,
                      [](ibv_send_wr& wr, ibv_sge&) { wr.wr.rdma.rkey ^= 0x5a5a; }),
            0);
  pump();
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.counters().host_refused.load(), 1u);
  EXPECT_EQ(b.counters().peer_faults_taken.load(), 0u);
  EXPECT_FALSE(same(a, kSrc, b, kDst, 64)) << "nothing landed";
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, kSrc, 64, kDst, 2), 0);
  pump();
  EXPECT_EQ(poll(a.scq).at(0).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, kSrc, b, kDst, 64));
  EXPECT_EQ(a.counters().tx_packets.load(), 0u) << "both on the same-host path";
}

// No WQE, or one too short: the SEND is dropped (IBA 9.8.3.1), completes as sent,
// and a WQE too short stays for the next message.
TEST_F(UcHostTest, NoWqeOrOneTooShortDropsTheSendAndKeepsTheWqe) {
  fill(a, kSrc, 128, 2);
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 64, 0, 1), 0);
  pump();
  post_recv(b, kDst, 64, 9);
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 128, 0, 2), 0);
  pump();
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, 64, 0, 3), 0);
  pump();
  const auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 3u);
  for (const auto& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_EQ(a.counters().host_refused.load(), 2u);
  const auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 9u);
  EXPECT_EQ(received[0].byte_len, 64u);
  EXPECT_TRUE(same(a, kSrc, b, kDst, 64));
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
}

TEST_F(UcPairTest, ReadAndAtomicsAreRefusedAtPost) {
  EXPECT_EQ(post(a, IBV_WR_RDMA_READ, kSrc, 64, kDst, 1), EINVAL);
  EXPECT_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, kSrc, kDst, 1, 0, 2), EINVAL);
  EXPECT_EQ(post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, kSrc, kDst, 1, 0, 3), EINVAL);
}

// Nothing paces UC but the engine: a window's worth of packets per turn, the rest in
// later turns, so a long message neither holds the engine nor floods the peer.
TEST_F(UcPairTest, ALongWriteLeavesAWindowPerTurn) {
  constexpr uint32_t kBytes = 200 * 1024;  // 200 packets at the 1024-byte MTU
  fill(a, kSrc, kBytes, 5);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, kSrc, kBytes, kDst, 1), 0);
  EXPECT_EQ(net_.take_sent().size(), options_.window) << "the post's turn sent one window";
  a.device->progress();
  EXPECT_EQ(net_.take_sent().size(), options_.window) << "and each later turn another";
  pump();
  auto done = poll(a.scq);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, kSrc, b, kDst, kBytes));
  EXPECT_EQ(dropped_messages(), 0u);
}

}  // namespace
}  // namespace softrdma::engine::testing
