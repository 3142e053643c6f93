// The CM MADs of rdma_cm connections, between the connection state machine
// (cm_protocol.cc) and the wire codec (wire/cm_mad.h): what the machine reads
// from a received MAD, and the MADs it sends, filled as RoCEv2 peers (the
// kernel's rdma_cm over Soft-RoCE) fill them.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <memory>
#include <cstdint>
#include <optional>
#include <span>

#include "rdmacm/address.h"
#include "rdmacm/connection.h"
#include "wire/cm_mad.h"

namespace softrdma::rdmacm {

struct CmId;

// IBA 12.6.3: the CM's attribute IDs, as the wire codec names them.
using CmAttribute = wire::CmAttr;

// IBA 12.6 Table 112: the REJ reasons softrdma sends (an rdma_cm REJECTED
// event's status is the reason).
inline constexpr uint16_t kRejNoQp = uint16_t(wire::RejReason::kNoQp);
inline constexpr uint16_t kRejNoResources = uint16_t(wire::RejReason::kNoResources);
inline constexpr uint16_t kRejTimeout = uint16_t(wire::RejReason::kTimeout);
inline constexpr uint16_t kRejInvalidServiceId = uint16_t(wire::RejReason::kInvalidServiceId);
inline constexpr uint16_t kRejConsumer = uint16_t(wire::RejReason::kConsumerReject);
inline constexpr uint16_t kRejInvalidMtu = uint16_t(wire::RejReason::kInvalidMtu);

// RDMA_PS_* port space and port in an IP-based service ID (IBA A11.2.1).
uint64_t service_id_of(rdma_port_space ps, uint16_t port);

// What the state machine needs of a received CM MAD.
struct Incoming {
  CmAttribute attribute{};
  uint64_t transaction_id = 0;
  uint32_t sender_comm_id = 0;    // the sender's Local Communication ID
  uint32_t receiver_comm_id = 0;  // its Remote Communication ID (ours), 0 in a REQ
  // REQ / REP
  uint64_t service_id = 0;
  uint32_t qpn = 0;
  uint32_t starting_psn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t local_ack_timeout = 19;
  ibv_mtu path_mtu = IBV_MTU_1024;
  bool path_mtu_valid = true;  // a REQ's MTU is one of IBA's codes
  bool srq = false;
  // REQ: the QP type its Transport Service Type names (IBA 12.6.5: RC, UC, or
  // XRC as the extended type); IBV_QPT_DRIVER for RD and codes unknown.
  ibv_qp_type qp_type = IBV_QPT_RC;
  ibv_ece ece{};  // REQ / REP: vendor ID and options (IBA Comment 9434)
  // REQ: rdma_cm's IP CM header (IBA A11.6): who connects, to which address.
  std::optional<IpEndpoint> ip_source;
  std::optional<IpEndpoint> ip_destination;
  // REJ
  uint16_t reject_reason = 0;
  // SIDR_REP (IBA 12.11): its status and the service's Q_Key (qpn above)
  uint8_t sidr_status = 0;
  uint32_t qkey = 0;
  // MRA: the message it stands for and how long the sender asks us to wait.
  uint8_t mra_message = 0;
  uint8_t mra_service_timeout = 0;
  // The consumer's private data (after the IP CM header in a REQ).
  std::array<uint8_t, 224> private_data{};
  uint8_t private_data_length = 0;
};

// Reads a CM MAD; nothing for anything else (another class, a bad size).
std::optional<Incoming> parse_cm_mad(std::span<const uint8_t> mad);

using Mad = std::array<uint8_t, 256>;

// The active side's REQ for `id` (its route, its QP or conn_param's QP number),
// with rdma_cm's IP CM header leading the private data.
Mad format_req(const CmId& id, const rdma_conn_param& param, uint32_t qpn);
Mad format_rep(const CmId& id, const rdma_conn_param& param, uint32_t qpn);
Mad format_rtu(const CmId& id);
Mad format_rej(const Connection& connection, uint16_t reason, const void* private_data,
               uint8_t length);
// A REJ to a REQ that matched no listener (nothing of ours to name).
Mad format_rej_to(const Incoming& req, uint16_t reason);
Mad format_mra(const Connection& connection, uint8_t message);
Mad format_dreq(const CmId& id);
// SIDR (IBA 12.11): the request of a UD id (request ID = its local comm ID,
// the IP CM header then the consumer's private data), and the answer.
Mad format_sidr_req(const CmId& id, const void* private_data, uint8_t length);
Mad format_sidr_rep(const Connection& connection, uint8_t status, uint32_t qpn, uint32_t qkey,
                    const void* private_data, uint8_t length);
Mad format_drep(const Connection& connection);

// cm_receive.cc: queues an rdma_cm event for id; a MAD's private data and
// connection parameters go with it (rdma_cm_event.param.conn).
void deliver(CmId& id, rdma_cm_event_type type, int status, const Incoming* mad = nullptr);
// cm_sidr.cc: the same for a UD id (param.ud; ESTABLISHED carries the peer's
// address, QP number and Q_Key).
void deliver_ud(CmId& id, rdma_cm_event_type type, int status, const Incoming* mad = nullptr);
// cm_receive.cc: the new id a request to `listener` makes (rdma_cm(7)), on its
// channel, addressed from the request's IP CM header and the GID it came from.
std::unique_ptr<CmId> passive_id(CmId& listener, const ibv_gid& source, const Incoming& req);

// The CM response timeout softrdma advertises (IBA 12.7.22: 4.096 µs × 2^n):
// 2^17 × 4.096 µs ≈ 0.54 s, and the retries it allows (IBA 12.7.27).
inline constexpr uint8_t kCmResponseTimeout = 17;
inline constexpr uint8_t kMaxCmRetries = 15;

}  // namespace softrdma::rdmacm
