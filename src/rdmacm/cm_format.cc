#include "rdmacm/cm_format.h"

#include <cstring>

#include "rdmacm/cm.h"
#include "wire/cm_ip.h"
#include "wire/cm_mad.h"

namespace softrdma::rdmacm {

namespace {

namespace w = softrdma::wire;

constexpr size_t kIpCmHeaderBytes = w::kIpCmHeaderBytes;

w::Gid to_wire(const ibv_gid& gid) {
  w::Gid out;
  std::memcpy(out.data(), gid.raw, 16);
  return out;
}

w::IpCmAddress ip_cm_address(const IpEndpoint& e) {
  ibv_gid gid = e.as_gid();  // IPv4 in the last 4 bytes, as A11 has it
  w::IpCmAddress out{};
  if (e.family() == AF_INET)
    std::memcpy(out.data() + 12, gid.raw + 12, 4);
  else
    std::memcpy(out.data(), gid.raw, 16);
  return out;
}

std::optional<IpEndpoint> endpoint_of(const w::IpCmAddress& a, int ip_version, uint16_t port) {
  sockaddr_storage s{};
  if (ip_version == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, a.data() + 12, 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&s);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    std::memcpy(&in6->sin6_addr, a.data(), 16);
  }
  return IpEndpoint::from(reinterpret_cast<sockaddr*>(&s));
}

// rdma_cm's IP CM header (IBA A11.6) leads a REQ's private data: who connects,
// from which port, to which address.
void write_ip_cm_header(const CmId& id, std::span<uint8_t> private_data) {
  auto source = IpEndpoint::from(&id.ibv.route.addr.src_addr);
  auto destination = IpEndpoint::from(&id.ibv.route.addr.dst_addr);
  w::IpCmHeader h;
  h.ip_version = source && source->family() == AF_INET6 ? 6 : 4;
  if (source) {
    h.src_port = source->port();
    h.src_ip = ip_cm_address(*source);
  }
  if (destination) h.dst_ip = ip_cm_address(*destination);
  w::encode_ip_cm_header(h, private_data);
}

void read_ip_cm_header(std::span<const uint8_t> private_data, uint16_t destination_port,
                       Incoming& out) {
  w::IpCmHeader h;
  if (w::decode_ip_cm_header(private_data, h) != w::IpCmError::kNone) return;
  out.ip_source = endpoint_of(h.src_ip, h.ip_version, h.src_port);
  out.ip_destination = endpoint_of(h.dst_ip, h.ip_version, destination_port);
}

template <size_t N>
void copy_private(const std::array<uint8_t, N>& from, size_t skip, Incoming& out) {
  const size_t n = std::min(N - skip, out.private_data.size());
  std::memcpy(out.private_data.data(), from.data() + skip, n);
  out.private_data_length = uint8_t(n);
}

template <size_t N>
void set_private(std::array<uint8_t, N>& to, size_t skip, const void* data, size_t length) {
  if (data != nullptr) std::memcpy(to.data() + skip, data, std::min(length, N - skip));
}

// The same codes (1=256 .. 5=4096); anything else a peer sends is no MTU.
std::optional<ibv_mtu> to_verbs(w::CmMtu m) {
  const uint8_t code = uint8_t(m);
  if (code < IBV_MTU_256 || code > IBV_MTU_4096) return std::nullopt;
  return ibv_mtu(code);
}
w::CmMtu to_wire(ibv_mtu m) { return w::CmMtu(uint8_t(m)); }

// A CA GUID for this port: the EUI-64 rdma-core's peers derive from a MAC, here
// from the GID's last 8 bytes (any stable 64-bit value serves, IBA 12.7.4).
uint64_t ca_guid(const ibv_gid& gid) {
  uint64_t guid = 0;
  for (int i = 8; i < 16; ++i) guid = guid << 8 | gid.raw[i];
  return guid;
}

Mad encoded(const auto& message) {
  Mad mad{};
  w::encode(message, std::span<uint8_t, w::kMadBytes>(mad));
  return mad;
}

// IBA 12.6.5, the REQ's Transport Service Type: 0 RC, 1 UC, 2 RD, 3 "see Extended
// Transport Type" (1: XRC); as the kernel's cm_req_get_qp_type reads it.
ibv_qp_type req_qp_type(const w::CmReq& m) {
  switch (m.transport_service_type) {
    case 0: return IBV_QPT_RC;
    case 1: return IBV_QPT_UC;
    case 3: return m.extended_transport_type == 1 ? IBV_QPT_XRC_RECV : IBV_QPT_DRIVER;
    default: return IBV_QPT_DRIVER;
  }
}

void read_req(const w::CmReq& m, Incoming& out) {
  out.sender_comm_id = m.local_comm_id;
  out.service_id = m.service_id;
  out.qpn = m.local_qpn;
  out.starting_psn = m.starting_psn;
  out.responder_resources = m.responder_resources;
  out.initiator_depth = m.initiator_depth;
  out.retry_count = m.retry_count;
  out.rnr_retry_count = m.rnr_retry_count;
  out.local_ack_timeout = m.primary.local_ack_timeout;
  const std::optional<ibv_mtu> mtu = to_verbs(m.path_mtu);
  out.path_mtu_valid = mtu.has_value();
  out.path_mtu = mtu.value_or(IBV_MTU_256);
  out.srq = m.srq;
  out.qp_type = req_qp_type(m);
  out.ece = {m.vendor_id, m.attribute_modifier, 0};
  read_ip_cm_header(m.private_data, uint16_t(m.service_id & 0xffff), out);
  copy_private(m.private_data, kIpCmHeaderBytes, out);
}

void read_rep(const w::CmRep& m, Incoming& out) {
  out.sender_comm_id = m.local_comm_id;
  out.receiver_comm_id = m.remote_comm_id;
  out.qpn = m.local_qpn;
  out.starting_psn = m.starting_psn;
  out.responder_resources = m.responder_resources;
  out.initiator_depth = m.initiator_depth;
  out.rnr_retry_count = m.rnr_retry_count;
  out.srq = m.srq;
  out.ece = {m.vendor_id, m.attribute_modifier, 0};
  copy_private(m.private_data, 0, out);
}

}  // namespace

