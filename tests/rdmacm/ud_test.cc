// UD through rdma_cm: SIDR (IBA 12.11) for RDMA_PS_UDP ids and multicast joins
// (rdma_join_multicast(3)), between ids of one process over QP1 and UDP loopback.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rdmacm/rdmacm_fixture.h"

namespace softrdma::rdmacm::testing {
namespace {

rdma_cm_event* expect(rdma_event_channel* channel, rdma_cm_event_type type) {
  rdma_cm_event* event = next_event(channel);
  EXPECT_NE(event, nullptr) << "no event, expected " << rdma_event_str(type);
  if (event != nullptr) {
    EXPECT_EQ(event->event, type) << rdma_event_str(event->event) << " status " << event->status;
  }
  return event;
}

struct UdSide {
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  UdSide() { rdma_create_id(channel, &id, nullptr, RDMA_PS_UDP); }
  ~UdSide() {
    if (id->qp != nullptr) rdma_destroy_qp(id);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(channel);
  }
  void make_qp() {
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_UD;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = 64;
    ASSERT_EQ(rdma_create_qp(id, nullptr, &attr), 0) << errno;
  }
  void resolve(sockaddr_in& to) {
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, as_sockaddr(to), 2000), 0);
    rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ADDR_RESOLVED));
    ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
    rdma_ack_cm_event(expect(channel, RDMA_CM_EVENT_ROUTE_RESOLVED));
  }
  // Binds to 127.0.0.1 on a free port and listens; the address, for clients.
  sockaddr_in listen_on_loopback() {
    sockaddr_in address = ipv4("127.0.0.1", free_port());
    EXPECT_EQ(rdma_bind_addr(id, as_sockaddr(address)), 0);
    EXPECT_EQ(rdma_listen(id, 4), 0);
    return address;
  }
};

