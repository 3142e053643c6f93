#include "verbs/cq_ex_helpers.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>

namespace softrdma::verbs::testing {

ExWc read_current(ibv_cq_ex* cq) {
  ExWc wc;
  wc.wr_id = cq->wr_id;
  wc.status = cq->status;
  wc.opcode = ibv_wc_read_opcode(cq);
  wc.vendor_err = ibv_wc_read_vendor_err(cq);
  wc.wc_flags = ibv_wc_read_wc_flags(cq);
  if (cq->read_byte_len != nullptr) wc.byte_len = ibv_wc_read_byte_len(cq);
  if (cq->read_imm_data != nullptr) wc.imm_data = ibv_wc_read_imm_data(cq);
  if (cq->read_qp_num != nullptr) wc.qp_num = ibv_wc_read_qp_num(cq);
  if (cq->read_src_qp != nullptr) wc.src_qp = ibv_wc_read_src_qp(cq);
  if (cq->read_slid != nullptr) wc.slid = ibv_wc_read_slid(cq);
  if (cq->read_sl != nullptr) wc.sl = ibv_wc_read_sl(cq);
  if (cq->read_dlid_path_bits != nullptr) wc.dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
  if (cq->read_completion_ts != nullptr) wc.timestamp = ibv_wc_read_completion_ts(cq);
  return wc;
}

namespace {

auto liveness_guard() { return std::chrono::steady_clock::now() + std::chrono::seconds(30); }

}  // namespace

bool start_batch(ibv_cq_ex* cq) {
  const auto give_up = liveness_guard();
  ibv_poll_cq_attr attr{};
  int ret = ENOENT;
  while ((ret = ibv_start_poll(cq, &attr)) == ENOENT && std::chrono::steady_clock::now() < give_up) {
  }
  EXPECT_EQ(ret, 0) << "ibv_start_poll";
  return ret == 0;
}

std::vector<ExWc> take_ex(ibv_cq_ex* cq, int n) {
  std::vector<ExWc> out;
  const auto give_up = liveness_guard();
  while (int(out.size()) < n && std::chrono::steady_clock::now() < give_up) {
    if (!start_batch(cq)) break;
    int ret = 0;
    do {
      out.push_back(read_current(cq));
    } while (int(out.size()) < n && (ret = ibv_next_poll(cq)) == 0);
    EXPECT_TRUE(ret == 0 || ret == ENOENT) << "ibv_next_poll " << ret;
    ibv_end_poll(cq);
  }
  return out;
}

std::vector<ExWc> drain_ex(ibv_cq_ex* cq) {
  std::vector<ExWc> out;
  ibv_poll_cq_attr attr{};
  if (ibv_start_poll(cq, &attr) != 0) return out;
  do {
    out.push_back(read_current(cq));
  } while (ibv_next_poll(cq) == 0);
  ibv_end_poll(cq);
  return out;
}

uint64_t device_clock(ibv_context* ctx) {
  ibv_values_ex values{};
  values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  EXPECT_EQ(ibv_query_rt_values_ex(ctx, &values), 0);
  return uint64_t(values.raw_clock.tv_sec) * 1'000'000'000 + uint64_t(values.raw_clock.tv_nsec);
}

int64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

FlushingQp::FlushingQp(int cqe, uint64_t wc_flags, uint32_t max_send_wr, uint32_t cq_flags) {
  if (dev_.ctx() == nullptr) return;
  pd_ = ibv_alloc_pd(dev_.ctx());
  ibv_cq_init_attr_ex attr{};
  attr.cqe = uint32_t(cqe);
  attr.wc_flags = wc_flags;
  if (cq_flags != 0) {
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    attr.flags = cq_flags;
  }
  cqx = ibv_create_cq_ex(dev_.ctx(), &attr);
  recv_cq_ = ibv_create_cq(dev_.ctx(), 4, nullptr, nullptr, 0);
  if (pd_ == nullptr || cqx == nullptr || recv_cq_ == nullptr) {
    ADD_FAILURE() << "FlushingQp: errno " << errno;
    return;
  }
  ibv_qp_init_attr init{};
  init.send_cq = ibv_cq_ex_to_cq(cqx);
  init.recv_cq = recv_cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap = ibv_qp_cap{max_send_wr, 4, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ibv_qp_attr to_error{};
  to_error.qp_state = IBV_QPS_ERR;
  if (qp == nullptr || ibv_modify_qp(qp, &to_error, IBV_QP_STATE) != 0) {
    ADD_FAILURE() << "FlushingQp: QP to Error, errno " << errno;
    if (qp != nullptr) ibv_destroy_qp(qp);
    return;
  }
  qp_ = qp;
}

FlushingQp::~FlushingQp() {
  if (qp_ != nullptr) {
    EXPECT_EQ(ibv_destroy_qp(qp_), 0);
  }
  if (recv_cq_ != nullptr) {
    EXPECT_EQ(ibv_destroy_cq(recv_cq_), 0);
  }
  if (cqx != nullptr) {
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
  }
  if (pd_ != nullptr) {
    EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
  }
}

void FlushingQp::flush_sends(int n) {
  std::vector<ibv_send_wr> wrs(static_cast<size_t>(n));
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = IBV_WR_SEND;
    if (i + 1 < wrs.size()) wrs[i].next = &wrs[i + 1];
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_, wrs.data(), &bad), 0);
  ibv_recv_wr marker{};
  marker.wr_id = 1000;
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_EQ(ibv_post_recv(qp_, &marker, &bad_recv), 0);
  const std::vector<ibv_wc> flushed = poll_n(recv_cq_, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].wr_id, 1000u);
}

}  // namespace softrdma::verbs::testing
