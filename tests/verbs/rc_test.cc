// RC traffic through the C API: two QPs of one context, and of two contexts,
// connected over the process's own address; bytes checked end to end.
#include <endian.h>

#include <cstring>
#include <numeric>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

void fill(Side& s, size_t offset, size_t len, uint8_t seed) {
  for (size_t i = 0; i < len; ++i) s.buf[offset + i] = uint8_t(seed + i * 7);
}

class RcTraffic : public ::testing::TestWithParam<bool> {
 protected:
  RcTraffic() : pair_(PairOptions{.two_contexts = GetParam()}) {}
  Pair pair_;
};

// SEND with immediate: the receive completion carries the data, the immediate
// and the byte count (ibv_poll_cq(3)).
TEST_P(RcTraffic, SendWithImmediate) {
  Side& a = pair_.a;
  Side& b = pair_.b;
  ASSERT_EQ(post_recv(b.qp, {b.addr(0), 4096, b.mr->lkey}, 7), 0);
  fill(a, 0, 3000, 1);
  ibv_sge sge{a.addr(0), 3000, a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 9;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htobe32(0xdeadbeef);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  auto sent = poll_n(a.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].wr_id, 9u);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
  auto got = poll_n(b.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].wr_id, 7u);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(got[0].byte_len, 3000u);
  EXPECT_TRUE(got[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(got[0].imm_data), 0xdeadbeefu);
  EXPECT_EQ(got[0].qp_num, b.qp->qp_num);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 3000), 0);
}

// RDMA WRITE of several MTUs, then READ it back into another place.
TEST_P(RcTraffic, WriteThenRead) {
  Side& a = pair_.a;
  Side& b = pair_.b;
  fill(a, 0, 10000, 3);
  ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, {a.addr(0), 10000, a.mr->lkey}, 1,
                      b.addr(100), b.mr->rkey),
            0);
  auto w = poll_n(a.cq, 1);
  ASSERT_EQ(w.size(), 1u);
  ASSERT_EQ(w[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(w[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 100, 10000), 0);
  ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_READ, {a.addr(20000), 10000, a.mr->lkey}, 2,
                      b.addr(100), b.mr->rkey),
            0);
  auto r = poll_n(a.cq, 1);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(r[0].byte_len, 10000u);
  EXPECT_EQ(std::memcmp(a.buf.data(), a.buf.data() + 20000, 10000), 0);
}

// Both atomics on one 8-byte word; the original value comes back (IBA 9.4.5).
TEST_P(RcTraffic, CompareSwapAndFetchAdd) {
  Side& a = pair_.a;
  Side& b = pair_.b;
  uint64_t initial = 41;
  std::memcpy(b.buf.data() + 64, &initial, 8);
  ibv_sge sge{a.addr(0), 8, a.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = b.addr(64);
  wr.wr.atomic.rkey = b.mr->rkey;
  wr.wr.atomic.compare_add = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  auto f = poll_n(a.cq, 1);
  ASSERT_EQ(f.size(), 1u);
  ASSERT_EQ(f[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(f[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t v = 0;
  std::memcpy(&v, a.buf.data(), 8);
  EXPECT_EQ(v, 41u);
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 42;
  wr.wr.atomic.swap = 1000;
  sge.addr = a.addr(8);
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  auto c = poll_n(a.cq, 1);
  ASSERT_EQ(c.size(), 1u);
  ASSERT_EQ(c[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(c[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&v, a.buf.data() + 8, 8);
  EXPECT_EQ(v, 42u);
  std::memcpy(&v, b.buf.data() + 64, 8);
  EXPECT_EQ(v, 1000u);
}

// A chain of WRs with several SGEs each: the gather list is concatenated.
TEST_P(RcTraffic, ChainedMultiSgeSends) {
  Side& a = pair_.a;
  Side& b = pair_.b;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv(b.qp, {b.addr(i * 4096), 4096, b.mr->lkey}, i), 0);
  fill(a, 0, 3 * 300, 11);
  ibv_sge sges[3][2];
  ibv_send_wr wrs[3]{};
  for (int i = 0; i < 3; ++i) {
    sges[i][0] = {a.addr(i * 300), 100, a.mr->lkey};
    sges[i][1] = {a.addr(i * 300 + 100), 200, a.mr->lkey};
    wrs[i].wr_id = 100 + i;
    wrs[i].sg_list = sges[i];
    wrs[i].num_sge = 2;
    wrs[i].opcode = IBV_WR_SEND;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].next = i < 2 ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, wrs, &bad), 0);
  EXPECT_EQ(poll_n(a.cq, 3).size(), 3u);
  auto got = poll_n(b.cq, 3);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].wr_id, uint64_t(i));
    EXPECT_EQ(got[i].byte_len, 300u);
    EXPECT_EQ(std::memcmp(b.buf.data() + i * 4096, a.buf.data() + i * 300, 300), 0);
  }
}

// Inline data is read at post time: the buffer may change right after.
TEST_P(RcTraffic, InlineSendCopiesAtPostTime) {
  Side& a = pair_.a;
  Side& b = pair_.b;
  ASSERT_EQ(post_recv(b.qp, {b.addr(0), 64, b.mr->lkey}, 1), 0);
  char text[] = "inline payload";
  ibv_sge sge{uint64_t(uintptr_t(text)), sizeof text, 0};  // no lkey needed
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  std::memset(text, 'x', sizeof text - 1);
  ASSERT_EQ(poll_n(b.cq, 1).size(), 1u);
  EXPECT_STREQ(reinterpret_cast<char*>(b.buf.data()), "inline payload");
}

// UCX's rc_verbs flushes and checks a connection with a zero-length inline RDMA
// WRITE: no SGE, remote address 0, rkey 0 (uct_rc_verbs_ep_post_flush). A
// zero-length operation need not carry a valid address or R_Key (IBA C9-88): it
// completes, and the QPs stay in RTS.
TEST_P(RcTraffic, ZeroLengthInlineWriteWithoutKeyCompletes) {
  Side& a = pair_.a;
  ibv_send_wr wr{};
  wr.wr_id = 77;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  auto done = poll_n(a.cq, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[0].wr_id, 77u);
  EXPECT_EQ(done[0].opcode, IBV_WC_RDMA_WRITE);
  for (ibv_qp* qp : {a.qp, pair_.b.qp}) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  }
}

INSTANTIATE_TEST_SUITE_P(Contexts, RcTraffic, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "TwoContexts" : "OneContext"; });

