// Linux Soft-RoCE's side of a connection played to a softrdma listener: the REQ
// and the RTU rping's client sent in tests/data/rdma_cm.pcap (a real Soft-RoCE
// host), with only the port and the connection's IDs changed, go as RoCEv2
// datagrams to the listener's QP1 from a UDP socket standing for the Soft-RoCE
// host. softrdma must take the REQ, answer with a REP to that host (decoded and
// checked here), and establish on the RTU: the handshake of a Soft-RoCE client
// with a softrdma server, as far as one machine without kernel RDMA can show it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "rdmacm/foreign_host.h"
#include "rdmacm/rdmacm_fixture.h"
#include "support/pcap_reader.h"
#include "wire/cm_gsi.h"
#include "wire/cm_ip.h"
#include "wire/cm_mad.h"
#include "wire/icrc.h"

namespace softrdma::rdmacm::testing {
namespace {

namespace w = softrdma::wire;

// The captured REQ (the first CM MAD of the capture).
w::CmReq captured_req() {
  w::CmReq req;
  auto capture = test::read_roce_pcap(std::string(SOFTRDMA_TEST_DATA) + "/rdma_cm.pcap");
  for (auto& frame : capture.packets) {
    w::PacketView view;
    if (w::parse_packet(frame.udp_payload, view) != w::ParseError::kNone) continue;
    auto mad = w::gsi_mad(view);
    if (!mad.empty() && w::decode(mad, req) == w::MadError::kNone) return req;
  }
  ADD_FAILURE() << "no REQ in rdma_cm.pcap";
  return req;
}

TEST(SoftRoceReplay, CapturedReqIsAnsweredAndTheRtuEstablishes) {
  ForeignHost host;
  ASSERT_GE(host.fd, 0) << "no free 127.0.9.x:4791";
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(channel, &listener, nullptr, RDMA_PS_TCP), 0);
  const uint16_t port = free_port();
  sockaddr_in address = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_bind_addr(listener, as_sockaddr(address)), 0);
  ASSERT_EQ(rdma_listen(listener, 4), 0);
  ibv_gid server{};
  ASSERT_EQ(ibv_query_gid(listener->verbs, 1, 1, &server), 0);
  w::Gid server_gid;
  std::memcpy(server_gid.data(), server.raw, 16);

  // The captured REQ, to this listener's port and with a fresh communication ID.
  w::CmReq req = captured_req();
  req.service_id = w::ip_service_id({w::IpProtocol::kTcp, port});
  req.local_comm_id ^= uint32_t(getpid());
  std::array<uint8_t, w::kMadBytes> mad{};
  w::encode(req, mad);
  host.send_mad(mad, server_gid, 0);

  pollfd p{channel->fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1) << "no CONNECT_REQUEST";
  rdma_cm_event* request = nullptr;
  ASSERT_EQ(rdma_get_cm_event(channel, &request), 0);
  ASSERT_EQ(request->event, RDMA_CM_EVENT_CONNECT_REQUEST) << rdma_event_str(request->event);
  EXPECT_EQ(request->param.conn.qp_num, req.local_qpn);
  EXPECT_EQ(request->param.conn.initiator_depth, req.responder_resources);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(child, nullptr, &attr), 0);
  rdma_conn_param accept{};
  accept.responder_resources = accept.initiator_depth = 1;
  ASSERT_EQ(rdma_accept(child, &accept), 0);

  // The REP, as the Soft-RoCE host receives it.
  auto reply = host.receive_mad();
  ASSERT_TRUE(reply.has_value()) << "no REP";
  w::CmRep rep;
  ASSERT_EQ(w::decode(*reply, rep), w::MadError::kNone);
  EXPECT_EQ(rep.transaction_id, req.transaction_id);
  EXPECT_EQ(rep.remote_comm_id, req.local_comm_id);
  EXPECT_EQ(rep.local_qpn, child->qp->qp_num);
  EXPECT_EQ(rep.responder_resources, 1);
  EXPECT_EQ(rep.initiator_depth, 1);

  // The Linux CM reads a Starting PSN as the PSN its sender will receive: the
  // Soft-RoCE client expects its first request at the REQ's PSN and sends its own
  // from the REP's (drivers/infiniband/core/cm.c: the active side's rq_psn is its
  // REQ's Starting PSN, the passive side's sq_psn is the REQ's).
  ibv_qp_attr qp_attr{};
  ibv_qp_init_attr qp_init{};
  ASSERT_EQ(ibv_query_qp(child->qp, &qp_attr, IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &qp_init), 0);
  EXPECT_EQ(qp_attr.sq_psn, req.starting_psn);
  EXPECT_EQ(qp_attr.rq_psn, rep.starting_psn);
  EXPECT_NE(rep.starting_psn, req.starting_psn);  // chosen afresh, not echoed

  // Its RTU establishes the connection.
  w::CmRtu rtu;
  rtu.transaction_id = req.transaction_id;
  rtu.local_comm_id = req.local_comm_id;
  rtu.remote_comm_id = rep.local_comm_id;
  w::encode(rtu, mad);
  host.send_mad(mad, server_gid, 1);
  ASSERT_EQ(poll(&p, 1, 30000), 1) << "no ESTABLISHED";
  rdma_cm_event* established = nullptr;
  ASSERT_EQ(rdma_get_cm_event(channel, &established), 0);
  EXPECT_EQ(established->event, RDMA_CM_EVENT_ESTABLISHED) << rdma_event_str(established->event);
  EXPECT_EQ(established->id, child);
  rdma_ack_cm_event(established);
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(channel);
}

