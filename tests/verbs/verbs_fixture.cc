#include "verbs/verbs_fixture.h"

#include <chrono>
#include <thread>

namespace softrdma::verbs::testing {

Device::Device() {
  int n = 0;
  list_ = ibv_get_device_list(&n);
  if (list_ == nullptr || n < 1) {
    ADD_FAILURE() << "no verbs device";
    return;
  }
  device_ = list_[0];
  ctx_ = ibv_open_device(device_);
  if (ctx_ == nullptr) ADD_FAILURE() << "ibv_open_device failed, errno " << errno;
}

Device::~Device() {
  if (ctx_ != nullptr) {
    EXPECT_EQ(ibv_close_device(ctx_), 0);
  }
  if (list_ != nullptr) ibv_free_device_list(list_);
}

void Pair::connect(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid,
                   uint8_t sgid_index, ibv_qp_state until) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = kAllAccess;
  ASSERT_EQ(ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = remote_qpn;
  attr.rq_psn = 1000;
  attr.max_dest_rd_atomic = 4;
  attr.min_rnr_timer = 1;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.dgid = remote_gid;
  attr.ah_attr.grh.sgid_index = sgid_index;
  attr.ah_attr.grh.hop_limit = 64;
  attr.ah_attr.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  if (until == IBV_QPS_RTR) return;
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 1000;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 4;
  ASSERT_EQ(ibv_modify_qp(qp, &attr,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
            0);
}

void Pair::make_side(Side& side, ibv_context* ctx, const PairOptions& options) {
  side.ctx = ctx;
  side.pd = ibv_alloc_pd(ctx);
  ASSERT_NE(side.pd, nullptr);
  if (options.with_channel) {
    side.channel = ibv_create_comp_channel(ctx);
    ASSERT_NE(side.channel, nullptr);
  }
  if (options.extended_cq) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = uint32_t(options.cqe);
    attr.cq_context = &side;
    attr.channel = side.channel;
    attr.wc_flags = options.cq_wc_flags;
    if (options.cq_flags != 0) {
      attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
      attr.flags = options.cq_flags;
    }
    side.cqx = ibv_create_cq_ex(ctx, &attr);
    ASSERT_NE(side.cqx, nullptr) << "errno " << errno;
    side.cq = ibv_cq_ex_to_cq(side.cqx);
  } else {
    side.cq = ibv_create_cq(ctx, options.cqe, &side, side.channel, 0);
  }
  ASSERT_NE(side.cq, nullptr);
  side.buf.assign(options.buffer, 0);
  side.mr = ibv_reg_mr(side.pd, side.buf.data(), side.buf.size(), kAllAccess);
  ASSERT_NE(side.mr, nullptr);
  ibv_qp_init_attr_ex init{};
  init.send_cq = side.cq;
  init.recv_cq = side.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = options.max_send_wr;
  init.cap.max_recv_wr = options.max_recv_wr;
  init.cap.max_send_sge = options.max_sge;
  init.cap.max_recv_sge = options.max_sge;
  init.cap.max_inline_data = 64;
  init.comp_mask = IBV_QP_INIT_ATTR_PD;
  init.pd = side.pd;
  if (options.extended_qp) {
    init.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    init.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                          IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                          IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  }
  side.qp = ibv_create_qp_ex(ctx, &init);
  ASSERT_NE(side.qp, nullptr) << "errno " << errno;
}

Pair::Pair(const PairOptions& options) { build(options); }

void Pair::build(const PairOptions& options) {
  dev_a_ = std::make_unique<Device>();
  if (options.two_contexts) dev_b_ = std::make_unique<Device>();
  ibv_context* ctx_a = dev_a_->ctx();
  ibv_context* ctx_b = options.two_contexts ? dev_b_->ctx() : ctx_a;
  if (ctx_a == nullptr || ctx_b == nullptr) return;
  make_side(a, ctx_a, options);
  make_side(b, ctx_b, options);
  if (a.qp == nullptr || b.qp == nullptr) return;
  ibv_gid gid_a{}, gid_b{};
  ASSERT_EQ(ibv_query_gid(ctx_a, 1, options.sgid_index, &gid_a), 0);
  ASSERT_EQ(ibv_query_gid(ctx_b, 1, options.sgid_index, &gid_b), 0);
  connect(a.qp, b.qp->qp_num, gid_b, options.sgid_index);
  connect(b.qp, a.qp->qp_num, gid_a, options.sgid_index);
}

Pair::~Pair() {
  for (Side* side : {&a, &b}) {
    // Each call checked; EXPECT_EQ under a bare `if` would read ambiguously.
    if (side->qp != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(side->qp), 0);
    }
    if (side->mr != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(side->mr), 0);
    }
    if (side->cq != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(side->cq), 0);
    }
    if (side->pd != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(side->pd), 0);
    }
    if (side->channel != nullptr) {
      EXPECT_EQ(ibv_destroy_comp_channel(side->channel), 0);
    }
  }
}

std::vector<ibv_wc> poll_n(ibv_cq* cq, int n) {
  std::vector<ibv_wc> out;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (int(out.size()) < n && std::chrono::steady_clock::now() < give_up) {
    ibv_wc wc[8];
    const int got = ibv_poll_cq(cq, 8, wc);
    if (got < 0) {
      ADD_FAILURE() << "ibv_poll_cq returned " << got;
      break;
    }
    out.insert(out.end(), wc, wc + got);
    if (got == 0) std::this_thread::yield();
  }
  return out;
}

int post_send(ibv_qp* qp, ibv_wr_opcode opcode, ibv_sge sge, uint64_t wr_id,
              uint64_t remote_addr, uint32_t rkey) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int post_recv(ibv_qp* qp, ibv_sge sge, uint64_t wr_id) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

}  // namespace softrdma::verbs::testing
