// Memory windows through the C API (ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3)
// IBV_WR_BIND_MW / IBV_WR_LOCAL_INV / IBV_WR_SEND_WITH_INV, ibv_wr_bind_mw): side b
// owns the memory and its windows, side a reaches it through them.
#include <cerrno>
#include <cstring>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

constexpr int kBindAccess = kAllAccess | IBV_ACCESS_MW_BIND;

class MwTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(pair_.b.qp, nullptr);
    mr_ = ibv_reg_mr(pair_.b.pd, pair_.b.buf.data(), pair_.b.buf.size(), kBindAccess);
    ASSERT_NE(mr_, nullptr);
  }
  void TearDown() override {
    for (ibv_mw* mw : windows_) EXPECT_EQ(ibv_dealloc_mw(mw), 0);
    EXPECT_EQ(ibv_dereg_mr(mr_), 0);
  }

  ibv_mw* alloc(ibv_mw_type type) {
    ibv_mw* mw = ibv_alloc_mw(pair_.b.pd, type);
    EXPECT_NE(mw, nullptr) << "errno " << errno;
    if (mw != nullptr) windows_.push_back(mw);
    return mw;
  }

  ibv_mw_bind_info info(uint64_t offset, uint64_t length, unsigned access) {
    return ibv_mw_bind_info{mr_, pair_.b.addr(offset), length, access};
  }

  // A type 2 bind posted on b's QP; returns the window's new R_Key.
  uint32_t bind_type2(ibv_mw* mw, const ibv_mw_bind_info& bind, uint64_t wr_id = 5) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = bind;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(pair_.b.qp, &wr, &bad), 0);
    return wr.bind_mw.rkey;
  }

  // One signaled completion of b's send queue.
  ibv_wc b_send_completion() {
    auto wcs = poll_n(pair_.b.cq, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? ibv_wc{} : wcs[0];
  }

  // a WRITEs 8 bytes to b at `remote` through `rkey`; returns the completion status.
  ibv_wc_status write(uint64_t remote, uint32_t rkey) {
    Side& a = pair_.a;
    std::memcpy(a.buf.data(), "windowed", 8);
    EXPECT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, {a.addr(0), 8, a.mr->lkey}, 1, remote, rkey), 0);
    auto wcs = poll_n(a.cq, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? IBV_WC_GENERAL_ERR : wcs[0].status;
  }

  Pair pair_;
  ibv_mr* mr_ = nullptr;
  std::vector<ibv_mw*> windows_;
};

// ibv_query_device(3): type 1 and type 2B windows, and how many.
TEST(MwCaps, DeviceReportsWindows) {
  Device dev;
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(dev.ctx(), &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_FALSE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A);
  EXPECT_GT(attr.max_mw, 0);
}

// ibv_alloc_mw(3): a window of either type, with a remote key; no other type.
TEST_F(MwTest, AllocGivesKeyedWindowsOfKnownTypesOnly) {
  ibv_mw* one = alloc(IBV_MW_TYPE_1);
  ibv_mw* two = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(one->type, IBV_MW_TYPE_1);
  EXPECT_EQ(two->pd, pair_.b.pd);
  EXPECT_NE(one->rkey, two->rkey);
  EXPECT_EQ(ibv_alloc_mw(pair_.b.pd, ibv_mw_type(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(pair_.b.pd), EBUSY);  // windows use it
}

// ibv_bind_mw(3): the bind completes (IBV_WC_BIND_MW), the new R_Key is in
// mw->rkey, and the window grants its range with its rights only.
TEST_F(MwTest, Type1BindGrantsRangeAndRights) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  const uint32_t old_rkey = mw->rkey;
  ibv_mw_bind bind{77, IBV_SEND_SIGNALED, info(4096, 1024, IBV_ACCESS_REMOTE_WRITE)};
  ASSERT_EQ(ibv_bind_mw(pair_.b.qp, mw, &bind), 0);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(old_rkey));
  const ibv_wc wc = b_send_completion();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(write(pair_.b.addr(4096), mw->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(pair_.b.buf.data() + 4096, "windowed", 8), 0);
  // A byte past the window (IBA 10.6.7.3): remote access error, and the QP is done.
  EXPECT_EQ(write(pair_.b.addr(4096 + 1020), mw->rkey), IBV_WC_REM_ACCESS_ERR);
}

// The window's rights, not the MR's: READ through a write-only window fails.
TEST_F(MwTest, WindowWithoutReadRightRefusesRead) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ibv_mw_bind bind{1, IBV_SEND_SIGNALED, info(0, 64, IBV_ACCESS_REMOTE_WRITE)};
  ASSERT_EQ(ibv_bind_mw(pair_.b.qp, mw, &bind), 0);
  ASSERT_EQ(b_send_completion().status, IBV_WC_SUCCESS);
  Side& a = pair_.a;
  ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_READ, {a.addr(0), 8, a.mr->lkey}, 2, pair_.b.addr(0),
                      mw->rkey),
            0);
  auto wcs = poll_n(a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
}

