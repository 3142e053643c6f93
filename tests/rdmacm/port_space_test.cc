// A request of the wrong kind for a listener (issue 27, finding 3): a SIDR_REQ
// to an RC listener (RDMA_PS_TCP), a REQ to a UD one (RDMA_PS_UDP). The kernel's
// rdma_cm takes a REQ only for an id of the QP type it names and a SIDR_REQ only
// for a UD id (cma.c, cma_ib_check_req_qp_type); its ib_cm then refuses what it
// holds: SIDR_REP status 2 "rejected", REJ reason 28 "consumer defined" (cm.c,
// cm_destroy_id). Each test feeds the listener's CM agent the MAD from a peer
// standing for a RoCEv2 host, reads what the agent sends back, and checks that
// the application hears nothing of it: the next request, of the right kind, is
// the first event the listener gets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "rdmacm/foreign_host.h"
#include "wire/cm_ip.h"

namespace softrdma::rdmacm::testing {
namespace {

// The IP CM header (IBA A11.6) of a request from `host` to 127.0.0.1, then one
// byte of the consumer's private data that tells the requests apart.
template <typename Request>
void address_request(Request& request, const ForeignHost& host, uint8_t marker) {
  w::IpCmHeader ip;
  ip.src_port = 40000;
  ip.src_ip = w::ip_cm_ipv4(ntohl(host.address.sin_addr.s_addr));
  ip.dst_ip = w::ip_cm_ipv4(0x7f000001);
  ASSERT_TRUE(w::encode_ip_cm_header(ip, request.private_data));
  request.private_data[w::kIpCmHeaderBytes] = marker;
}

// An RC REQ, as a RoCEv2 host's rdma_cm fills one, to `service_id`.
w::CmReq rc_req(const ForeignHost& host, uint64_t service_id, uint8_t marker) {
  w::CmReq req;
  req.transaction_id = 0x2727000000000000ull | uint32_t(getpid());
  req.local_comm_id = 0x3000 ^ uint32_t(getpid());
  req.service_id = service_id;
  req.local_qpn = 0x123;
  req.starting_psn = 0x4567;
  req.responder_resources = req.initiator_depth = 1;
  req.remote_cm_response_timeout = req.local_cm_response_timeout = 20;
  req.transport_service_type = 0;  // RC
  req.retry_count = req.rnr_retry_count = 7;
  req.max_cm_retries = 15;
  req.pkey = 0xffff;
  req.path_mtu = w::CmMtu::k1024;
  address_request(req, host, marker);
  return req;
}

w::CmSidrReq sidr_req(const ForeignHost& host, uint64_t service_id, uint8_t marker) {
  w::CmSidrReq req;
  req.transaction_id = 0x5151000000000000ull | uint32_t(getpid());
  req.request_id = 0x7000 ^ uint32_t(getpid());
  req.pkey = 0xffff;
  req.service_id = service_id;
  address_request(req, host, marker);
  return req;
}

template <typename Message>
void send(ForeignHost& host, const Message& message, const w::Gid& to, uint32_t psn) {
  std::array<uint8_t, w::kMadBytes> mad{};
  w::encode(message, mad);
  host.send_mad(mad, to, psn);
}

// The first MAD of kind `Message` the host receives (others, such as the REJ
// of a request the test rejects, are passed over).
template <typename Message>
std::optional<Message> receive(ForeignHost& host) {
  for (int i = 0; i < 8; ++i) {
    auto mad = host.receive_mad();
    if (!mad) return std::nullopt;
    Message message;
    if (w::decode(*mad, message) == w::MadError::kNone) return message;
  }
  return std::nullopt;
}

// The listener's first event: a CONNECT_REQUEST whose private data begins with
// `marker`; its id is rejected and destroyed.
void expect_first_request(Listener& listener, uint8_t marker) {
  ASSERT_TRUE(listener.has_event(30000)) << "no event";
  rdma_cm_event* event = nullptr;
  ASSERT_EQ(rdma_get_cm_event(listener.channel, &event), 0);
  const rdma_cm_event_type type = event->event;
  rdma_cm_id* child = event->id;
  // param.conn and param.ud both begin with the private data.
  const auto* data = static_cast<const uint8_t*>(event->param.conn.private_data);
  const bool first_byte_is_marker = data != nullptr && data[0] == marker;
  rdma_ack_cm_event(event);
  ASSERT_EQ(type, RDMA_CM_EVENT_CONNECT_REQUEST) << rdma_event_str(type);
  rdma_reject(child, nullptr, 0);
  rdma_destroy_id(child);
  ASSERT_TRUE(first_byte_is_marker) << "the refused request reached the application";
}

constexpr uint8_t kRefused = 0xAA;
constexpr uint8_t kTaken = 0x55;

// An RC listener gets a SIDR_REQ for its service ID: SIDR_REP "rejected", no id,
// no event; an RC REQ after it is the listener's first request.
TEST(PortSpace, SidrReqToAnRcListenerIsRejectedAndNeverARequest) {
  ForeignHost host;
  ASSERT_GE(host.fd, 0) << "no free 127.0.9.x:4791";
  Listener listener(RDMA_PS_TCP);
  const uint64_t service = w::ip_service_id({w::IpProtocol::kTcp, listener.port});
  const w::CmSidrReq sidr = sidr_req(host, service, kRefused);
  send(host, sidr, listener.gid, 0);
  send(host, rc_req(host, service, kTaken), listener.gid, 1);

  ASSERT_NO_FATAL_FAILURE(expect_first_request(listener, kTaken));
  auto rep = receive<w::CmSidrRep>(host);
  ASSERT_TRUE(rep.has_value()) << "no SIDR_REP";
  EXPECT_EQ(rep->transaction_id, sidr.transaction_id);
  EXPECT_EQ(rep->request_id, sidr.request_id);
  EXPECT_EQ(rep->status, w::SidrStatus::kRejected);
  EXPECT_EQ(rep->qpn, 0u);
}

// A UD listener gets a REQ for its service ID: REJ "consumer defined" to that
// REQ, no id, no event; a SIDR_REQ after it is the listener's first request.
TEST(PortSpace, ReqToAUdListenerIsRejectedAndNeverARequest) {
  ForeignHost host;
  ASSERT_GE(host.fd, 0) << "no free 127.0.9.x:4791";
  Listener listener(RDMA_PS_UDP);
  const uint64_t service = w::ip_service_id({w::IpProtocol::kUdp, listener.port});
  const w::CmReq req = rc_req(host, service, kRefused);
  send(host, req, listener.gid, 0);
  send(host, sidr_req(host, service, kTaken), listener.gid, 1);

  ASSERT_NO_FATAL_FAILURE(expect_first_request(listener, kTaken));
  auto rej = receive<w::CmRej>(host);
  ASSERT_TRUE(rej.has_value()) << "no REJ";
  EXPECT_EQ(rej->transaction_id, req.transaction_id);
  EXPECT_EQ(rej->remote_comm_id, req.local_comm_id);
  EXPECT_EQ(rej->message_rejected, w::CmMsgKind::kReq);
  EXPECT_EQ(rej->reason, w::RejReason::kConsumerReject);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
