// Connections through the Communication Manager (rdma_connect(3),
// rdma_accept(3), rdma_reject(3), rdma_disconnect(3)) between two ids of one
// process: the MADs still go through QP1 over UDP loopback.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rdmacm/connecting.h"

namespace softrdma::rdmacm::testing {
namespace {

TEST(Connect, AcceptedConnectionCarriesDataAndDisconnects) {
  Connecting c;
  ASSERT_EQ(c.connect("hello"), 0);
  rdma_cm_event* request = expect_event(c.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->listen_id, c.server.id);
  EXPECT_STREQ(static_cast<const char*>(request->param.conn.private_data), "hello");
  EXPECT_EQ(request->param.conn.initiator_depth, 1);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  ibv_qp_init_attr attr = rc_attr();
  ASSERT_EQ(rdma_create_qp(child, nullptr, &attr), 0);
  // A receive before the accept, so the client's first SEND finds it.
  std::vector<char> inbox(64), outbox(64);
  ibv_mr* in_mr = ibv_reg_mr(child->pd, inbox.data(), inbox.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* out_mr = ibv_reg_mr(c.client.id->pd, outbox.data(), outbox.size(), 0);
  ASSERT_NE(in_mr, nullptr);
  ASSERT_NE(out_mr, nullptr);
  ASSERT_EQ(post_recv_into(child->qp, inbox.data(), 64, in_mr), 0);
  rdma_conn_param accept{};
  accept.responder_resources = accept.initiator_depth = 1;
  const char reply[] = "welcome";
  accept.private_data = reply;
  accept.private_data_len = sizeof reply;
  ASSERT_EQ(rdma_accept(child, &accept), 0);
  rdma_cm_event* established = expect_event(c.client.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(established, nullptr);
  EXPECT_STREQ(static_cast<const char*>(established->param.conn.private_data), "welcome");
  rdma_ack_cm_event(established);
  rdma_ack_cm_event(expect_event(c.server.channel, RDMA_CM_EVENT_ESTABLISHED));

  std::strcpy(outbox.data(), "over rc");
  ASSERT_EQ(post_send_from(c.client.id->qp, outbox.data(), 8, out_mr), 0);
  ibv_wc wc{};
  int polled = 0;
  for (int i = 0; i < 3000000 && polled == 0; ++i) polled = ibv_poll_cq(child->recv_cq, 1, &wc);
  ASSERT_EQ(polled, 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(inbox.data(), "over rc");

  ASSERT_EQ(rdma_disconnect(c.client.id), 0);
  rdma_ack_cm_event(expect_event(c.server.channel, RDMA_CM_EVENT_DISCONNECTED));
  rdma_ack_cm_event(expect_event(c.client.channel, RDMA_CM_EVENT_DISCONNECTED));
  ibv_dereg_mr(in_mr);
  ibv_dereg_mr(out_mr);
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
}

// ECE (docs/decisions/selective-repeat.md): the REQ carries the client QP's
// offer (softrdma's vendor ID, selective repeat), the server's QP made for the
// request takes it, the REP carries the answer and the client's QP takes that:
// both ends agree before any packet is sent.
TEST(Connect, SelectiveRepeatIsAgreedThroughTheReqAndRep) {
  Connecting c;
  ASSERT_EQ(c.connect("ece"), 0);
  rdma_cm_event* request = expect_event(c.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  ibv_ece offered{};
  ASSERT_EQ(rdma_get_remote_ece(child, &offered), 0);
  EXPECT_EQ(offered.vendor_id, 0xffffffu);
  EXPECT_EQ(offered.options, 7u);  // selective repeat, the wide SACK, the hold
  ibv_qp_init_attr attr = rc_attr();
  ASSERT_EQ(rdma_create_qp(child, nullptr, &attr), 0);
  ibv_ece agreed{};
  ASSERT_EQ(ibv_query_ece(child->qp, &agreed), 0);
  EXPECT_EQ(agreed.options, 7u);
  rdma_conn_param accept{};
  accept.responder_resources = accept.initiator_depth = 1;
  ASSERT_EQ(rdma_accept(child, &accept), 0);
  rdma_ack_cm_event(expect_event(c.client.channel, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(expect_event(c.server.channel, RDMA_CM_EVENT_ESTABLISHED));
  ibv_ece client{};
  ASSERT_EQ(ibv_query_ece(c.client.id->qp, &client), 0);
  EXPECT_EQ(client.vendor_id, 0xffffffu);
  EXPECT_EQ(client.options, 7u);  // its offer and the REP's answer are both 7
  ASSERT_EQ(rdma_disconnect(c.client.id), 0);
  rdma_ack_cm_event(expect_event(c.server.channel, RDMA_CM_EVENT_DISCONNECTED));
  rdma_ack_cm_event(expect_event(c.client.channel, RDMA_CM_EVENT_DISCONNECTED));
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
}

TEST(Connect, RejectionReachesTheClientWithItsReason) {
  Connecting c;
  ASSERT_EQ(c.connect("let me in"), 0);
  rdma_cm_event* request = expect_event(c.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  const char why[] = "full";
  ASSERT_EQ(rdma_reject(child, why, sizeof why), 0);
  rdma_cm_event* rejected = expect_event(c.client.channel, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(rejected, nullptr);
  EXPECT_EQ(rejected->status, 28);  // IBA Table 112: consumer reject
  EXPECT_STREQ(static_cast<const char*>(rejected->param.conn.private_data), "full");
  rdma_ack_cm_event(rejected);
  rdma_destroy_id(child);
}

// rdma_listen(3)'s backlog: requests beyond it, not yet answered, are rejected
// ("no resources"), so a flood of REQs cannot grow the listener without bound.
TEST(Connect, RequestsBeyondTheBacklogAreRejected) {
  Side server, first, second;
  const uint16_t port = free_port();
  ASSERT_EQ(rdma_create_id(server.channel, &server.id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in address = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_bind_addr(server.id, as_sockaddr(address)), 0);
  ASSERT_EQ(rdma_listen(server.id, 1), 0);
  for (Side* client : {&first, &second}) {
    ASSERT_EQ(rdma_create_id(client->channel, &client->id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_resolve_addr(client->id, nullptr, as_sockaddr(address), 2000), 0);
    rdma_ack_cm_event(expect_event(client->channel, RDMA_CM_EVENT_ADDR_RESOLVED));
    ASSERT_EQ(rdma_resolve_route(client->id, 2000), 0);
    rdma_ack_cm_event(expect_event(client->channel, RDMA_CM_EVENT_ROUTE_RESOLVED));
    ibv_qp_init_attr attr = rc_attr();
    ASSERT_EQ(rdma_create_qp(client->id, nullptr, &attr), 0);
    rdma_conn_param param{};
    ASSERT_EQ(rdma_connect(client->id, &param), 0);
  }
  rdma_cm_event* request = expect_event(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  rdma_cm_event* rejected = expect_event(second.channel, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(rejected, nullptr);
  EXPECT_EQ(rejected->status, 3);  // IBA Table 112: no resources
  rdma_ack_cm_event(rejected);
  rdma_reject(child, nullptr, 0);
  rdma_ack_cm_event(expect_event(first.channel, RDMA_CM_EVENT_REJECTED));
  rdma_destroy_id(child);
}

// Nobody listens on the port: the REQ is rejected with "invalid service ID".
TEST(Connect, NoListenerIsRejected) {
  Side client;
  ASSERT_EQ(rdma_create_id(client.channel, &client.id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in address = ipv4("127.0.0.1", free_port());
  ASSERT_EQ(rdma_resolve_addr(client.id, nullptr, as_sockaddr(address), 2000), 0);
  rdma_ack_cm_event(expect_event(client.channel, RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_EQ(rdma_resolve_route(client.id, 2000), 0);
  rdma_ack_cm_event(expect_event(client.channel, RDMA_CM_EVENT_ROUTE_RESOLVED));
  ibv_qp_init_attr attr = rc_attr();
  ASSERT_EQ(rdma_create_qp(client.id, nullptr, &attr), 0);
  rdma_conn_param param{};
  ASSERT_EQ(rdma_connect(client.id, &param), 0);
  rdma_cm_event* rejected = expect_event(client.channel, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(rejected, nullptr);
  EXPECT_EQ(rejected->status, 8);
  rdma_ack_cm_event(rejected);
}

// Each message has room for so much private data (IBA 12.6: REQ 92 bytes, less
// the 36 of the IP CM header; REP 196; REJ 148): a call that offers more is
// EINVAL, as with the kernel's CM, and what fits arrives whole.
TEST(Connect, PrivateDataUpToTheMessagesRoomAndNoMore) {
  Connecting c;
  const std::vector<char> big(256, 'x');
  rdma_conn_param param{};
  param.private_data = big.data();
  param.responder_resources = param.initiator_depth = 1;
  param.private_data_len = 57;
  EXPECT_EQ(rdma_connect(c.client.id, &param), -1);
  EXPECT_EQ(errno, EINVAL);
  param.private_data_len = 56;
  ASSERT_EQ(rdma_connect(c.client.id, &param), 0);
  rdma_cm_event* request = expect_event(c.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  ASSERT_GE(request->param.conn.private_data_len, 56);
  EXPECT_EQ(std::memcmp(request->param.conn.private_data, big.data(), 56), 0);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  EXPECT_EQ(rdma_reject(child, big.data(), 149), -1);
  EXPECT_EQ(errno, EINVAL);
  param.private_data_len = 197;
  EXPECT_EQ(rdma_accept(child, &param), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rdma_reject(child, big.data(), 148), 0);
  rdma_cm_event* rejected = expect_event(c.client.channel, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(rejected, nullptr);
  ASSERT_EQ(rejected->param.conn.private_data_len, 148);
  EXPECT_EQ(std::memcmp(rejected->param.conn.private_data, big.data(), 148), 0);
  rdma_ack_cm_event(rejected);
  rdma_destroy_id(child);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
