// Tag matching through the C API (ibv_create_srq_ex(3) IBV_SRQT_TM,
// ibv_post_srq_ops(3), ibv_wc_read_tm_info(3), ibv_query_device_ex(3) tm_caps), as
// rdma-core's tests/test_tag_matching.py uses it: a TM SRQ with its CQ (an
// extended one with IBV_WC_EX_WITH_TM_INFO), an RC QP attached to it without send
// WQEs of its own, and a plain RC QP sending TMH-headed messages to it.
#include <infiniband/tm_types.h>

#include <cerrno>
#include <cstring>

#include "verbs/cq_ex_helpers.h"
#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

constexpr uint64_t kWcFlags = uint64_t(IBV_WC_STANDARD_FLAGS) | uint64_t(IBV_WC_EX_WITH_TM_INFO);

ibv_tm_caps tm_caps(ibv_context* ctx) {
  ibv_device_attr_ex attr{};
  EXPECT_EQ(ibv_query_device_ex(ctx, nullptr, &attr), 0);
  return attr.tm_caps;
}

PairOptions extended() {
  PairOptions o;
  o.extended_cq = true;
  o.cq_wc_flags = kWcFlags;
  return o;
}

class VerbsTm : public ::testing::Test {
 protected:
  void SetUp() override {
    ibv_srq_init_attr_ex attr{};
    attr.attr = {64, 1, 0};
    attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
                     IBV_SRQ_INIT_ATTR_TM;
    attr.srq_type = IBV_SRQT_TM;
    attr.pd = b().pd;
    attr.cq = b().cq;
    attr.tm_cap = {tm_caps(b().ctx).max_num_tags, 10};
    srq_ = ibv_create_srq_ex(b().ctx, &attr);
    ASSERT_NE(srq_, nullptr) << "errno " << errno;
    sender_ = make_qp(a(), nullptr);
    receiver_ = make_qp(b(), srq_);
    ASSERT_TRUE(sender_ != nullptr && receiver_ != nullptr);
    ibv_gid ga{}, gb{};
    ASSERT_EQ(ibv_query_gid(a().ctx, 1, 1, &ga), 0);
    ASSERT_EQ(ibv_query_gid(b().ctx, 1, 1, &gb), 0);
    Pair::connect(sender_, receiver_->qp_num, gb, 1);
    Pair::connect(receiver_, sender_->qp_num, ga, 1);
  }

  void TearDown() override {
    if (receiver_ != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(receiver_), 0);
    }
    if (sender_ != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(sender_), 0);
    }
    if (srq_ != nullptr) {
      EXPECT_EQ(ibv_destroy_srq(srq_), 0);
    }
  }

  Side& a() { return pair_.a; }
  Side& b() { return pair_.b; }

  static ibv_qp* make_qp(Side& side, ibv_srq* srq) {
    ibv_qp_init_attr init{};
    init.send_cq = side.cq;
    init.recv_cq = side.cq;
    init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.cap = srq != nullptr ? ibv_qp_cap{0, 0, 0, 0, 0} : ibv_qp_cap{8, 8, 1, 1, 0};
    return ibv_create_qp(side.pd, &init);
  }

  // A TMH (tm_types.h) at `offset` of a's buffer.
  void write_tmh(size_t offset, uint8_t opcode, uint64_t tag, uint32_t app_ctx) {
    ibv_tmh tmh{};
    tmh.opcode = opcode;
    tmh.app_ctx = htobe32(app_ctx);
    tmh.tag = htobe64(tag);
    std::memcpy(a().buf.data() + offset, &tmh, sizeof tmh);
  }

  int add_tag(uint64_t wr_id, uint64_t tag, size_t offset, uint32_t length, uint32_t* handle) {
    ibv_sge sge{b().addr(offset), length, b().mr->lkey};
    ibv_ops_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_TAG_ADD;
    wr.flags = IBV_OPS_SIGNALED;
    wr.tm.add.recv_wr_id = wr_id + 100;
    wr.tm.add.sg_list = &sge;
    wr.tm.add.num_sge = 1;
    wr.tm.add.tag = tag;
    wr.tm.add.mask = 0xffff;
    ibv_ops_wr* bad = nullptr;
    const int err = ibv_post_srq_ops(srq_, &wr, &bad);
    if (handle != nullptr) *handle = wr.tm.handle;
    return err;
  }

  // The next completion of b's CQ, with its tag-matching info.
  ExWc next(ibv_wc_tm_info& tm) {
    ExWc wc{};
    if (!start_batch(b().cqx)) return wc;
    wc = read_current(b().cqx);
    ibv_wc_read_tm_info(b().cqx, &tm);
    ibv_end_poll(b().cqx);
    return wc;
  }

  Pair pair_{extended()};
  ibv_srq* srq_ = nullptr;
  ibv_qp* sender_ = nullptr;
  ibv_qp* receiver_ = nullptr;
};

