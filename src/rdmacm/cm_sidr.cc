// UD "connections" through rdma_cm: Service ID Resolution (IBA 12.11). An
// RDMA_PS_UDP / RDMA_PS_IPOIB id's rdma_connect sends a SIDR_REQ to QP1 of the
// destination; the listener's side delivers CONNECT_REQUEST on a new id, and
// rdma_accept answers with a SIDR_REP carrying its QP number and Q_Key
// (rdma_reject: status "rejected"; no listener: "service ID not supported").
// The active side gets ESTABLISHED with the address of the peer's QP in
// param.ud, or UNREACHABLE with the SIDR status, as the kernel's cma reports it.
#include <cstring>
#include <memory>

#include "rdmacm/agent.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_format.h"

namespace softrdma::rdmacm {

namespace {

// IBA 12.11 Table 120 (SIDR_REP status), as the codec names them.
constexpr uint8_t kSidrSuccess = uint8_t(wire::SidrStatus::kSuccess);
constexpr uint8_t kSidrNotSupported = uint8_t(wire::SidrStatus::kServiceIdNotSupported);
constexpr uint8_t kSidrRejected = uint8_t(wire::SidrStatus::kRejected);

// The address handle attributes of the peer an id's route leads to.
ibv_ah_attr peer_address(const CmId& id) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.grh.dgid = id.conn.remote_gid;
  ah.grh.sgid_index = uint8_t(id.sgid_index);
  ah.grh.hop_limit = 64;
  ah.port_num = id.ibv.port_num != 0 ? id.ibv.port_num : 1;
  return ah;
}

}  // namespace

void deliver_ud(CmId& id, rdma_cm_event_type type, int status, const Incoming* mad) {
  Event* event = new_event(id, type, status);
  rdma_ud_param& ud = event->ibv.param.ud;
  if (mad != nullptr) {
    std::memcpy(event->private_data, mad->private_data.data(), mad->private_data_length);
    ud.private_data = event->private_data;
    ud.private_data_len = mad->private_data_length;
    if (type == RDMA_CM_EVENT_ESTABLISHED) {
      ud.ah_attr = peer_address(id);
      ud.qp_num = mad->qpn;
      ud.qkey = mad->qkey;
    }
  }
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST && id.listener != nullptr)
    event->ibv.listen_id = &id.listener->ibv;
  post(id, event);
}

int Agent::connect_ud(CmId& id, const rdma_conn_param& param) {
  if (int err = open_mad_port()) return err;
  Connection& c = id.conn;
  add_connection(id);
  c.remote_gid = id.ibv.route.addr.addr.ibaddr.dgid;
  c.sgid_index = id.sgid_index;
  c.transaction_id = (uint64_t(c.local_comm_id) << 32) | random_psn();
  Mad req = format_sidr_req(id, param.private_data, param.private_data_len);
  id.state = IdState::kConnecting;
  c.state = CmState::kReqSent;
  return send(id, req, true);
}

int Agent::answer_ud(CmId& id, bool accept, const rdma_conn_param* param) {
  Connection& c = id.conn;
  if (c.state != CmState::kReqReceived) return EINVAL;
  const void* data = param != nullptr ? param->private_data : nullptr;
  const uint8_t length = param != nullptr ? param->private_data_len : 0;
  uint32_t qpn = id.ibv.qp != nullptr ? id.ibv.qp->qp_num : 0;
  if (param != nullptr && id.ibv.qp == nullptr) qpn = param->qp_num;
  Mad rep = accept ? format_sidr_rep(c, kSidrSuccess, qpn, RDMA_UDP_QKEY, data, length)
                   : format_sidr_rep(c, kSidrRejected, 0, 0, data, length);
  request_answered(id);
  c.state = CmState::kClosed;  // nothing more: the id stays to answer a repeated request
  return send(id, rep, false);
}

void Agent::on_sidr_req(const ibv_gid& source, const Incoming& req) {
  auto known = by_remote_.find({source, req.sender_comm_id});
  if (known != by_remote_.end()) {
    Connection& c = known->second->conn;
    if (c.state == CmState::kClosed) mad_port_->send(c.remote_gid, c.sgid_index, c.last_sent);
    return;  // still deciding: the requester resends
  }
  auto listener = listeners_.find(req.service_id);
  Connection reply;
  reply.remote_comm_id = req.sender_comm_id;
  reply.transaction_id = req.transaction_id;
  if (listener == listeners_.end() || listener->second->state != IdState::kListening) {
    Mad rep = format_sidr_rep(reply, kSidrNotSupported, 0, 0, nullptr, 0);
    mad_port_->send(source, 0, rep);
    return;
  }
  CmId& listening = *listener->second;
  if (listening.ibv.qp_type != IBV_QPT_UD) {
    // A SIDR_REQ asks for a UD QP (IBA 12.11.1): only a UD id (RDMA_PS_UDP,
    // RDMA_PS_IPOIB) takes one. The kernel's rdma_cm refuses it for any other
    // (cma.c, cma_ib_check_req_qp_type), and its ib_cm then answers the
    // SIDR_REQ it holds with status 2, "rejected by the service provider" (IBA
    // 12.11.2 Table 120; cm.c cm_destroy_id in SIDR_REQ_RCVD: IB_SIDR_REJECT),
    // not 1 (no such service ID: one exists, for connections). No id, no event.
    Mad rep = format_sidr_rep(reply, kSidrRejected, 0, 0, nullptr, 0);
    mad_port_->send(source, 0, rep);
    return;
  }
  if (listening.pending_requests >= listening.backlog) return;  // the requester resends
  if (CmId* id = admit(listening, source, req))
    deliver_ud(*id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &req);
}

void Agent::on_sidr_rep(CmId& id, const Incoming& rep) {
  Connection& c = id.conn;
  if (c.state != CmState::kReqSent) return;
  c.awaiting_answer = false;
  if (rep.sidr_status != kSidrSuccess) {
    c.state = CmState::kClosed;
    return deliver_ud(id, RDMA_CM_EVENT_UNREACHABLE, rep.sidr_status, &rep);
  }
  c.state = CmState::kEstablished;
  c.negotiated.remote_qpn = rep.qpn;
  deliver_ud(id, RDMA_CM_EVENT_ESTABLISHED, 0, &rep);
}

}  // namespace softrdma::rdmacm
