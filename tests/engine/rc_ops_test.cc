// Every RC operation end to end through the requester, responder and completer,
// over the fake network (IBA 9.7).
#include <arpa/inet.h>

#include <cstring>
#include <tuple>

#include "engine/rc_fixture.h"
#include "wire/opcodes.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakePacket;
namespace op = wire::op;

constexpr size_t kSrc = 0;
constexpr size_t kDst = 128 * 1024;

class RcOpsTest : public RcPairTest,
                  public ::testing::WithParamInterface<std::tuple<TestPath, uint32_t>> {
 protected:
  void SetUp() override {
    take_path(std::get<0>(GetParam()));
    RcPairTest::SetUp();
  }
  static uint32_t size() { return std::get<1>(GetParam()); }
};

// Sizes around the 1024-byte path MTU: empty, tiny, exactly one MTU, one byte over,
// several packets with a short last one, and many packets; over the wire and the
// same-host path.
INSTANTIATE_TEST_SUITE_P(Sizes, RcOpsTest,
                         ::testing::Combine(::testing::Values(TestPath::kWire, TestPath::kHost,
                                           TestPath::kSharedAddress),
                                            ::testing::Values(0u, 1u, 1024u, 1025u, 3000u,
                                                              65536u)));

uint32_t packets(uint32_t len) { return len == 0 ? 1 : (len + 1023) / 1024; }

// SEND lands in the posted receive buffer; both sides complete once (IBA 9.7.4.1.1).
TEST_P(RcOpsTest, SendDeliversIntoReceiveBuffer) {
  const uint32_t len = size();
  fill(a, kSrc, len, 1);
  post_recv(b, kDst, 70000, 77);
  ASSERT_EQ(post(a, IBV_WR_SEND, kSrc, len, 0, 11), 0);
  pump();
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sent[0].wr_id, 11u);
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(got[0].byte_len, len);
  EXPECT_EQ(got[0].wr_id, 77u);
  EXPECT_EQ(got[0].src_qp, a.qp->qpn());
  EXPECT_EQ(got[0].wc_flags & IBV_WC_WITH_IMM, 0);
  EXPECT_TRUE(same(a, kSrc, b, kDst, len));
  // The same-host path places it without a packet (rc/host_send.cc).
  EXPECT_EQ(b.counters().rx_packets.load(), same_host_ ? 0 : packets(len));
  EXPECT_EQ(a.counters().host_sends.load(), same_host_ ? 1u : 0u);
}

// SEND with immediate: the immediate reaches the receive completion unchanged.
TEST_P(RcOpsTest, SendWithImmediateCarriesImmediate) {
  const uint32_t len = size();
  fill(a, kSrc, len, 2);
  post_recv(b, kDst, 70000, 1);
  ASSERT_EQ(post_with(a, IBV_WR_SEND_WITH_IMM, kSrc, len, 0, 1,
                      [](ibv_send_wr& wr, ibv_sge&) { wr.imm_data = htonl(0xdeadbeef); }),
            0);
  pump();
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(got[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(got[0].imm_data), 0xdeadbeefu);
  EXPECT_EQ(got[0].byte_len, len);
  EXPECT_TRUE(same(a, kSrc, b, kDst, len));
  EXPECT_EQ(poll(a.scq).size(), 1u);
}

// RDMA WRITE places the bytes without the remote CPU: no receive completion.
TEST_P(RcOpsTest, WriteLandsInRemoteMemory) {
  const uint32_t len = size();
  fill(a, kSrc, len, 3);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, kSrc, len, kDst, 5), 0);
  pump();
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_TRUE(same(a, kSrc, b, kDst, len));
  EXPECT_TRUE(poll(b.rcq).empty());
}

// WRITE with immediate consumes a receive WQE and reports the immediate.
TEST_P(RcOpsTest, WriteWithImmediateConsumesReceive) {
  const uint32_t len = size();
  fill(a, kSrc, len, 4);
  post_recv(b, 0, 0, 9);
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE_WITH_IMM, kSrc, len, kDst, 1,
                      [](ibv_send_wr& wr, ibv_sge&) { wr.imm_data = htonl(42); }),
            0);
  pump();
  auto got = poll(b.rcq);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(got[0].imm_data), 42u);
  EXPECT_EQ(got[0].wr_id, 9u);
  EXPECT_TRUE(same(a, kSrc, b, kDst, len));
  EXPECT_EQ(poll(a.scq).size(), 1u);
}

// RDMA READ fetches remote bytes into the local buffer (IBA 9.7.4.1.4).
TEST_P(RcOpsTest, ReadFetchesRemoteMemory) {
  const uint32_t len = size();
  fill(b, kDst, len, 5);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, kSrc, len, kDst, 8), 0);
  pump();
  auto sent = poll(a.scq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(sent[0].byte_len, len);
  EXPECT_TRUE(same(a, kSrc, b, kDst, len));
}

// Compare-and-swap swaps only on a match and always returns the old value (IBA 9.4.5).
TEST_P(RcPathTest, CompareSwapSwapsOnMatchOnly) {
  store64(b, 64, 0x1111);
  ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, 0, 64, 0x2222, 0x3333, 1), 0);
  pump();
  EXPECT_EQ(load64(b, 64), 0x1111u);  // no match: unchanged
  EXPECT_EQ(load64(a, 0), 0x1111u);
  ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_CMP_AND_SWP, 8, 64, 0x1111, 0x3333, 2), 0);
  pump();
  EXPECT_EQ(load64(b, 64), 0x3333u);  // match: swapped
  EXPECT_EQ(load64(a, 8), 0x1111u);
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 2u);
  for (auto& wc : wcs) {
    EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 8u);
  }
}