// ibv_alloc_mw(3): a type 1 window is invalidated by a bind of zero length.
TEST_F(MwTest, Type1ZeroLengthBindInvalidates) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ibv_mw_bind bind{1, IBV_SEND_SIGNALED, info(0, 64, IBV_ACCESS_REMOTE_WRITE)};
  ASSERT_EQ(ibv_bind_mw(pair_.b.qp, mw, &bind), 0);
  ASSERT_EQ(b_send_completion().status, IBV_WC_SUCCESS);
  EXPECT_EQ(write(pair_.b.addr(0), mw->rkey), IBV_WC_SUCCESS);
  bind = ibv_mw_bind{2, IBV_SEND_SIGNALED, info(0, 0, 0)};
  ASSERT_EQ(ibv_bind_mw(pair_.b.qp, mw, &bind), 0);
  ASSERT_EQ(b_send_completion().status, IBV_WC_SUCCESS);
  EXPECT_EQ(write(pair_.b.addr(0), mw->rkey), IBV_WC_REM_ACCESS_ERR);
}

// ibv_bind_mw(3) is for type 1, a posted bind for type 2 ("for type 2 MW, one
// should directly post bind WR"); a foreign PD's MR is EPERM (the inline checks).
TEST_F(MwTest, EachTypeHasItsOwnBindPath) {
  ibv_mw* one = alloc(IBV_MW_TYPE_1);
  ibv_mw* two = alloc(IBV_MW_TYPE_2);
  ibv_mw_bind bind{1, IBV_SEND_SIGNALED, info(0, 64, IBV_ACCESS_REMOTE_WRITE)};
  EXPECT_EQ(ibv_bind_mw(pair_.b.qp, two, &bind), EINVAL);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = one;
  wr.bind_mw.rkey = ibv_inc_rkey(one->rkey);
  wr.bind_mw.bind_info = bind.bind_info;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(pair_.b.qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  bind.bind_info.mr = pair_.a.mr;  // another PD's
  EXPECT_EQ(ibv_bind_mw(pair_.b.qp, one, &bind), EPERM);
}

// A type 2 window: bound by a posted WR, invalidated by IBV_WR_LOCAL_INV
// (completion IBV_WC_LOCAL_INV); after that its R_Key reaches nothing.
TEST_F(MwTest, Type2BindThenLocalInvalidate) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  const uint32_t rkey = bind_type2(mw, info(0, 4096, IBV_ACCESS_REMOTE_WRITE));
  ibv_wc wc = b_send_completion();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(write(pair_.b.addr(100), rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(pair_.b.buf.data() + 100, "windowed", 8), 0);
  ibv_send_wr inv{};
  inv.wr_id = 6;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(pair_.b.qp, &inv, &bad), 0);
  wc = b_send_completion();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(write(pair_.b.addr(100), rkey), IBV_WC_REM_ACCESS_ERR);
}

