// What ibv_create_cq_ex(3), the extended polling calls, ibv_query_rt_values_ex(3)
// and ibv_resize_cq(3) refuse, with the errno their man pages and rdma-core's
// providers give; and ibv_resize_cq's success path on both kinds of CQ.
#include <cerrno>
#include <climits>
#include <vector>

#include "engine/limits.h"
#include "verbs/cq_ex_helpers.h"
#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

const engine::DeviceLimits kLimits{};

class CqExErrors : public ::testing::Test {
 protected:
  // ibv_create_cq_ex with `attr`: expects NULL and `err` in errno.
  void expect_refused(ibv_cq_init_attr_ex attr, int err, const char* what) {
    errno = 0;
    ibv_cq_ex* cq = ibv_create_cq_ex(dev_.ctx(), &attr);
    EXPECT_EQ(cq, nullptr) << what;
    EXPECT_EQ(errno, err) << what;
    if (cq != nullptr) ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
  }
  static ibv_cq_init_attr_ex plain() {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 8;
    return attr;
  }

  Device dev_;
};

// The fields softrdma cannot give are refused, not faked: CVLAN (no VLAN stripping,
// no raw packet QPs), FLOW_TAG (no flow steering), and any bit beyond the API,
// EOPNOTSUPP as libibverbs and rxe answer.
TEST_F(CqExErrors, FieldsThatCannotBeGivenAreEopnotsupp) {
  for (uint64_t flag : {uint64_t(IBV_WC_EX_WITH_CVLAN), uint64_t(IBV_WC_EX_WITH_FLOW_TAG),
                        uint64_t(1) << 12, uint64_t(1) << 40}) {
    ibv_cq_init_attr_ex attr = plain();
    attr.wc_flags = IBV_WC_STANDARD_FLAGS | flag;
    expect_refused(attr, EOPNOTSUPP, "wc_flags");
  }
}

// Every field softrdma gives is accepted alone (pyverbs' test_create_cq_ex tries
// each flag of ibv_create_cq_wc_flags); TM_INFO (bit 10) has its accessor.
TEST_F(CqExErrors, EveryFieldItGivesIsAccepted) {
  for (int bit : {0, 1, 2, 3, 4, 5, 6, 7, 10, 11}) {
    ibv_cq_init_attr_ex attr = plain();
    attr.wc_flags = uint64_t(1) << bit;
    ibv_cq_ex* cq = ibv_create_cq_ex(dev_.ctx(), &attr);
    ASSERT_NE(cq, nullptr) << "bit " << bit << " errno " << errno;
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
  }
}