uint64_t service_id_of(rdma_port_space ps, uint16_t port) {
  return w::ip_service_id({w::IpProtocol(uint8_t(ps & 0xff)), port});  // IBA A11.2.1
}

std::optional<Incoming> parse_cm_mad(std::span<const uint8_t> mad) {
  w::CmMessage message;
  if (w::decode_cm(mad, message) != w::MadError::kNone) return std::nullopt;
  Incoming out;
  std::visit([&](const auto& m) { out.transaction_id = m.transaction_id; }, message);
  if (auto* m = std::get_if<w::CmReq>(&message)) {
    out.attribute = CmAttribute::kReq;
    read_req(*m, out);
  } else if (auto* m = std::get_if<w::CmRep>(&message)) {
    out.attribute = CmAttribute::kRep;
    read_rep(*m, out);
  } else if (auto* m = std::get_if<w::CmRtu>(&message)) {
    out.attribute = CmAttribute::kRtu;
    out.sender_comm_id = m->local_comm_id;
    out.receiver_comm_id = m->remote_comm_id;
    copy_private(m->private_data, 0, out);
  } else if (auto* m = std::get_if<w::CmRej>(&message)) {
    out.attribute = CmAttribute::kRej;
    out.sender_comm_id = m->local_comm_id;
    out.receiver_comm_id = m->remote_comm_id;
    out.reject_reason = uint16_t(m->reason);
    copy_private(m->private_data, 0, out);
  } else if (auto* m = std::get_if<w::CmMra>(&message)) {
    out.attribute = CmAttribute::kMra;
    out.sender_comm_id = m->local_comm_id;
    out.receiver_comm_id = m->remote_comm_id;
    out.mra_message = uint8_t(m->message_mraed);
    out.mra_service_timeout = m->service_timeout;
  } else if (auto* m = std::get_if<w::CmDreq>(&message)) {
    out.attribute = CmAttribute::kDreq;
    out.sender_comm_id = m->local_comm_id;
    out.receiver_comm_id = m->remote_comm_id;
    copy_private(m->private_data, 0, out);
  } else if (auto* m = std::get_if<w::CmDrep>(&message)) {
    out.attribute = CmAttribute::kDrep;
    out.sender_comm_id = m->local_comm_id;
    out.receiver_comm_id = m->remote_comm_id;
    copy_private(m->private_data, 0, out);
  } else if (auto* m = std::get_if<w::CmSidrReq>(&message)) {
    out.attribute = CmAttribute::kSidrReq;
    out.sender_comm_id = m->request_id;
    out.service_id = m->service_id;
    read_ip_cm_header(m->private_data, uint16_t(m->service_id & 0xffff), out);
    copy_private(m->private_data, kIpCmHeaderBytes, out);
  } else if (auto* m = std::get_if<w::CmSidrRep>(&message)) {
    out.attribute = CmAttribute::kSidrRep;
    out.receiver_comm_id = m->request_id;
    out.sidr_status = uint8_t(m->status);
    out.qpn = m->qpn;
    out.qkey = m->qkey;
    copy_private(m->private_data, 0, out);
  } else {
    return std::nullopt;
  }
  return out;
}

