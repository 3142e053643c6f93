// rsockets against a peer that speaks rsocket's wire protocol by hand (rdma_cm
// and verbs, docs/decisions/rsockets.md) and then breaks it: the stream must end
// with an error, never read past what was written.
#include <endian.h>
#include <gtest/gtest.h>
#include <rdma/rsocket.h>

#include <cstring>
#include <future>
#include <vector>

#include "rdmacm/rdmacm_fixture.h"
#include "rdmacm/rsocket.h"

namespace softrdma::rdmacm::testing {
namespace {

using rsock::ConnData;

// One RC connection through the CM with an rs_conn_data of its own; the
// target area it offers is real, so the rsocket's credit writes land.
class HandMadePeer {
 public:
  ~HandMadePeer() {
    if (id_ != nullptr && id_->qp != nullptr) rdma_destroy_qp(id_);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (id_ != nullptr) rdma_destroy_id(id_);
    if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  }

  void resolve(sockaddr_in& address) {
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
    attr.cap = {kDepth, kDepth, 1, 1, 0};
    ASSERT_EQ(rdma_create_qp(id_, pd_, &attr), 0) << std::strerror(errno);
    for (uint32_t i = 0; i < kDepth; ++i) {
      ibv_recv_wr wr{}, *bad = nullptr;  // rsocket's receives carry no SGE
      ASSERT_EQ(ibv_post_recv(id_->qp, &wr, &bad), 0);
    }
  }

  // Connects with our rs_conn_data and keeps the acceptor's.
  void connect() {
    ConnData mine{};
    mine.version = 1;
    mine.credits = htobe16(kDepth);
    const uint64_t base = uint64_t(uintptr_t(memory_.data()));
    mine.target_sgl = {htobe64(base), htobe32(mr_->rkey), htobe32(2 * sizeof(rsock::WireSge))};
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

  // A DATA message (WRITE WITH IMMEDIATE into the peer's receive buffer) that
  // claims `bytes` were written; no byte is.
  void claim_data(uint32_t bytes) {
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htobe32(rsock::msg_set(rsock::kOpData, bytes));
    wr.wr.rdma.remote_addr = be64toh(theirs_.data_buf.addr);
    wr.wr.rdma.rkey = be32toh(theirs_.data_buf.key);
    ASSERT_EQ(ibv_post_send(id_->qp, &wr, &bad), 0);
    ibv_wc wc{};
    int n = 0;
    while ((n = ibv_poll_cq(id_->send_cq, 1, &wc)) == 0) {
    }
    ASSERT_EQ(n, 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  }

 private:
  static constexpr uint32_t kDepth = 8;

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
  ConnData theirs_{};
};

TEST(RsocketHostilePeer, DataLongerThanItsCreditEndsTheStreamWithEproto) {
  sockaddr_in address = ipv4("127.0.0.1", free_port());
  int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  ASSERT_EQ(rbind(listener, as_sockaddr(address), sizeof address), 0) << std::strerror(errno);
  ASSERT_EQ(rlisten(listener, 1), 0);
  HandMadePeer peer;
  peer.resolve(address);
  auto accepted = std::async(std::launch::async, [&] { return raccept(listener, nullptr, nullptr); });
  peer.connect();
  const int server = accepted.get();
  ASSERT_GE(server, 0) << std::strerror(errno);

  // The peer may write at most half the receive buffer per credit; it claims
  // the immediate's largest length, far past the buffer's end.
  peer.claim_data(0x1fffffff);
  char buf[64];
  EXPECT_EQ(rrecv(server, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EPROTO);
  EXPECT_EQ(rsend(server, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EPROTO);
  EXPECT_EQ(rclose(server), 0);
  EXPECT_EQ(rclose(listener), 0);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