// comp_mask: a bit beyond the API is EOPNOTSUPP (libibverbs' check_comp_mask);
// IBV_CQ_INIT_ATTR_MASK_FLAGS with an unknown flag is EINVAL (mlx5).
TEST_F(CqExErrors, UnknownCompMaskOrFlagsAreRefused) {
  ibv_cq_init_attr_ex attr = plain();
  attr.comp_mask = 1u << 2;
  expect_refused(attr, EOPNOTSUPP, "comp_mask");
  attr = plain();
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  attr.flags = 1u << 2;
  expect_refused(attr, EINVAL, "flags");
  // Without the mask bit the flags field is not read.
  attr.comp_mask = 0;
  ibv_cq_ex* cq = ibv_create_cq_ex(dev_.ctx(), &attr);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

// A parent domain (IBV_CQ_INIT_ATTR_MASK_PD) is EINVAL, as mlx5 answers for a PD
// that is not a parent domain: none exists yet, null or an ordinary PD.
TEST_F(CqExErrors, ParentDomainIsEinval) {
  ibv_pd* pd = ibv_alloc_pd(dev_.ctx());
  ASSERT_NE(pd, nullptr);
  ibv_cq_init_attr_ex attr = plain();
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  attr.parent_domain = pd;
  expect_refused(attr, EINVAL, "ordinary PD");
  attr.parent_domain = nullptr;
  expect_refused(attr, EINVAL, "null");
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// ibv_create_cq_ex(3): comp_vector "Must be < context->num_comp_vectors"; cqe 0 or
// beyond max_cqe (also beyond INT_MAX, the type of ibv_cq::cqe) is EINVAL (pyverbs'
// test_create_cq_ex_bad_flow); a channel of another context is EINVAL.
TEST_F(CqExErrors, BadSizeVectorOrChannelIsEinval) {
  for (uint32_t cqe : {0u, kLimits.max_cqe + 1, uint32_t(INT_MAX) + 1, UINT32_MAX}) {
    ibv_cq_init_attr_ex attr = plain();
    attr.cqe = cqe;
    expect_refused(attr, EINVAL, "cqe");
  }
  ibv_cq_init_attr_ex attr = plain();
  attr.comp_vector = uint32_t(dev_.ctx()->num_comp_vectors);
  expect_refused(attr, EINVAL, "comp_vector");
  Device other;
  ibv_comp_channel* channel = ibv_create_comp_channel(other.ctx());
  ASSERT_NE(channel, nullptr);
  attr = plain();
  attr.channel = channel;
  expect_refused(attr, EINVAL, "channel");
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

// A CQ bound to a QP is not destroyed (ibv_destroy_cq(3): EBUSY), extended or not.
TEST_F(CqExErrors, DestroyWhileAQpUsesItIsEbusy) {
  FlushingQp q(8, 0);
  ASSERT_TRUE(q.ready());
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(q.cqx)), EBUSY);
}

// ibv_start_poll: no ibv_poll_cq_attr bit is defined, so one set is EINVAL and
// opens no batch (ENOENT-free: the completion stays for the next poll).
TEST_F(CqExErrors, StartPollWithAnUnknownAttributeIsEinval) {
  FlushingQp q(8, 0);
  ASSERT_TRUE(q.ready());
  q.flush_sends(1);
  ibv_poll_cq_attr attr{};
  attr.comp_mask = 1;
  EXPECT_EQ(ibv_start_poll(q.cqx, &attr), EINVAL);
  EXPECT_EQ(drain_ex(q.cqx).size(), 1u);
}

// ibv_query_rt_values_ex(3): a value beyond the raw clock is EINVAL (mlx5);
// asking for nothing answers nothing.
TEST_F(CqExErrors, QueryRtValuesOfUnknownValuesIsEinval) {
  ibv_values_ex values{};
  values.comp_mask = IBV_VALUES_MASK_RESERVED;
  EXPECT_EQ(ibv_query_rt_values_ex(dev_.ctx(), &values), EINVAL);
  values.comp_mask = 0;
  EXPECT_EQ(ibv_query_rt_values_ex(dev_.ctx(), &values), 0);
  EXPECT_EQ(values.comp_mask, 0u);
}

// ibv_resize_cq(3): "cqe must be at least the number of unpolled entries" and at
// most the device's max_cqe; below 1 is no size. Each refusal is EINVAL and leaves
// the CQ and its completions as they were.
TEST_F(CqExErrors, ResizeOutOfRangeIsEinval) {
  FlushingQp q(8, 0);
  ASSERT_TRUE(q.ready());
  q.flush_sends(5);
  ibv_cq* cq = ibv_cq_ex_to_cq(q.cqx);
  const int before = cq->cqe;
  for (int cqe : {4, 1, 0, -1, int(kLimits.max_cqe + 1), INT_MAX}) {
    EXPECT_EQ(ibv_resize_cq(cq, cqe), EINVAL) << cqe;
    EXPECT_EQ(cq->cqe, before) << cqe;
  }
  std::vector<ExWc> got = drain_ex(q.cqx);
  ASSERT_EQ(got.size(), 5u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wr_id, i);
}

// ibv_resize_cq(3): to exactly the unpolled entries, or larger, keeps them in order,
// updates cqe to the size given, and the CQ holds that many afterwards.
TEST_F(CqExErrors, ResizeKeepsCompletionsAndUpdatesCqe) {
  FlushingQp q(8, IBV_WC_STANDARD_FLAGS, 32);
  ASSERT_TRUE(q.ready());
  q.flush_sends(5);
  ibv_cq* cq = ibv_cq_ex_to_cq(q.cqx);
  ASSERT_EQ(ibv_resize_cq(cq, 5), 0);
  EXPECT_EQ(cq->cqe, 5);
  ASSERT_EQ(ibv_resize_cq(cq, 20), 0);
  EXPECT_EQ(cq->cqe, 20);
  q.flush_sends(15);
  std::vector<ExWc> got = drain_ex(q.cqx);
  ASSERT_EQ(got.size(), 20u) << "20 entries, none lost";
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(got[i].wr_id, i);
  for (size_t i = 5; i < 20; ++i) EXPECT_EQ(got[i].wr_id, i - 5);
}

// An ordinary CQ resizes the same way (ibv_resize_cq(3) is one call for both).
TEST_F(CqExErrors, ResizeOfAnOrdinaryCq) {
  ibv_cq* cq = ibv_create_cq(dev_.ctx(), 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_resize_cq(cq, 0), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq, int(kLimits.max_cqe + 1)), EINVAL);
  EXPECT_EQ(cq->cqe, 4);
  ASSERT_EQ(ibv_resize_cq(cq, 100), 0);
  EXPECT_EQ(cq->cqe, 100);
  ASSERT_EQ(ibv_resize_cq(cq, 2), 0) << "smaller, with nothing unpolled";
  EXPECT_GE(cq->cqe, 2);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

}  // namespace
}  // namespace softrdma::verbs::testing