// Fetch-and-add adds and returns the previous value, in posting order.
TEST_P(RcPathTest, FetchAddAddsAndReturnsOld) {
  store64(b, 128, 40);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 8 * i, 128, 2, 0, i), 0);
  pump();
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 3u);
  for (auto& wc : wcs) EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(load64(a, 0), 40u);
  EXPECT_EQ(load64(a, 8), 42u);
  EXPECT_EQ(load64(a, 16), 44u);
  EXPECT_EQ(load64(b, 128), 46u);
}

// A gather list of several SGEs is sent as one message; inline data is read at post.
TEST_P(RcPathTest, GatherListAndInlineData) {
  fill(a, 0, 3000, 6);
  post_recv(b, kDst, 4096, 1);
  ibv_sge sges[3] = {{a.addr(0), 1000, a.mr->key},
                     {a.addr(1000), 1000, a.mr->key},
                     {a.addr(2000), 1000, a.mr->key}};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = sges;
  wr.num_sge = 3;
  ASSERT_EQ(post_wr(a, wr), 0);
  pump();
  EXPECT_TRUE(same(a, 0, b, kDst, 3000));
  // Inline: the buffer is overwritten right after posting; the sent bytes are the old.
  post_recv(b, kDst + 4096, 64, 2);
  ibv_sge small{a.addr(5000), 40, 0 /* lkey not checked for inline */};
  fill(a, 5000, 40, 7);
  std::vector<uint8_t> expect(a.mem.begin() + 5000, a.mem.begin() + 5040);
  wr.sg_list = &small;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  {
    // The engine is busy elsewhere: the post leaves a doorbell, and the packet is
    // built after the buffer was overwritten (docs/decisions/threading.md). Inline
    // data is what the buffer held at post time (ibv_post_send(3)).
    auto engine = a.device->hold_engine();
    ASSERT_EQ(post_wr(a, wr), 0);
    std::memset(&a.mem[5000], 0, 40);
  }
  pump();
  EXPECT_EQ(std::memcmp(expect.data(), &b.mem[kDst + 4096], 40), 0);
  EXPECT_EQ(poll(a.scq).size(), 2u);
}

// Unsignaled WRs complete silently; the signaled one after them still completes.
TEST_P(RcPathTest, UnsignaledWorkCompletesSilently) {
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, i, 0), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, kDst, 99), 0);
  pump();
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 99u);
  EXPECT_TRUE(a.qp->sq().empty());
}

// ACKs are coalesced: many small WRITEs in one burst draw fewer ACKs than WRITEs.
TEST_F(RcPairTest, AcksAreCoalesced) {
  for (int i = 0; i < 20; ++i) ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 8, kDst, i), 0);
  pump();
  size_t acks = 0;
  for (const FakePacket& p : net_.take_sent())
    if (p.opcode() == op::kRcAcknowledge) ++acks;
  EXPECT_GE(acks, 1u);
  EXPECT_LT(acks, 20u);
  EXPECT_EQ(poll(a.scq).size(), 20u);
}

// Both directions at once on one connection.
TEST_P(RcPathTest, BothDirectionsAtOnce) {
  fill(a, 0, 5000, 8);
  fill(b, 0, 5000, 9);
  post_recv(a, kDst, 8192, 1);
  post_recv(b, kDst, 8192, 1);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 5000, 0, 1), 0);
  ASSERT_EQ(post(b, IBV_WR_SEND, 0, 5000, 0, 1), 0);
  pump();
  EXPECT_TRUE(same(a, 0, b, kDst, 5000));
  EXPECT_TRUE(same(b, 0, a, kDst, 5000));
  EXPECT_EQ(poll(a.rcq).size(), 1u);
  EXPECT_EQ(poll(b.rcq).size(), 1u);
}

// IBA 1.5 9.4.6 RDMA ATOMIC WRITE: 8 bytes, read at post time, stored at the
// target's aligned address as one access, completed by the ACK (IBV_WC_ATOMIC_WRITE).
TEST_F(RcPairTest, AtomicWriteStoresEightBytesReadAtPost) {
  store64(a, 0, 0x1122334455667788u);
  ASSERT_EQ(post(a, IBV_WR_ATOMIC_WRITE, 0, 8, 64, 7), 0);
  store64(a, 0, 0);  // after the post: the value was taken already
  pump();
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(load64(b, 64), 0x1122334455667788u);
  EXPECT_EQ(post(a, IBV_WR_ATOMIC_WRITE, 0, 8, 68, 8), EINVAL) << "unaligned";
  EXPECT_EQ(post(a, IBV_WR_ATOMIC_WRITE, 0, 4, 64, 9), EINVAL) << "not 8 bytes";
}

// The target's rights are an RDMA WRITE's: without them, a remote access error.
TEST_F(RcPairTest, AtomicWriteNeedsRemoteWriteRights) {
  RcOptions o;
  o.b_qp_access = IBV_ACCESS_REMOTE_READ;
  connect(o);
  ASSERT_EQ(post(a, IBV_WR_ATOMIC_WRITE, 0, 8, 64, 1), 0);
  pump();
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  RcOptions uc;
  uc.type = IBV_QPT_UC;
  connect(uc);
  EXPECT_EQ(post(a, IBV_WR_ATOMIC_WRITE, 0, 8, 64, 2), EINVAL) << "RC and XRC only";
}

}  // namespace
}  // namespace softrdma::engine::testing