// What pyverbs' tests read first: RC tag matching, with room for their tags and
// rendezvous headers.
TEST(VerbsTmCaps, TagMatchingOnRcIsReported) {
  Device dev;
  const ibv_tm_caps caps = tm_caps(dev.ctx());
  EXPECT_EQ(caps.flags, uint32_t(IBV_TM_CAP_RC));
  EXPECT_GT(caps.max_num_tags, 0u);
  EXPECT_GT(caps.max_ops, 0u);
  EXPECT_GE(caps.max_sge, 1u);
  EXPECT_GE(caps.max_rndv_hdr_size, sizeof(ibv_tmh) + sizeof(ibv_rvh));
}

// An eager message matching a tag: TM_ADD, then TM_RECV with both flags, the tag
// and app_ctx read by ibv_wc_read_tm_info; the payload after the TMH in the
// tagged buffer. Then an unmatched one: the whole message to an ordinary receive,
// TM_RECV without flags, tag 0 (as mlx5).
TEST_F(VerbsTm, EagerMatchThenUnexpected) {
  uint32_t handle = ~0u;
  ASSERT_EQ(add_tag(1, 7, 4096, 1024, &handle), 0);
  EXPECT_LT(handle, tm_caps(b().ctx).max_num_tags);
  ibv_wc_tm_info tm{};
  ExWc wc = next(tm);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_ADD);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.wc_flags, 0u);

  std::memset(a().buf.data(), 'c', 256);
  write_tmh(0, IBV_TMH_EAGER, 7, 0xabc);
  ASSERT_EQ(post_send(sender_, IBV_WR_SEND, {a().addr(0), 256, a().mr->lkey}, 9), 0);
  wc = next(tm);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 101u);
  EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(wc.byte_len, 256u - sizeof(ibv_tmh));
  EXPECT_EQ(wc.qp_num, receiver_->qp_num);
  EXPECT_EQ(tm.tag, 7u);
  EXPECT_EQ(tm.priv, 0xabcu);
  EXPECT_EQ(std::memcmp(b().buf.data() + 4096, a().buf.data() + sizeof(ibv_tmh),
                        256 - sizeof(ibv_tmh)),
            0);

  ibv_sge sge{b().addr(0), 1024, b().mr->lkey};
  ibv_recv_wr recv{};
  recv.wr_id = 55;
  recv.sg_list = &sge;
  recv.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_srq_recv(srq_, &recv, &bad), 0);
  write_tmh(0, IBV_TMH_EAGER, 0x1234, 1);
  ASSERT_EQ(post_send(sender_, IBV_WR_SEND, {a().addr(0), 256, a().mr->lkey}, 10), 0);
  wc = next(tm);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 55u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.byte_len, 256u);
  EXPECT_EQ(tm.tag, 0u);
  EXPECT_EQ(std::memcmp(b().buf.data(), a().buf.data(), 256), 0);
  // Software handled it: a SYNC with the count brings hardware back in step.
  ibv_ops_wr sync{};
  sync.wr_id = 27;
  sync.opcode = IBV_WR_TAG_SYNC;
  sync.flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
  sync.tm.unexpected_cnt = 1;
  ibv_ops_wr* bad_op = nullptr;
  ASSERT_EQ(ibv_post_srq_ops(srq_, &sync, &bad_op), 0);
  wc = next(tm);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_SYNC);
  EXPECT_EQ(wc.wr_id, 27u);
  EXPECT_EQ(wc.wc_flags, 0u);
}