// Hostile or broken MADs to QP1 — random bytes behind a CM header, and REQs,
// REPs, DREQs with random fields and IDs — are refused or answered without
// harm: the listener still connects an ordinary client afterwards, and at most
// its backlog of requests is delivered.
TEST(SoftRoceReplay, HostileMadsLeaveTheListenerWorking) {
  ForeignHost host;
  ASSERT_GE(host.fd, 0);
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(channel, &listener, nullptr, RDMA_PS_TCP), 0);
  const uint16_t port = free_port();
  sockaddr_in address = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_bind_addr(listener, as_sockaddr(address)), 0);
  constexpr int kBacklog = 8;
  ASSERT_EQ(rdma_listen(listener, kBacklog), 0);
  ibv_gid server{};
  ASSERT_EQ(ibv_query_gid(listener->verbs, 1, 1, &server), 0);
  w::Gid server_gid;
  std::memcpy(server_gid.data(), server.raw, 16);

  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1103515245u + 12345u; };
  std::array<uint8_t, w::kMadBytes> mad{};
  for (int i = 0; i < 300; ++i) {
    for (auto& byte : mad) byte = uint8_t(next() >> 16);
    mad[0] = 1;     // base version
    mad[1] = 0x07;  // CM class
    mad[2] = 2;     // class version
    mad[3] = 0x03;  // Send
    mad[16] = 0;
    mad[17] = uint8_t(0x10 + i % 9);  // REQ .. SIDR_REP
    if (i % 3 == 0) {  // a REQ that names the listener's service, fields random
      w::CmReq req;
      if (w::decode(mad, req) == w::MadError::kNone) {
        req.service_id = w::ip_service_id({w::IpProtocol::kTcp, port});
        w::encode(req, mad);
      }
    }
    host.send_mad(mad, server_gid, uint32_t(i));
  }
  // What was delivered are requests only for REQs that decoded (at most the 100
  // sent), never more than the backlog unanswered at once (the rest rejected).
  int requests = 0;
  for (;;) {
    pollfd p{channel->fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) break;
    rdma_cm_event* event = nullptr;
    ASSERT_EQ(rdma_get_cm_event(channel, &event), 0);
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      ++requests;
      rdma_cm_id* child = event->id;
      rdma_ack_cm_event(event);
      rdma_reject(child, nullptr, 0);
      rdma_destroy_id(child);
    } else {
      rdma_ack_cm_event(event);
    }
  }
  EXPECT_LE(requests, 100);

  // An ordinary client still reaches the listener, and its answer the client.
  rdma_event_channel* client_channel = rdma_create_event_channel();
  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(client_channel, &client, nullptr, RDMA_PS_TCP), 0);
  rdma_cm_event* event = nullptr;
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, as_sockaddr(address), 2000), 0);
  ASSERT_EQ(rdma_get_cm_event(client_channel, &event), 0);
  rdma_ack_cm_event(event);
  ASSERT_EQ(rdma_resolve_route(client, 2000), 0);
  ASSERT_EQ(rdma_get_cm_event(client_channel, &event), 0);
  rdma_ack_cm_event(event);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0);
  rdma_conn_param param{};
  ASSERT_EQ(rdma_connect(client, &param), 0);
  pollfd p{channel->fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1) << "the client's request never came";
  ASSERT_EQ(rdma_get_cm_event(channel, &event), 0);
  ASSERT_EQ(event->event, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* child = event->id;
  rdma_ack_cm_event(event);
  ASSERT_EQ(rdma_reject(child, nullptr, 0), 0);
  pollfd c{client_channel->fd, POLLIN, 0};
  ASSERT_EQ(poll(&c, 1, 30000), 1);
  ASSERT_EQ(rdma_get_cm_event(client_channel, &event), 0);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(event->status, 28);
  rdma_ack_cm_event(event);
  rdma_destroy_id(child);
  rdma_destroy_qp(client);
  rdma_destroy_id(client);
  rdma_destroy_event_channel(client_channel);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(channel);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing

namespace softrdma::rdmacm::testing {
namespace {

// IBA 12.11 and 12.9.8: a SIDR_REQ repeated (its answer lost, or the requester
// impatient) is never a second request. While the application decides, the
// repeat is dropped (the requester resends); once answered, it gets the same
// SIDR_REP again.
TEST(SidrReplay, RepeatedRequestIsOneRequestAndGetsTheSameAnswer) {
  ForeignHost host;
  ASSERT_GE(host.fd, 0) << "no free 127.0.9.x:4791";
  Listener listener(RDMA_PS_UDP);
  w::CmSidrReq req;
  req.transaction_id = 0x5151000000000000ull | uint32_t(getpid());
  req.request_id = 0x7000 ^ uint32_t(getpid());
  req.pkey = 0xffff;
  req.service_id = w::ip_service_id({w::IpProtocol::kUdp, listener.port});
  w::IpCmHeader ip;
  ip.src_port = 40000;
  ip.src_ip = w::ip_cm_ipv4(ntohl(host.address.sin_addr.s_addr));
  ip.dst_ip = w::ip_cm_ipv4(0x7f000001);
  ASSERT_TRUE(w::encode_ip_cm_header(ip, req.private_data));
  std::array<uint8_t, w::kMadBytes> mad{};
  w::encode(req, mad);
  host.send_mad(mad, listener.gid, 0);

  ASSERT_TRUE(listener.has_event(30000)) << "no CONNECT_REQUEST";
  rdma_cm_event* request = nullptr;
  ASSERT_EQ(rdma_get_cm_event(listener.channel, &request), 0);
  ASSERT_EQ(request->event, RDMA_CM_EVENT_CONNECT_REQUEST) << rdma_event_str(request->event);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  host.send_mad(mad, listener.gid, 1);  // while undecided: no answer, no new request
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_UD;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(child, nullptr, &attr), 0);
  ASSERT_EQ(rdma_accept(child, nullptr), 0);

  auto first = host.receive_mad();
  ASSERT_TRUE(first.has_value()) << "no SIDR_REP";
  w::CmSidrRep rep;
  ASSERT_EQ(w::decode(*first, rep), w::MadError::kNone);
  EXPECT_EQ(rep.request_id, req.request_id);
  EXPECT_EQ(rep.status, w::SidrStatus::kSuccess);
  EXPECT_EQ(rep.qpn, child->qp->qp_num);
  EXPECT_EQ(rep.qkey, uint32_t(RDMA_UDP_QKEY));

  host.send_mad(mad, listener.gid, 2);  // answered: the same SIDR_REP again
  auto second = host.receive_mad();
  ASSERT_TRUE(second.has_value()) << "the repeat went unanswered";
  EXPECT_EQ(*second, *first);
  // The repeat was answered by now, so a second request would be queued too.
  EXPECT_FALSE(listener.has_event(0)) << "a repeat became a second request";
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