// As the kernel's rdma_cm fills a REQ over RoCE (tests/data/rdma_cm.pcap): LIDs
// 0xffff, the GIDs of the route, hop limit 64, the ACK timeout of the
// negotiation, the CM timeouts and retries softrdma uses.
Mad format_req(const CmId& id, const rdma_conn_param& param, uint32_t qpn) {
  const Connection& c = id.conn;
  w::CmReq m;
  m.transaction_id = c.transaction_id;
  m.attribute_modifier = id.local_ece.options;
  m.vendor_id = id.local_ece.vendor_id;
  m.local_comm_id = c.local_comm_id;
  m.service_id = service_id_of(id.ibv.ps, ntohs(id.ibv.route.addr.dst_sin.sin_port));
  m.local_ca_guid = ca_guid(id.ibv.route.addr.addr.ibaddr.sgid);
  m.local_qpn = qpn;
  m.responder_resources = c.negotiated.responder_resources;
  m.initiator_depth = c.negotiated.initiator_depth;
  m.remote_cm_response_timeout = kCmResponseTimeout;
  m.transport_service_type = id.ibv.qp_type == IBV_QPT_UC ? 1 : 0;
  m.starting_psn = c.negotiated.receive_psn;
  m.local_cm_response_timeout = kCmResponseTimeout;
  m.retry_count = c.negotiated.retry_count;
  m.pkey = 0xffff;
  m.path_mtu = to_wire(c.negotiated.path_mtu);
  m.rnr_retry_count = c.negotiated.rnr_retry_count;
  m.max_cm_retries = kMaxCmRetries;
  m.srq = c.negotiated.srq;
  m.primary.local_lid = m.primary.remote_lid = 0xffff;
  m.primary.local_gid = to_wire(id.ibv.route.addr.addr.ibaddr.sgid);
  m.primary.remote_gid = to_wire(c.remote_gid);
  m.primary.hop_limit = 64;
  m.primary.local_ack_timeout = c.negotiated.local_ack_timeout;
  write_ip_cm_header(id, m.private_data);
  set_private(m.private_data, kIpCmHeaderBytes, param.private_data,
              std::min<size_t>(param.private_data_len, w::kIpCmReqConsumerBytes));
  return encoded(m);
}

