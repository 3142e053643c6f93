// Unreliable Datagram QPs (IBA 9.8.4, 10.2.5): a send names its destination (an
// AH, a QP number, a Q_Key), goes as one UD_SEND_ONLY packet with a DETH, and
// completes at once; a receive starts with the 40-byte GRH (here the IPv4 header
// in its last 20 bytes). Wrong Q_Key, no receive WQE, too long: dropped, counted.
// Every body runs over both paths: on one host the sender places the message in
// the receiver's WQE itself (ud/datagram_host.cc) and sends no packet.
#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "engine/rc_fixture.h"
#include "samehost/peer_node.h"
#include "engine/ud/datagram.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

namespace op = wire::op;

constexpr size_t kSrc = 0;
constexpr size_t kDst = 64 * 1024;
constexpr uint32_t kGrh = ud::kGrhBytes;

class UdPairTest : public RcPairTest {
 protected:
  void SetUp() override {
    RcOptions options;
    options.type = IBV_QPT_UD;
    connect(options);
    ah_to_b_ = make_ah(a, b);
    ASSERT_NE(ah_to_b_, nullptr);
  }

  // A UD SEND from a to b's QP; `qkey` as the WR names it.
  int send_to_b(uint32_t length, uint64_t wr_id, uint32_t qkey) {
    return post_ud(a, ah_to_b_, IBV_WR_SEND, kSrc, length, wr_id, qkey);
  }

  bool on_host() const { return same_host_; }
  // What b's QP dropped: counted by b over the wire, by the sender on one host.
  uint64_t dropped(uint64_t wire_count) {
    return on_host() ? a.counters().host_datagrams_dropped.load() : wire_count;
  }
  void post_recv_with_lkey(uint32_t lkey, uint64_t wr_id) {
    ibv_sge sge{b.addr(kDst), 4096, lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(b.qp->post_recv(&wr, &bad), 0);
  }

  Ah* ah_to_b_ = nullptr;
};

class UdPathTest : public UdPairTest, public ::testing::WithParamInterface<TestPath> {
 protected:
  void SetUp() override {
    take_path(GetParam());
    UdPairTest::SetUp();
  }
};
INSTANTIATE_TEST_SUITE_P(Paths, UdPathTest, ::testing::Values(TestPath::kWire, TestPath::kHost,
                                           TestPath::kSharedAddress),
                         path_name);

// One host only: a UD QP's queue is filled by any process at once, so its WQEs
// are claimed as an SRQ's are and complete in claim order (ud/datagram_host.cc).
class UdHostTest : public UdPairTest {
 protected:
  void SetUp() override {
    same_host_ = true;
    UdPairTest::SetUp();
  }
  samehost::RecvResult* results() {
    return b.host->node().recv_results(b.qp->host_recv_queue() - 1);
  }
};

TEST_P(UdPathTest, ASendArrivesAfterTheGrhWithTheSendersQpNumber) {
  fill(a, kSrc, 1000, 1);
  post_recv(b, kDst, kGrh + 1000, 5);
  ASSERT_EQ(post_ud(a, ah_to_b_, IBV_WR_SEND_WITH_IMM, kSrc, 1000, 1, options_.qkey), 0);
  const auto sent = net_.take_sent();
  if (on_host()) {
    EXPECT_TRUE(sent.empty()) << "placed by the sender: no packet";
    EXPECT_EQ(a.counters().host_sends.load(), 1u);
  } else {
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].opcode(), op::kUd | op::kSendOnlyImm);
    EXPECT_EQ(sent[0].view().get(wire::deth::kQkey), options_.qkey);
    EXPECT_EQ(sent[0].view().get(wire::deth::kSrcQp), a.qp->qpn());
  }
  pump();
  auto done = poll(a.scq);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(received[0].byte_len, kGrh + 1000);
  EXPECT_EQ(received[0].src_qp, a.qp->qpn());
  EXPECT_TRUE(received[0].wc_flags & IBV_WC_GRH);
  EXPECT_TRUE(received[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(received[0].imm_data), kUdImmediate);
  EXPECT_TRUE(same(a, kSrc, b, kDst + kGrh, 1000));
  // The GRH: zeros, then an IPv4 header from a's address to b's.
  const uint8_t* grh = b.mem.data() + kDst;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(grh[i], 0) << "byte " << i;
  EXPECT_EQ(grh[20], 0x45);
  EXPECT_EQ(std::memcmp(grh + 20 + 12, a.device->gids()[1].data() + 12, 4), 0);
  EXPECT_EQ(std::memcmp(grh + 20 + 16, b.device->gids()[1].data() + 12, 4), 0);
  // IBA A17.4.5.1's packet-type flag, where RoCE NICs put it (and UCX reads it):
  // RoCEv2 (UDP) over IPv4.
  EXPECT_EQ(received[0].sl, 0x8 | 0x2);
}

