// Misuse gets the errno (or completion status) verbs documents, never a crash:
// ibv_create_qp(3), ibv_create_cq(3), ibv_modify_qp(3), ibv_post_send(3),
// ibv_dealloc_pd(3), ibv_destroy_cq(3), and the verbs softrdma lacks so far.
#include <cstring>

#include "engine/limits.h"
#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

const engine::DeviceLimits kLimits;

class Misuse : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(dev_.ctx(), nullptr);
    pd_ = ibv_alloc_pd(dev_.ctx());
    ASSERT_NE(pd_, nullptr);
    cq_ = ibv_create_cq(dev_.ctx(), 16, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
  }
  void TearDown() override {
    if (cq_ != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(cq_), 0);
    }
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
  }
  ibv_qp_init_attr rc_init() const {
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    return init;
  }

  Device dev_;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
};

// ibv_create_qp(3): caps beyond the device's limits are EINVAL.
TEST_F(Misuse, CreateQpBeyondLimitsIsEinval) {
  ibv_qp_init_attr init = rc_init();
  init.cap.max_send_wr = kLimits.max_qp_wr + 1;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_, &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  init = rc_init();
  init.cap.max_send_sge = kLimits.max_sge + 1;
  EXPECT_EQ(ibv_create_qp(pd_, &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  init = rc_init();
  init.cap.max_inline_data = kLimits.max_inline_data + 1;
  EXPECT_EQ(ibv_create_qp(pd_, &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  init = rc_init();
  init.send_cq = nullptr;
  EXPECT_EQ(ibv_create_qp(pd_, &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// The QP types the engine lacks: EOPNOTSUPP, not a crash.
TEST_F(Misuse, UnsupportedQpTypesAreEopnotsupp) {
  for (ibv_qp_type type : {IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER}) {
    ibv_qp_init_attr init = rc_init();
    init.qp_type = type;
    errno = 0;
    EXPECT_EQ(ibv_create_qp(pd_, &init), nullptr) << type;
    EXPECT_EQ(errno, EOPNOTSUPP) << type;
  }
}

// ibv_create_qp(3) reports the capabilities the QP really got.
TEST_F(Misuse, CreateQpReportsActualCaps) {
  ibv_qp_init_attr init = rc_init();
  init.cap.max_send_sge = 0;
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  EXPECT_GE(init.cap.max_send_sge, 1u);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  ibv_qp_attr attr{};
  ibv_qp_init_attr got{};
  ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_CAP, &got), 0);
  EXPECT_EQ(got.cap.max_send_wr, init.cap.max_send_wr);
  EXPECT_EQ(got.send_cq, cq_);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// ibv_create_cq(3): more entries than max_cqe, or none, is EINVAL.
TEST_F(Misuse, CreateCqBeyondMaxCqeIsEinval) {
  errno = 0;
  EXPECT_EQ(ibv_create_cq(dev_.ctx(), int(kLimits.max_cqe + 1), nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_create_cq(dev_.ctx(), 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_create_cq(dev_.ctx(), 4, nullptr, nullptr, 1), nullptr);  // one vector
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq_, int(kLimits.max_cqe + 1)), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq_, 64), 0);
  EXPECT_GE(cq_->cqe, 64);
}

// ibv_modify_qp(3): an invalid transition, or a missing required attribute, is
// EINVAL and leaves the QP as it was.
TEST_F(Misuse, InvalidModifyQpIsEinvalAndChangesNothing) {
  ibv_qp_init_attr init = rc_init();
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;  // RESET -> RTS skips INIT and RTR
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), EINVAL);
  attr.qp_state = IBV_QPS_INIT;  // RESET -> INIT without its required attributes
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), EINVAL);
  attr.port_num = 2;  // no such port
  EXPECT_EQ(ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            EINVAL);
  ibv_qp_attr got{};
  ibv_qp_init_attr got_init{};
  ASSERT_EQ(ibv_query_qp(qp, &got, IBV_QP_STATE, &got_init), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RESET);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  attr.port_num = 1;
  EXPECT_EQ(ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// ibv_post_send(3) to a QP in RESET is EINVAL, with bad_wr at the first WR.
TEST_F(Misuse, PostingToResetQpIsEinval) {
  ibv_qp_init_attr init = rc_init();
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  char buf[8];
  ibv_sge sge{uint64_t(uintptr_t(buf)), 8, 0};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &rwr, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rwr);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// More SGEs than the QP was created with: EINVAL, and bad_wr names that WR.
TEST(MisuseConnected, TooManySgesIsEinval) {
  Pair pair(PairOptions{.max_sge = 2});
  ibv_sge sges[3] = {{pair.a.addr(0), 8, pair.a.mr->lkey},
                     {pair.a.addr(8), 8, pair.a.mr->lkey},
                     {pair.a.addr(16), 8, pair.a.mr->lkey}};
  ibv_send_wr ok{}, too_many{};
  ok.sg_list = sges;
  ok.num_sge = 1;
  ok.opcode = IBV_WR_RDMA_WRITE;
  ok.wr.rdma.remote_addr = pair.b.addr(0);
  ok.wr.rdma.rkey = pair.b.mr->rkey;
  ok.next = &too_many;
  too_many = ok;
  too_many.num_sge = 3;
  too_many.next = nullptr;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(pair.a.qp, &ok, &bad), EINVAL);
  EXPECT_EQ(bad, &too_many);
  ibv_recv_wr rwr{};
  rwr.sg_list = sges;
  rwr.num_sge = 3;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(pair.b.qp, &rwr, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rwr);
}

// An lkey of another PD: the WR completes with IBV_WC_LOC_PROT_ERR (IBA
// 10.6.3.5: a local key is checked against the QP's PD).
TEST(MisuseConnected, LkeyOfAnotherPdIsLocalProtectionError) {
  Pair pair;
  ibv_pd* other_pd = ibv_alloc_pd(pair.a.ctx);
  ASSERT_NE(other_pd, nullptr);
  std::vector<uint8_t> mem(64);
  ibv_mr* foreign = ibv_reg_mr(other_pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(foreign, nullptr);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, {uint64_t(uintptr_t(mem.data())), 64,
                                                     foreign->lkey},
                      5, pair.b.addr(0), pair.b.mr->rkey),
            0);
  auto wc = poll_n(pair.a.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 5u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(ibv_dereg_mr(foreign), 0);
  EXPECT_EQ(ibv_dealloc_pd(other_pd), 0);
}

// A bad rkey at the responder: the requester completes with
// IBV_WC_REM_ACCESS_ERR (IBA 9.7.5.2.4, NAK "remote access error").
TEST(MisuseConnected, BadRkeyIsRemoteAccessError) {
  Pair pair;
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, {pair.a.addr(0), 64, pair.a.mr->lkey}, 6,
                      pair.b.addr(0), pair.b.mr->rkey ^ 0x5a5a5a5a),
            0);
  auto wc = poll_n(pair.a.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(pair.a.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
  EXPECT_EQ(pair.a.qp->state, IBV_QPS_ERR);  // refreshed by ibv_query_qp
}

// Objects still in use cannot go: EBUSY (ibv_dealloc_pd(3), ibv_destroy_cq(3),
// ibv_destroy_comp_channel(3)).
TEST_F(Misuse, DestroyingBusyObjectsIsEbusy) {
  char buf[64];
  ibv_mr* mr = ibv_reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  ibv_qp_init_attr init = rc_init();
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  ibv_comp_channel* channel = ibv_create_comp_channel(dev_.ctx());
  ASSERT_NE(channel, nullptr);
  ibv_cq* cq = ibv_create_cq(dev_.ctx(), 4, nullptr, channel, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), EBUSY);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

// ibv_reg_mr(3): remote write without local write is EINVAL; optional access
// bits (IBV_ACCESS_RELAXED_ORDERING, as perftest sets) are accepted.
TEST_F(Misuse, MemoryRegistrationAccessRules) {
  char buf[64];
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* mr = ibv_reg_mr_iova2(pd_, buf, sizeof buf, uintptr_t(buf),
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->lkey, mr->rkey);
  EXPECT_EQ(mr->addr, buf);
  EXPECT_EQ(mr->length, sizeof buf);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// ibv_poll_cq(3): a negative count is a failure, not a corrupted CQ.
TEST_F(Misuse, PollWithNegativeCountFails) {
  ibv_wc wc;
  EXPECT_LT(ibv_poll_cq(cq_, -1, &wc), 0);
  EXPECT_EQ(ibv_poll_cq(cq_, 0, &wc), 0);
  EXPECT_EQ(ibv_poll_cq(cq_, 1, &wc), 0);
}

// ibv_create_qp_ex(3): extensions softrdma cannot honour are EOPNOTSUPP; a
// missing PD is EINVAL.
TEST_F(Misuse, CreateQpExRejectsWhatItCannotHonour) {
  ibv_qp_init_attr_ex init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.pd = pd_;
  init.send_ops_flags = IBV_QP_EX_WITH_TSO;  // UD/raw packet only
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(dev_.ctx(), &init), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  init.send_ops_flags = IBV_QP_EX_WITH_SEND;
  init.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
  init.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  EXPECT_EQ(ibv_create_qp_ex(dev_.ctx(), &init), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  init.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;  // no PD
  EXPECT_EQ(ibv_create_qp_ex(dev_.ctx(), &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// ibv_rereg_mr(3): input errors are IBV_REREG_MR_ERR_INPUT with the MR untouched;
// a change of range, PD or rights is seen in the MR at once.
TEST_F(Misuse, ReregMrChecksItsInputAndAppliesTheChange) {
  std::vector<uint8_t> first(4096), second(8192);
  ibv_mr* mr = ibv_reg_mr(pd_, first.data(), first.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_rereg_mr(mr, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT) << "no flag";
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 0, 0),
            IBV_REREG_MR_ERR_INPUT) << "a translation without a range";
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, second.data(), 16,
                         IBV_ACCESS_LOCAL_WRITE), IBV_REREG_MR_ERR_INPUT)
      << "a range without CHANGE_TRANSLATION";
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_REMOTE_WRITE), IBV_REREG_MR_ERR_INPUT)
      << "remote write without local write";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(mr->addr, first.data()) << "untouched after refusals";
  ibv_pd* other = ibv_alloc_pd(dev_.ctx());
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD, other,
                         second.data(), second.size(), 0), 0);
  EXPECT_EQ(mr->addr, second.data());
  EXPECT_EQ(mr->length, second.size());
  EXPECT_EQ(mr->pd, other);
  EXPECT_EQ(ibv_dealloc_pd(other), EBUSY) << "the MR moved to it";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

// ECE (ibv_query_ece(3), ibv_set_ece(3); docs/decisions/selective-repeat.md): an
// RC QP offers selective repeat under softrdma's vendor ID; another vendor's
// options, or a comp_mask this version does not know, are refused; the agreed
// options are what both understand.
TEST_F(Misuse, EceOffersSelectiveRepeatAndRefusesWhatItDoesNotKnow) {
  ibv_qp_init_attr init = rc_init();
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  ibv_ece ece{};
  ASSERT_EQ(ibv_query_ece(qp, &ece), 0);
  EXPECT_EQ(ece.vendor_id, 0xffffffu);
  EXPECT_EQ(ece.options, 7u)
      << "selective repeat (bit 0) with the wide SACK (bit 1) and the responder's hold (bit 2)";
  ibv_ece mellanox{.vendor_id = 0x15b3, .options = 1, .comp_mask = 0};
  errno = 0;
  EXPECT_EQ(ibv_set_ece(qp, &mellanox), EINVAL);
  EXPECT_EQ(errno, EINVAL) << "librdmacm reads errno";
  ibv_ece unknown_mask{.vendor_id = 0xffffff, .options = 1, .comp_mask = 1};
  EXPECT_EQ(ibv_set_ece(qp, &unknown_mask), EINVAL);
  EXPECT_EQ(ibv_query_ece(nullptr, &ece), EINVAL);
  ibv_ece more{.vendor_id = 0xffffff, .options = 0xff, .comp_mask = 0};
  ASSERT_EQ(ibv_set_ece(qp, &more), 0);
  ASSERT_EQ(ibv_query_ece(qp, &ece), 0);
  EXPECT_EQ(ece.options, 7u) << "only what softrdma understands is agreed";
  ibv_ece narrow{.vendor_id = 0xffffff, .options = 1, .comp_mask = 0};
  ASSERT_EQ(ibv_set_ece(qp, &narrow), 0);
  ASSERT_EQ(ibv_query_ece(qp, &ece), 0);
  EXPECT_EQ(ece.options, 1u) << "a peer without the wide SACK: selective repeat alone";
  ibv_ece none{.vendor_id = 0xffffff, .options = 0, .comp_mask = 0};
  ASSERT_EQ(ibv_set_ece(qp, &none), 0);
  ASSERT_EQ(ibv_query_ece(qp, &ece), 0);
  EXPECT_EQ(ece.options, 0u) << "the peer declined: go-back-N";
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// What the engine has not got yet answers "not supported" the verbs way.
TEST_F(Misuse, MissingFeaturesAreEopnotsupp) {
  errno = 0;
  EXPECT_EQ(ibv_reg_dmabuf_mr(pd_, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_qp_init_attr init = rc_init();
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  ibv_cq_init_attr_ex cq_ex{};  // no VLANs: cq_ex_errors_test.cc has the others
  cq_ex.cqe = 4;
  cq_ex.wc_flags = IBV_WC_EX_WITH_CVLAN;
  EXPECT_EQ(ibv_create_cq_ex(dev_.ctx(), &cq_ex), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

}  // namespace
}  // namespace softrdma::verbs::testing