Mad format_rep(const CmId& id, const rdma_conn_param& param, uint32_t qpn) {
  const Connection& c = id.conn;
  w::CmRep m;
  m.transaction_id = c.transaction_id;
  m.attribute_modifier = id.local_ece.options;
  m.vendor_id = id.local_ece.vendor_id;
  m.local_comm_id = c.local_comm_id;
  m.remote_comm_id = c.remote_comm_id;
  m.local_qpn = qpn;
  m.starting_psn = c.negotiated.receive_psn;
  m.responder_resources = c.negotiated.responder_resources;
  m.initiator_depth = c.negotiated.initiator_depth;
  m.target_ack_delay = 15;
  m.rnr_retry_count = c.negotiated.rnr_retry_count;
  m.srq = id.ibv.srq != nullptr;
  m.local_ca_guid = ca_guid(id.ibv.route.addr.addr.ibaddr.sgid);
  set_private(m.private_data, 0, param.private_data, param.private_data_len);
  return encoded(m);
}

Mad format_rtu(const CmId& id) {
  w::CmRtu m;
  m.transaction_id = id.conn.transaction_id;
  m.local_comm_id = id.conn.local_comm_id;
  m.remote_comm_id = id.conn.remote_comm_id;
  return encoded(m);
}

Mad format_rej(const Connection& c, uint16_t reason, const void* private_data, uint8_t length) {
  w::CmRej m;
  m.transaction_id = c.transaction_id;
  m.local_comm_id = c.local_comm_id;
  m.remote_comm_id = c.remote_comm_id;
  m.message_rejected = c.state == CmState::kRepSent ? w::CmMsgKind::kRep : w::CmMsgKind::kReq;
  m.reason = w::RejReason(reason);
  set_private(m.private_data, 0, private_data, length);
  return encoded(m);
}

Mad format_rej_to(const Incoming& req, uint16_t reason) {
  w::CmRej m;
  m.transaction_id = req.transaction_id;
  m.remote_comm_id = req.sender_comm_id;
  m.message_rejected = w::CmMsgKind::kReq;
  m.reason = w::RejReason(reason);
  return encoded(m);
}

Mad format_mra(const Connection& c, uint8_t message) {
  w::CmMra m;
  m.transaction_id = c.transaction_id;
  m.local_comm_id = c.local_comm_id;
  m.remote_comm_id = c.remote_comm_id;
  m.message_mraed = w::CmMsgKind(message);
  m.service_timeout = kCmResponseTimeout + 3;  // ~4 s for the application to answer
  return encoded(m);
}

Mad format_dreq(const CmId& id) {
  w::CmDreq m;
  m.transaction_id = id.conn.transaction_id;
  m.local_comm_id = id.conn.local_comm_id;
  m.remote_comm_id = id.conn.remote_comm_id;
  m.remote_qpn_eecn = id.conn.negotiated.remote_qpn;
  return encoded(m);
}

Mad format_sidr_req(const CmId& id, const void* private_data, uint8_t length) {
  w::CmSidrReq m;
  m.transaction_id = id.conn.transaction_id;
  m.request_id = id.conn.local_comm_id;
  m.pkey = 0xffff;
  m.service_id = service_id_of(id.ibv.ps, ntohs(id.ibv.route.addr.dst_sin.sin_port));
  write_ip_cm_header(id, m.private_data);
  set_private(m.private_data, kIpCmHeaderBytes, private_data,
              std::min<size_t>(length, w::kIpCmSidrReqConsumerBytes));
  return encoded(m);
}

Mad format_sidr_rep(const Connection& c, uint8_t status, uint32_t qpn, uint32_t qkey,
                    const void* private_data, uint8_t length) {
  w::CmSidrRep m;
  m.transaction_id = c.transaction_id;
  m.request_id = c.remote_comm_id;
  m.status = w::SidrStatus(status);
  m.qpn = qpn;
  m.qkey = qkey;
  set_private(m.private_data, 0, private_data, length);
  return encoded(m);
}

Mad format_drep(const Connection& c) {
  w::CmDrep m;
  m.transaction_id = c.transaction_id;
  m.local_comm_id = c.local_comm_id;
  m.remote_comm_id = c.remote_comm_id;
  return encoded(m);
}

}  // namespace softrdma::rdmacm
