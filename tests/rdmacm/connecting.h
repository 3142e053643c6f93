// Helpers of rdmacm_test's connection tests: two ids of one process, a
// listener on 127.0.0.1 and a client resolved to it, through the public API.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "rdmacm/rdmacm_fixture.h"

namespace softrdma::rdmacm::testing {

// The next event of a channel, expected to be `type` (the test fails otherwise).
inline rdma_cm_event* expect_event(rdma_event_channel* channel, rdma_cm_event_type type) {
  rdma_cm_event* event = next_event(channel);
  EXPECT_NE(event, nullptr) << "no event, expected " << rdma_event_str(type);
  if (event != nullptr) {
    EXPECT_EQ(event->event, type) << rdma_event_str(event->event) << " status " << event->status;
  }
  return event;
}

struct Side {
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ~Side() {
    if (id != nullptr) rdma_destroy_id(id);
    rdma_destroy_event_channel(channel);
  }
};

inline ibv_qp_init_attr rc_attr() {
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  return attr;
}

// A listener on 127.0.0.1 and a client resolved to it, with a QP.
struct Connecting {
  Side server, client;
  uint16_t port = free_port();

  Connecting() {
    EXPECT_EQ(rdma_create_id(server.channel, &server.id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in address = ipv4("127.0.0.1", port);
    EXPECT_EQ(rdma_bind_addr(server.id, as_sockaddr(address)), 0);
    EXPECT_EQ(rdma_listen(server.id, 4), 0);
    EXPECT_EQ(rdma_create_id(client.channel, &client.id, nullptr, RDMA_PS_TCP), 0);
    EXPECT_EQ(rdma_resolve_addr(client.id, nullptr, as_sockaddr(address), 2000), 0);
    rdma_ack_cm_event(expect_event(client.channel, RDMA_CM_EVENT_ADDR_RESOLVED));
    EXPECT_EQ(rdma_resolve_route(client.id, 2000), 0);
    rdma_ack_cm_event(expect_event(client.channel, RDMA_CM_EVENT_ROUTE_RESOLVED));
    ibv_qp_init_attr attr = rc_attr();
    EXPECT_EQ(rdma_create_qp(client.id, nullptr, &attr), 0);
  }

  int connect(const char* private_data, uint8_t rnr_retry_count = 7) {
    rdma_conn_param param{};
    param.private_data = private_data;
    param.private_data_len = uint8_t(std::strlen(private_data) + 1);
    param.responder_resources = param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = rnr_retry_count;
    return rdma_connect(client.id, &param);
  }
};

// One receive of `length` bytes into `buffer` (registered as `mr`) on `qp`.
inline int post_recv_into(ibv_qp* qp, void* buffer, uint32_t length, const ibv_mr* mr) {
  ibv_sge sge{uint64_t(uintptr_t(buffer)), length, mr->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

// One signaled SEND of `length` bytes from `buffer` (registered as `mr`) on `qp`.
inline int post_send_from(ibv_qp* qp, const void* buffer, uint32_t length, const ibv_mr* mr) {
  ibv_sge sge{uint64_t(uintptr_t(buffer)), length, mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

}  // namespace softrdma::rdmacm::testing
