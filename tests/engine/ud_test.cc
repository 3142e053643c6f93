// Unreliable Datagram QPs (IBA 9.8.4, 10.2.5): a send names its destination (an
// AH, a QP number, a Q_Key), goes as one UD_SEND_ONLY packet with a DETH, and
// completes at once; a receive starts with the 40-byte GRH (here the IPv4 header
// in its last 20 bytes). Wrong Q_Key, no receive WQE, too long: dropped, counted.
#include <arpa/inet.h>

#include <cstring>

#include "engine/rc_fixture.h"
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

  Ah* ah_to_b_ = nullptr;
};

TEST_F(UdPairTest, ASendArrivesAfterTheGrhWithTheSendersQpNumber) {
  fill(a, kSrc, 1000, 1);
  post_recv(b, kDst, kGrh + 1000, 5);
  ASSERT_EQ(post_ud(a, ah_to_b_, IBV_WR_SEND_WITH_IMM, kSrc, 1000, 1, options_.qkey), 0);
  const auto sent = net_.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode(), op::kUd | op::kSendOnlyImm);
  EXPECT_EQ(sent[0].view().get(wire::deth::kQkey), options_.qkey);
  EXPECT_EQ(sent[0].view().get(wire::deth::kSrcQp), a.qp->qpn());
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
TEST_F(UdPairTest, QkeyIsCheckedAndTheControlledBitSendsTheQpsOwn) {
  post_recv(b, kDst, 4096, 5);
  ASSERT_EQ(send_to_b(16, 1, options_.qkey ^ 1), 0);
  pump();
  EXPECT_EQ(b.counters().ud_bad_qkey.load(), 1u);
  EXPECT_TRUE(poll(b.rcq).empty());
  ASSERT_EQ(send_to_b(16, 2, ud::kControlledQkeyBit), 0);
  pump();
  auto received = poll(b.rcq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 5u);
  EXPECT_EQ(poll(a.scq).size(), 2u) << "UD sends complete whatever becomes of them";
}

TEST_F(UdPairTest, NoReceiveWqeOrABufferTooShortDropsTheMessageAndTheQpLives) {
  ASSERT_EQ(send_to_b(16, 1, options_.qkey), 0);
  pump();
  EXPECT_EQ(b.counters().ud_no_receive_wqe.load(), 1u);
  post_recv(b, kDst, kGrh + 15, 5);  // one byte short
  ASSERT_EQ(send_to_b(16, 2, options_.qkey), 0);
  pump();
  EXPECT_EQ(b.counters().ud_too_long.load(), 1u);
  EXPECT_TRUE(poll(b.rcq).empty());
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  ASSERT_EQ(send_to_b(15, 3, options_.qkey), 0);
  pump();
  EXPECT_EQ(poll(b.rcq).size(), 1u) << "the same WQE takes a message that fits";
}

TEST_F(UdPairTest, PostRefusesWhatUdCannotSend) {
  EXPECT_EQ(post(a, IBV_WR_RDMA_WRITE, kSrc, 16, kDst, 1), EINVAL);
  EXPECT_EQ(post(a, IBV_WR_RDMA_READ, kSrc, 16, kDst, 2), EINVAL);
  EXPECT_EQ(send_to_b(4097, 3, options_.qkey), EINVAL) << "longer than the port MTU";
  EXPECT_EQ(post_ud(a, nullptr, IBV_WR_SEND, kSrc, 16, 4, options_.qkey), EINVAL);
}

// The WR copied the address: the AH may be destroyed right after the post.
TEST_F(UdPairTest, TheAhMayGoOnceTheSendIsPosted) {
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

}  // namespace
}  // namespace softrdma::engine::testing