// Accepted: the client's ESTABLISHED carries the server QP's number, the UDP
// Q_Key and an address that reaches it; a datagram sent with them arrives.
TEST(UdConnect, AcceptedRequestGivesThePeersAddress) {
  UdSide server, client;
  sockaddr_in address = server.listen_on_loopback();
  client.resolve(address);
  client.make_qp();
  rdma_conn_param param{};
  const char hello[] = "ud hello";
  param.private_data = hello;
  param.private_data_len = sizeof hello;
  ASSERT_EQ(rdma_connect(client.id, &param), 0);
  rdma_cm_event* request = expect(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  EXPECT_STREQ(static_cast<const char*>(request->param.ud.private_data), "ud hello");
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_UD;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(child, nullptr, &attr), 0);
  std::vector<char> inbox(40 + 64);
  ibv_mr* mr = ibv_reg_mr(child->pd, inbox.data(), inbox.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge rsge{uint64_t(uintptr_t(inbox.data())), uint32_t(inbox.size()), mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_recv(child->qp, &rwr, &bad_r), 0);
  ASSERT_EQ(rdma_accept(child, nullptr), 0);
  rdma_cm_event* established = expect(client.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(established, nullptr);
  EXPECT_EQ(established->param.ud.qp_num, child->qp->qp_num);
  EXPECT_EQ(established->param.ud.qkey, uint32_t(RDMA_UDP_QKEY));
  ibv_ah* ah = ibv_create_ah(client.id->pd, &established->param.ud.ah_attr);
  ASSERT_NE(ah, nullptr);
  const uint32_t remote_qpn = established->param.ud.qp_num;
  rdma_ack_cm_event(established);
  char message[16] = "to the server";
  ibv_sge ssge{uint64_t(uintptr_t(message)), sizeof message, 0};
  ibv_send_wr swr{};
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  swr.wr.ud.ah = ah;
  swr.wr.ud.remote_qpn = remote_qpn;
  swr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
  ibv_send_wr* bad_s = nullptr;
  ASSERT_EQ(ibv_post_send(client.id->qp, &swr, &bad_s), 0);
  ibv_wc wc{};
  int polled = 0;
  for (int i = 0; i < 3000000 && polled == 0; ++i) polled = ibv_poll_cq(child->recv_cq, 1, &wc);
  ASSERT_EQ(polled, 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(inbox.data() + 40, "to the server");
  ibv_destroy_ah(ah);
  ibv_dereg_mr(mr);
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
}

// Rejected, or nobody listening: UNREACHABLE with the SIDR_REP's status
// (IBA 12.11 Table 120: 2 rejected, 1 service ID not supported), as the
// kernel's cma reports it.
TEST(UdConnect, RejectedOrUnlistenedIsUnreachableWithTheSidrStatus) {
  UdSide server, client, lonely;
  sockaddr_in address = server.listen_on_loopback();
  client.resolve(address);
  rdma_conn_param param{};
  ASSERT_EQ(rdma_connect(client.id, &param), 0);
  rdma_cm_event* request = expect(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  ASSERT_EQ(rdma_reject(child, nullptr, 0), 0);
  rdma_cm_event* refused = expect(client.channel, RDMA_CM_EVENT_UNREACHABLE);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->status, 2);
  rdma_ack_cm_event(refused);
  rdma_destroy_id(child);

  sockaddr_in nobody = ipv4("127.0.0.1", free_port());
  lonely.resolve(nobody);
  ASSERT_EQ(rdma_connect(lonely.id, &param), 0);
  rdma_cm_event* unsupported = expect(lonely.channel, RDMA_CM_EVENT_UNREACHABLE);
  ASSERT_NE(unsupported, nullptr);
  EXPECT_EQ(unsupported->status, 1);
  rdma_ack_cm_event(unsupported);
}

// A SIDR_REQ has room for 180 bytes after the IP CM header, a SIDR_REP for
// 136: more is EINVAL, never cut short on the wire.
TEST(UdConnect, PrivateDataUpToTheMessagesRoomAndNoMore) {
  UdSide server, client;
  sockaddr_in address = server.listen_on_loopback();
  client.resolve(address);
  const std::vector<char> big(256, 'u');
  rdma_conn_param param{};
  param.private_data = big.data();
  param.private_data_len = 181;
  EXPECT_EQ(rdma_connect(client.id, &param), -1);
  EXPECT_EQ(errno, EINVAL);
  param.private_data_len = 180;
  ASSERT_EQ(rdma_connect(client.id, &param), 0);
  rdma_cm_event* request = expect(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  ASSERT_GE(request->param.ud.private_data_len, 180);
  EXPECT_EQ(std::memcmp(request->param.ud.private_data, big.data(), 180), 0);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  EXPECT_EQ(rdma_reject(child, big.data(), 137), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rdma_reject(child, big.data(), 136), 0);
  rdma_cm_event* refused = expect(client.channel, RDMA_CM_EVENT_UNREACHABLE);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->status, 2);
  rdma_ack_cm_event(refused);
  rdma_destroy_id(child);
}

// A join gives the group's address (MGID ::ffff:224.x, QPN 0xFFFFFF, the UDP
// Q_Key, the caller's context); the same group twice is EADDRINUSE, a unicast
// address or a TCP id EINVAL; leaving a group never joined EADDRNOTAVAIL.
TEST(Multicast, JoinAndLeave) {
  UdSide member;
  sockaddr_in group = ipv4("224.0.77.1", 0);
  member.resolve(group);
  member.make_qp();
  int context = 0;
  ASSERT_EQ(rdma_join_multicast(member.id, as_sockaddr(group), &context), 0) << errno;
  rdma_cm_event* joined = expect(member.channel, RDMA_CM_EVENT_MULTICAST_JOIN);
  ASSERT_NE(joined, nullptr);
  EXPECT_EQ(joined->param.ud.private_data, &context);
  EXPECT_EQ(joined->param.ud.qp_num, 0xFFFFFFu);
  EXPECT_EQ(joined->param.ud.qkey, uint32_t(RDMA_UDP_QKEY));
  EXPECT_EQ(gid_text(joined->param.ud.ah_attr.grh.dgid), "::ffff:224.0.77.1");
  rdma_ack_cm_event(joined);
  EXPECT_EQ(rdma_join_multicast(member.id, as_sockaddr(group), nullptr), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  sockaddr_in unicast = ipv4("127.0.0.1", 0);
  EXPECT_EQ(rdma_join_multicast(member.id, as_sockaddr(unicast), nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_leave_multicast(member.id, as_sockaddr(group)), 0);
  EXPECT_EQ(rdma_leave_multicast(member.id, as_sockaddr(group)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  rdma_cm_id* tcp = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &tcp, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_join_multicast(tcp, as_sockaddr(group), nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_destroy_id(tcp);
}

// rdma_join_multicast_ex(3): the address and the join flags are both needed; a
// send-only full member's QP is not attached to the group (it would receive
// the group's datagrams), a full member's is. ibv_detach_mcast tells which:
// EINVAL for a QP that is not attached.
TEST(Multicast, SendOnlyJoinLeavesTheQpDetached) {
  UdSide member;
  sockaddr_in send_only = ipv4("224.0.77.2", 0), full = ipv4("224.0.77.3", 0);
  member.resolve(send_only);
  member.make_qp();
  rdma_cm_join_mc_attr_ex attr{};
  attr.addr = as_sockaddr(send_only);
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
  EXPECT_EQ(rdma_join_multicast_ex(member.id, &attr, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  attr.comp_mask |= RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
  EXPECT_EQ(rdma_join_multicast_ex(member.id, &attr, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  attr.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  ASSERT_EQ(rdma_join_multicast_ex(member.id, &attr, nullptr), 0) << errno;
  rdma_ack_cm_event(expect(member.channel, RDMA_CM_EVENT_MULTICAST_JOIN));
  attr.addr = as_sockaddr(full);
  attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  ASSERT_EQ(rdma_join_multicast_ex(member.id, &attr, nullptr), 0) << errno;
  rdma_cm_event* joined = expect(member.channel, RDMA_CM_EVENT_MULTICAST_JOIN);
  ASSERT_NE(joined, nullptr);
  const ibv_gid full_mgid = joined->param.ud.ah_attr.grh.dgid;
  rdma_ack_cm_event(joined);
  ibv_gid send_only_mgid{};
  send_only_mgid.raw[10] = send_only_mgid.raw[11] = 0xff;
  std::memcpy(&send_only_mgid.raw[12], &send_only.sin_addr, 4);
  EXPECT_NE(ibv_detach_mcast(member.id->qp, &send_only_mgid, 0), 0);
  // Detached by hand and attached again: the full member's QP was attached.
  EXPECT_EQ(ibv_detach_mcast(member.id->qp, &full_mgid, 0), 0);
  EXPECT_EQ(ibv_attach_mcast(member.id->qp, &full_mgid, 0), 0);
  EXPECT_EQ(rdma_leave_multicast(member.id, as_sockaddr(send_only)), 0);
  EXPECT_EQ(rdma_leave_multicast(member.id, as_sockaddr(full)), 0);
  EXPECT_NE(ibv_detach_mcast(member.id->qp, &full_mgid, 0), 0);  // the leave detached it
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