// A rendezvous request: the match, the sender's FIN (an ordinary receive on its
// QP, 32 bytes: TMH and RVH with opcode IBV_TMH_FIN), and the data completion.
TEST_F(VerbsTm, RendezvousCompletesTwiceAndFinsTheSender) {
  ASSERT_EQ(add_tag(2, 3, 8192, 4096, nullptr), 0);
  ibv_wc_tm_info tm{};
  ASSERT_EQ(next(tm).opcode, IBV_WC_TM_ADD);
  for (int i = 0; i < 3000; ++i) a().buf[16384 + i] = uint8_t(i * 7);
  write_tmh(0, IBV_TMH_RNDV, 3, 4);
  ibv_rvh rvh{htobe64(a().addr(16384)), htobe32(a().mr->rkey), htobe32(3000)};
  std::memcpy(a().buf.data() + sizeof(ibv_tmh), &rvh, sizeof rvh);
  ASSERT_EQ(post_recv(sender_, {a().addr(32768), 64, a().mr->lkey}, 77), 0);
  ASSERT_EQ(post_send(sender_, IBV_WR_SEND, {a().addr(0), 64, a().mr->lkey}, 11), 0);
  ExWc wc = next(tm);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 102u);
  EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(tm.tag, 3u);
  EXPECT_EQ(tm.priv, 4u);
  wc = next(tm);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 102u);
  EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_EQ(std::memcmp(b().buf.data() + 8192, a().buf.data() + 16384, 3000), 0);
  std::vector<ExWc> at_sender = take_ex(a().cqx, 2);  // its SEND and the FIN
  ASSERT_EQ(at_sender.size(), 2u);
  const ExWc& fin = at_sender[0].opcode == IBV_WC_RECV ? at_sender[0] : at_sender[1];
  EXPECT_EQ(fin.opcode, IBV_WC_RECV);
  EXPECT_EQ(fin.wr_id, 77u);
  EXPECT_EQ(fin.byte_len, sizeof(ibv_tmh) + sizeof(ibv_rvh));
  EXPECT_EQ(a().buf[32768], IBV_TMH_FIN);
}

// ibv_post_srq_ops(3) on an SRQ that is not a TM SRQ: EINVAL (mlx5), *bad_op set.
// ibv_create_srq_ex(3) for IBV_SRQT_TM without IBV_SRQ_INIT_ATTR_TM, or with more
// tags than tm_caps: EINVAL.
TEST_F(VerbsTm, Errors) {
  ibv_srq_init_attr basic{};
  basic.attr = {4, 1, 0};
  ibv_srq* plain = ibv_create_srq(b().pd, &basic);
  ASSERT_NE(plain, nullptr);
  ibv_ops_wr sync{};
  sync.opcode = IBV_WR_TAG_SYNC;
  ibv_ops_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_ops(plain, &sync, &bad), EINVAL);
  EXPECT_EQ(bad, &sync);
  EXPECT_EQ(ibv_destroy_srq(plain), 0);

  ibv_srq_init_attr_ex attr{};
  attr.attr = {4, 1, 0};
  attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  attr.srq_type = IBV_SRQT_TM;
  attr.pd = b().pd;
  attr.cq = b().cq;
  attr.tm_cap = {4, 4};
  EXPECT_EQ(ibv_create_srq_ex(b().ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL) << "no IBV_SRQ_INIT_ATTR_TM";
  attr.comp_mask |= IBV_SRQ_INIT_ATTR_TM;
  attr.tm_cap.max_num_tags = tm_caps(b().ctx).max_num_tags + 1;
  EXPECT_EQ(ibv_create_srq_ex(b().ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL) << "beyond tm_caps";
  EXPECT_EQ(ibv_destroy_srq(srq_), EBUSY) << "its QP is attached";
}

}  // namespace
}  // namespace softrdma::verbs::testing
