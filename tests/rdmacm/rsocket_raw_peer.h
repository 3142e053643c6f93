// The CM and verbs half of a test peer that speaks rsocket's wire protocol by
// hand (docs/decisions/rsockets.md): one RC connection made through rdma_cm with
// an rs_conn_data of its own. One memory region holds its credit slots (offset
// 0), its receive buffer (1024, 1 KiB) and what its receives need (2048 on):
// real memory, so the rsocket's credit writes land. The tests' peers
// (rsocket_hostile_test.cc, rsocket_iwarp_test.cc) add the messages they send.
#pragma once

#include <endian.h>
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <vector>

#include "rdmacm/rdmacm_fixture.h"
#include "rdmacm/rsocket.h"

namespace softrdma::rdmacm::testing {

class RawRsocketPeer {
 public:
  static constexpr uint32_t kDepth = 8;

  ~RawRsocketPeer() {
    if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (id_ != nullptr) rdma_destroy_id(id_);
    if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  }

 protected:
  // Resolves `address` and makes the PD, the MR and an RC QP of kDepth WRs each
  // way taking `max_inline` bytes inline; posting receives is the caller's.
  void open(sockaddr_in& address, uint32_t max_inline) {
    channel_ = rdma_create_event_channel();
    ASSERT_NE(channel_, nullptr);
    ASSERT_EQ(rdma_create_id(channel_, &id_, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_resolve_addr(id_, nullptr, as_sockaddr(address), 2000), 0);
    expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(rdma_resolve_route(id_, 2000), 0);
    expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
    pd_ = ibv_alloc_pd(id_->verbs);
    ASSERT_NE(pd_, nullptr);
    mr_ = ibv_reg_mr(pd_, memory_.data(), memory_.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(mr_, nullptr);
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.cap = {kDepth, kDepth, 1, 1, max_inline};
    ASSERT_EQ(rdma_create_qp(id_, pd_, &attr), 0) << std::strerror(errno);
  }

  // Connects offering a target SGL of `sgl_bytes` at offset 0 and the receive
  // buffer; keeps the acceptor's rs_conn_data.
  void connect_offering(uint32_t sgl_bytes) {
    rsock::ConnData mine{};
    mine.version = 1;
    mine.credits = htobe16(kDepth);
    const uint64_t base = uint64_t(uintptr_t(memory_.data()));
    mine.target_sgl = {htobe64(base), htobe32(mr_->rkey), htobe32(sgl_bytes)};
    mine.data_buf = {htobe64(base + 1024), htobe32(mr_->rkey), htobe32(1024)};
    rdma_conn_param param{};
    param.private_data = &mine;
    param.private_data_len = sizeof mine;
    param.responder_resources = param.initiator_depth = 1;
    param.retry_count = param.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(id_, &param), 0) << std::strerror(errno);
    rdma_cm_event* event = next_event(channel_);
    ASSERT_NE(event, nullptr);
    ASSERT_EQ(event->event, RDMA_CM_EVENT_ESTABLISHED) << rdma_event_str(event->event);
    ASSERT_GE(event->param.conn.private_data_len, sizeof theirs_);
    std::memcpy(&theirs_, event->param.conn.private_data, sizeof theirs_);
    rdma_ack_cm_event(event);
  }

  void expect_event(rdma_cm_event_type type) {
    rdma_cm_event* event = next_event(channel_);
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(event->event, type) << rdma_event_str(event->event);
    rdma_ack_cm_event(event);
  }

  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> memory_ = std::vector<uint8_t>(4096);
  rsock::ConnData theirs_{};
};

}  // namespace softrdma::rdmacm::testing