// IBA 10.2.5: the controlled Q_Key bit sends the QP's own Q_Key; another Q_Key
// than the receiver's is a violation: dropped silently and counted.
TEST_P(UdPathTest, QkeyIsCheckedAndTheControlledBitSendsTheQpsOwn) {
  post_recv(b, kDst, 4096, 5);
  ASSERT_EQ(send_to_b(16, 1, options_.qkey ^ 1), 0);
  pump();
  EXPECT_EQ(dropped(b.counters().ud_bad_qkey.load()), 1u);
  EXPECT_TRUE(poll(b.rcq).empty());
  ASSERT_EQ(send_to_b(16, 2, ud::kControlledQkeyBit), 0);
  pump();
  auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 5u);
  EXPECT_EQ(poll(a.scq).size(), 2u) << "UD sends complete whatever becomes of them";
}

TEST_P(UdPathTest, NoReceiveWqeOrABufferTooShortDropsTheMessageAndTheQpLives) {
  ASSERT_EQ(send_to_b(16, 1, options_.qkey), 0);
  pump();
  EXPECT_EQ(dropped(b.counters().ud_no_receive_wqe.load()), 1u);
  post_recv(b, kDst, kGrh + 15, 5);  // one byte short
  ASSERT_EQ(send_to_b(16, 2, options_.qkey), 0);
  pump();
  EXPECT_EQ(dropped(b.counters().ud_too_long.load() + b.counters().ud_no_receive_wqe.load()), 2u);
  EXPECT_TRUE(poll(b.rcq).empty());
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  ASSERT_EQ(send_to_b(15, 3, options_.qkey), 0);
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u) << "the same WQE takes a message that fits";
}

TEST_P(UdPathTest, PostRefusesWhatUdCannotSend) {
  EXPECT_EQ(post(a, IBV_WR_RDMA_WRITE, kSrc, 16, kDst, 1), EINVAL);
  EXPECT_EQ(post(a, IBV_WR_RDMA_READ, kSrc, 16, kDst, 2), EINVAL);
  EXPECT_EQ(send_to_b(4097, 3, options_.qkey), EINVAL) << "longer than the port MTU";
  EXPECT_EQ(post_ud(a, nullptr, IBV_WR_SEND, kSrc, 16, 4, options_.qkey), EINVAL);
}

// The WR copied the address: the AH may be destroyed right after the post.
TEST_P(UdPathTest, TheAhMayGoOnceTheSendIsPosted) {
  post_recv(b, kDst, 4096, 5);
  ASSERT_EQ(send_to_b(64, 1, options_.qkey), 0);
  ASSERT_EQ(a.device->destroy_ah(ah_to_b_), 0);
  ah_to_b_ = nullptr;
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u);
  int err = 0;
  ibv_ah_attr no_grh{};
  EXPECT_EQ(a.device->create_ah(a.pd, no_grh, err), nullptr);
  EXPECT_EQ(err, EINVAL) << "RoCE addresses by GRH";
}