// SEND with Invalidate: the receiver's window is invalidated, and its receive
// completion says which R_Key (IBV_WC_WITH_INV, invalidated_rkey).
TEST_F(MwTest, SendWithInvalidateFreesTheReceiversWindow) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  const uint32_t rkey = bind_type2(mw, info(0, 4096, IBV_ACCESS_REMOTE_WRITE));
  ASSERT_EQ(b_send_completion().status, IBV_WC_SUCCESS);
  Side& a = pair_.a;
  Side& b = pair_.b;
  ASSERT_EQ(post_recv(b.qp, {b.addr(8192), 64, b.mr->lkey}, 9), 0);
  ibv_sge sge{a.addr(0), 16, a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 3;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  auto sent = poll_n(a.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  const ibv_wc got = b_send_completion();  // the receive, on the shared CQ
  EXPECT_EQ(got.status, IBV_WC_SUCCESS);
  EXPECT_EQ(got.opcode, IBV_WC_RECV);
  EXPECT_EQ(got.byte_len, 16u);
  EXPECT_TRUE(got.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(got.invalidated_rkey, rkey);
  EXPECT_EQ(write(b.addr(0), rkey), IBV_WC_REM_ACCESS_ERR);
}

// An MR's key cannot be invalidated by a peer: the request is invalid (the
// requester's IBV_WC_REM_INV_REQ_ERR), the receive completes in error.
TEST_F(MwTest, SendWithInvalidateOfAnMrKeyIsInvalid) {
  Side& a = pair_.a;
  Side& b = pair_.b;
  ASSERT_EQ(post_recv(b.qp, {b.addr(8192), 64, b.mr->lkey}, 9), 0);
  ibv_sge sge{a.addr(0), 16, a.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = mr_->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  auto sent = poll_n(a.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_REM_INV_REQ_ERR);
  auto got = poll_n(b.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(got[0].wr_id, 9u);
}

// IBV_WC_MW_BIND_ERR for a bind IBA forbids: a type 2 window bound again while
// bound (o10-37.2.30), or to an MR registered without IBV_ACCESS_MW_BIND (C10-73).
TEST_F(MwTest, RefusedBindCompletesWithBindError) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  bind_type2(mw, info(0, 64, IBV_ACCESS_REMOTE_WRITE));
  ASSERT_EQ(b_send_completion().status, IBV_WC_SUCCESS);
  bind_type2(mw, info(0, 64, IBV_ACCESS_REMOTE_WRITE), 8);
  const ibv_wc wc = b_send_completion();
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(wc.wr_id, 8u);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(pair_.b.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);  // IBA 10.8.3.1
}

TEST_F(MwTest, BindToAnMrWithoutBindRightFails) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  ibv_mw_bind_info bind{pair_.b.mr, pair_.b.addr(0), 64, IBV_ACCESS_REMOTE_READ};
  bind_type2(mw, bind);
  EXPECT_EQ(b_send_completion().status, IBV_WC_MW_BIND_ERR);
}

// A local invalidation of a key that names no type 2 window is a local QP
// operation error.
TEST_F(MwTest, LocalInvalidateOfAnMrKeyFails) {
  ibv_send_wr inv{};
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = mr_->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(pair_.b.qp, &inv, &bad), 0);
  EXPECT_EQ(b_send_completion().status, IBV_WC_LOC_QP_OP_ERR);
}

// ibv_alloc_mw(3): "ibv_dereg_mr() fails if any memory window is still bound to
// this MR" (and so does ibv_rereg_mr); ibv_dealloc_mw unbinds, and the R_Key
// reaches nothing after.
TEST_F(MwTest, BoundWindowHoldsItsMrUntilDeallocated) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  const uint32_t rkey = bind_type2(mw, info(0, 64, IBV_ACCESS_REMOTE_WRITE));
  ASSERT_EQ(b_send_completion().status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(mr_), EBUSY);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kAllAccess),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EBUSY);
  ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  windows_.clear();
  EXPECT_EQ(write(pair_.b.addr(0), rkey), IBV_WC_REM_ACCESS_ERR);
}

// The ibv_wr_* builders: wr_bind_mw and wr_local_inv on an extended QP.
TEST(MwExtendedQp, BuildersBindAndInvalidate) {
  PairOptions options;
  options.extended_qp = true;
  Pair pair(options);
  ASSERT_NE(pair.b.qp, nullptr);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(pair.b.qp);
  ASSERT_NE(qpx, nullptr);
  ibv_mr* mr = ibv_reg_mr(pair.b.pd, pair.b.buf.data(), 4096, kBindAccess);
  ibv_mw* mw = ibv_alloc_mw(pair.b.pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const ibv_mw_bind_info bind{mr, pair.b.addr(0), 4096, IBV_ACCESS_REMOTE_READ};
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(qpx, mw, rkey, &bind);
  qpx->wr_id = 2;
  ibv_wr_local_inv(qpx, rkey);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  auto wcs = poll_n(pair.b.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  // A type 1 window cannot be bound by a builder: the batch fails as a post would.
  ibv_mw* one = ibv_alloc_mw(pair.b.pd, IBV_MW_TYPE_1);
  ibv_wr_start(qpx);
  ibv_wr_bind_mw(qpx, one, ibv_inc_rkey(one->rkey), &bind);
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  EXPECT_EQ(ibv_dealloc_mw(one), 0);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

}  // namespace
}  // namespace softrdma::verbs::testing