// GID index 0 (what rdma-core's tests pick) carries traffic too (DESIGN.md §6).
TEST(RcGidIndex, FirstGidCarriesTraffic) {
  Pair pair(PairOptions{.sgid_index = 0});
  ASSERT_EQ(post_recv(pair.b.qp, {pair.b.addr(0), 16, pair.b.mr->lkey}, 1), 0);
  pair.a.buf[0] = 0x5a;
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, {pair.a.addr(0), 16, pair.a.mr->lkey}, 2), 0);
  auto got = poll_n(pair.b.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(pair.b.buf[0], 0x5a);
}

// The ibv_wr_* API of an extended QP (ibv_wr_post(3)), as ibv_rc_pingpong -N
// uses it: one batch of a SEND, a WRITE with inline data and a FETCH_ADD.
TEST(RcExtendedQp, WrApiPostsABatch) {
  Pair pair(PairOptions{.extended_qp = true});
  Side& a = pair.a;
  Side& b = pair.b;
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a.qp);
  ASSERT_NE(qpx, nullptr);
  ASSERT_EQ(post_recv(b.qp, {b.addr(0), 64, b.mr->lkey}, 1), 0);
  fill(a, 0, 32, 5);
  const char inline_text[] = "written inline";
  uint64_t counter = 10;
  std::memcpy(b.buf.data() + 512, &counter, 8);
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, a.mr->lkey, a.addr(0), 32);
  qpx->wr_id = 2;
  ibv_wr_rdma_write(qpx, b.mr->rkey, b.addr(256));
  ibv_wr_set_inline_data(qpx, const_cast<char*>(inline_text), sizeof inline_text);
  qpx->wr_id = 3;
  ibv_wr_atomic_fetch_add(qpx, b.mr->rkey, b.addr(512), 5);
  ibv_wr_set_sge(qpx, a.mr->lkey, a.addr(1024), 8);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  auto done = poll_n(a.cq, 3);
  ASSERT_EQ(done.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(done[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(done[i].wr_id, uint64_t(i + 1));
  }
  ASSERT_EQ(poll_n(b.cq, 1).size(), 1u);
  EXPECT_EQ(std::memcmp(b.buf.data(), a.buf.data(), 32), 0);
  EXPECT_STREQ(reinterpret_cast<char*>(b.buf.data() + 256), "written inline");
  std::memcpy(&counter, b.buf.data() + 512, 8);
  EXPECT_EQ(counter, 15u);
}

// A setter before any builder fails the batch, and nothing is posted.
TEST(RcExtendedQp, SetterWithoutBuilderFailsTheBatch) {
  Pair pair(PairOptions{.extended_qp = true});
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(pair.a.qp);
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  ibv_wr_set_sge(qpx, pair.a.mr->lkey, pair.a.addr(0), 8);
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  ibv_wr_start(qpx);
  ibv_wr_send(qpx);
  ibv_wr_abort(qpx);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(pair.a.cq, 1, &wc), 0);
}

// A QP created without send_ops_flags has no extended view (as in rdma-core).
TEST(RcExtendedQp, PlainQpHasNoExtendedView) {
  Pair pair;
  EXPECT_EQ(ibv_qp_to_qp_ex(pair.a.qp), nullptr);
}

}  // namespace
}  // namespace softrdma::verbs::testing