// IBA 10.8.3.1 / 11.6.2: a receive WQE whose buffer its own keys refuse fails with
// a local protection error and ends the receiver's QP (the affiliated event
// IBV_EVENT_QP_FATAL); the sender completes as UD does, with success.
TEST_P(UdPathTest, AReceiveWqeItsKeysRefuseEndsTheReceiversQp) {
  post_recv_with_lkey(b.mr->key ^ 0x100, 5);
  post_recv(b, kDst, 4096, 6);
  ASSERT_EQ(send_to_b(64, 1, options_.qkey), 0);
  pump();
  const auto done = poll(a.scq);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  const auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].wr_id, 5u);
  EXPECT_EQ(received[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(received[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
  AsyncEvent event{};
  ASSERT_TRUE(b.device->next_async_event(event));
  EXPECT_EQ(event.type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
}

// Placed by the sender, no packet; a WQE another sender claimed holds those after
// it while that sender is inside its access, and one it left empty is consumed
// without a completion.
TEST_F(UdHostTest, AMessageToAnotherProcessesQpSendsNoPacketAndAWqeLeftEmptyCompletesNothing) {
  post_recv(b, kDst, 4096, 5);
  post_recv(b, kDst + 4096, 4096, 6);
  std::string why;
  auto other = samehost::PeerNode::open(b.device->gids()[1], why, node_directory_.path());
  ASSERT_NE(other, nullptr) << why;
  ASSERT_TRUE(other->join());
  other->begin_access();
  samehost::RecvState& rq = *b.qp->host_recv();
  rq.claimed.store(1);  // another sender took WQE 0 and is still filling it
  fill(a, kSrc, 100, 3);
  ASSERT_EQ(send_to_b(100, 1, options_.qkey), 0);
  pump();
  EXPECT_TRUE(net_.take_sent().empty());
  b.qp->drain_host_receives(0);
  b.qp->drain_host_receives(0);
  EXPECT_TRUE(poll(b.rcq).empty()) << "WQE 1 completes after WQE 0";
  EXPECT_TRUE(same(a, kSrc, b, kDst + 4096 + kGrh, 100)) << "its data is there already";
  // The other sender gave WQE 0 up (its own buffer went): consumed, no completion.
  results()[0] = samehost::RecvResult{};
  results()[0].flags = samehost::RecvResult::kVoid;
  results()[0].seq = 1;
  other->end_access();
  EXPECT_TRUE(b.qp->drain_host_receives(0));
  const auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 6u);
  EXPECT_EQ(got[0].byte_len, kGrh + 100);
  EXPECT_EQ(got[0].src_qp, a.qp->qpn());
  EXPECT_EQ(b.counters().host_receives_dropped.load(), 1u);
}

// A sender killed between its claim and its mark never ends its access; with no
// living peer inside one, the WQE it held is given up at the owner's next look
// (samehost::StuckClaim), and the queue goes on.
TEST_F(UdHostTest, AClaimWhoseSenderDiedIsGivenUp) {
  post_recv(b, kDst, 4096, 5);
  post_recv(b, kDst + 4096, 4096, 6);
  b.qp->host_recv()->claimed.store(1);  // claimed by a process that is gone
  ASSERT_EQ(send_to_b(100, 1, options_.qkey), 0);
  pump();
  b.qp->drain_host_receives(0);
  const auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 6u);
  EXPECT_EQ(b.counters().host_receives_dropped.load(), 1u);
}

// A hostile peer that claims past what was posted and writes a complete-looking
// result there gets no completion out of the owner: there is no WQE.
TEST_F(UdHostTest, AResultPastWhatWasPostedCompletesNothing) {
  post_recv(b, kDst, 4096, 5);  // index 0
  b.qp->host_recv()->claimed.store(2);
  results()[1] = samehost::RecvResult{};
  results()[1].byte_len = kGrh;
  results()[1].qpn = b.qp->qpn();
  results()[1].seq = 2;  // "complete", for index 1, which was never posted
  b.qp->drain_host_receives(0);
  EXPECT_TRUE(poll(b.rcq).empty());
  EXPECT_EQ(b.counters().host_receives.load(), 0u);
}

}  // namespace
}  // namespace softrdma::engine::testing
