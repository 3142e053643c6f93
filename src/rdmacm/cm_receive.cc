// CM MADs arriving on QP1 (IBA 12.6, 12.9): each finds its connection and moves
// it on, answers a repeated message with what was sent before (IBA 12.9.8:
// duplicates are answered, never acted on twice), and becomes an rdma_cm event.
#include <cstring>
#include <memory>

#include "rdmacm/address.h"
#include "rdmacm/agent.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_format.h"

namespace softrdma::rdmacm {

void deliver(CmId& id, rdma_cm_event_type type, int status, const Incoming* mad) {
  Event* event = new_event(id, type, status);
  if (mad != nullptr) {
    std::memcpy(event->private_data, mad->private_data.data(), mad->private_data_length);
    event->ibv.param.conn.private_data = event->private_data;
    event->ibv.param.conn.private_data_len = mad->private_data_length;
    event->ibv.param.conn.responder_resources = mad->initiator_depth;
    event->ibv.param.conn.initiator_depth = mad->responder_resources;
    event->ibv.param.conn.retry_count = mad->retry_count;
    event->ibv.param.conn.rnr_retry_count = mad->rnr_retry_count;
    event->ibv.param.conn.srq = mad->srq;
    event->ibv.param.conn.qp_num = mad->qpn;
  }
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST && id.listener != nullptr)
    event->ibv.listen_id = &id.listener->ibv;
  post(id, event);
}

// The passive id a REQ makes (rdma_cm(7): "a new rdma_cm_id is created" for each
// connection request), on its listener's channel, addressed from the REQ's IP CM
// header and the GID it came from.
std::unique_ptr<CmId> passive_id(CmId& listener, const ibv_gid& source, const Incoming& req) {
  auto id = new_passive_id(listener);
  if (!id) return nullptr;
  rdma_addr& addr = id->ibv.route.addr;
  std::memcpy(&addr.src_storage, &listener.ibv.route.addr.src_storage, sizeof addr.src_storage);
  if (req.ip_destination) {
    IpEndpoint local = *req.ip_destination;
    local.set_port(ntohs(rdma_get_src_port(&listener.ibv)));
    std::memcpy(&addr.src_storage, &local.storage, local.length());
  }
  if (req.ip_source) std::memcpy(&addr.dst_storage, &req.ip_source->storage, req.ip_source->length());
  sockaddr_in6 from{};
  from.sin6_family = AF_INET6;
  std::memcpy(&from.sin6_addr, source.raw, 16);
  auto mine = local_gid_for(id->ibv.verbs, *IpEndpoint::from(reinterpret_cast<sockaddr*>(&from)));
  if (!mine) return nullptr;
  addr.addr.ibaddr.sgid = mine->first;
  addr.addr.ibaddr.dgid = source;
  addr.addr.ibaddr.pkey = htons(0xffff);
  id->sgid_index = mine->second;
  if (fill_route(*id) != 0) return nullptr;
  id->state = IdState::kConnecting;
  return id;
}

void Agent::on_mad(const ibv_gid& source, std::span<const uint8_t> bytes) {
  std::optional<Incoming> mad = parse_cm_mad(bytes);
  if (!mad) return;
  if (mad->attribute == CmAttribute::kReq) return on_req(source, *mad);
  if (mad->attribute == CmAttribute::kSidrReq) return on_sidr_req(source, *mad);
  auto it = connections_.find(mad->receiver_comm_id);
  if (it == connections_.end()) {
    // A DREQ for a connection already gone is answered, so the peer stops
    // asking (IBA 12.9.6: DREQ in any state but Established gets a DREP).
    if (mad->attribute == CmAttribute::kDreq) {
      Connection gone;
      gone.local_comm_id = mad->receiver_comm_id;
      gone.remote_comm_id = mad->sender_comm_id;
      gone.transaction_id = mad->transaction_id;
      Mad drep = format_drep(gone);
      mad_port_->send(source, 0, drep);
    }
    return;
  }
  CmId& id = *it->second;
  Connection& c = id.conn;
  // After the REP, the peer's ID is known and must match (IBA 12.6.4).
  if (mad->attribute != CmAttribute::kRep && mad->attribute != CmAttribute::kRej &&
      c.remote_comm_id != 0 && mad->sender_comm_id != c.remote_comm_id)
    return;
  switch (mad->attribute) {
    case CmAttribute::kMra: return on_mra(id, *mad);
    case CmAttribute::kSidrRep: return on_sidr_rep(id, *mad);
    case CmAttribute::kRep: return on_rep(id, *mad);
    case CmAttribute::kRtu:
      if (c.state != CmState::kRepSent) return;
      c.awaiting_answer = false;
      c.state = CmState::kEstablished;
      watch_peer(id);
      return deliver(id, RDMA_CM_EVENT_ESTABLISHED, 0);
    case CmAttribute::kRej: return on_rej(id, *mad);
    case CmAttribute::kDreq: return on_dreq(id, *mad);
    case CmAttribute::kDrep:
      if (c.state == CmState::kClosed) c.awaiting_answer = false;  // a lost one's DREQ
      if (c.state != CmState::kDreqSent) return;
      c.awaiting_answer = false;
      c.state = CmState::kClosed;
      return deliver(id, RDMA_CM_EVENT_DISCONNECTED, 0);
    default: return;
  }
}

void Agent::on_req(const ibv_gid& source, const Incoming& req) {
  auto known = by_remote_.find({source, req.sender_comm_id});
  if (known != by_remote_.end()) {
    // A repeated REQ: the application is still deciding (ask for patience,
    // IBA 12.6.6) or the REP went out and may have been lost (send it again).
    Connection& c = known->second->conn;
    if (c.state == CmState::kReqReceived) {
      Mad mra = format_mra(c, 0);
      mad_port_->send(c.remote_gid, c.sgid_index, mra);
    } else if (c.state == CmState::kRepSent) {
      mad_port_->send(c.remote_gid, c.sgid_index, c.last_sent);
    }
    return;
  }
  auto listener = listeners_.find(req.service_id);
  if (listener == listeners_.end() || listener->second->state != IdState::kListening) {
    Mad rej = format_rej_to(req, kRejInvalidServiceId);
    mad_port_->send(source, 0, rej);
    return;
  }
  CmId& listening = *listener->second;
  if (req.qp_type != listening.ibv.qp_type) {
    // The kernel's rdma_cm takes a REQ only for an id of the QP type the REQ
    // names (cma.c, cma_ib_check_req_qp_type): a REQ to a UD listener
    // (RDMA_PS_UDP, RDMA_PS_IPOIB), or a UC one to an RC listener, is refused
    // before the application hears of it. Its ib_cm then answers the REQ it
    // holds with a REJ "consumer defined" (28, IBA 12.6.7 Table 112; cm.c
    // cm_destroy_id in REQ_RCVD), with no private data: the same REJ here.
    Mad rej = format_rej_to(req, kRejConsumer);
    mad_port_->send(source, 0, rej);
    return;
  }
  if (!req.path_mtu_valid || listening.pending_requests >= listening.backlog) {
    Mad rej = format_rej_to(req, req.path_mtu_valid ? kRejNoResources : kRejInvalidMtu);
    mad_port_->send(source, 0, rej);
    return;
  }
  CmId* id = admit(listening, source, req);
  if (id == nullptr) return;  // no GID to answer from: the peer's REQ times out
  Connection& c = id->conn;
  c.negotiated.remote_qpn = req.qpn;
  c.negotiated.send_psn = req.starting_psn;
  c.negotiated.retry_count = req.retry_count;
  c.negotiated.rnr_retry_count = req.rnr_retry_count;
  c.negotiated.local_ack_timeout = req.local_ack_timeout;
  c.negotiated.path_mtu = std::min(req.path_mtu, ibv_mtu(id->path.mtu));
  c.negotiated.srq = req.srq;
  // Known before rdma_accept: a program that moves its own QP (rdma_init_qp_attr)
  // does so before accepting, and the REP must then carry the PSN the QP has.
  c.negotiated.receive_psn = random_psn();
  c.negotiated.responder_resources = req.initiator_depth;
  c.negotiated.initiator_depth = req.responder_resources;
  id->remote_ece = req.ece;
  deliver(*id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &req);
}

// A request (REQ or SIDR_REQ) a listener takes: its new id, in "request
// received", known by the requester's GID and communication ID so that a
// repeat finds it, and counted against the listener's backlog.
CmId* Agent::admit(CmId& listening, const ibv_gid& source, const Incoming& req) {
  std::unique_ptr<CmId> id = passive_id(listening, source, req);
  if (id == nullptr) return nullptr;
  Connection& c = id->conn;
  add_connection(*id);
  c.state = CmState::kReqReceived;
  c.remote_comm_id = req.sender_comm_id;
  c.transaction_id = req.transaction_id;
  c.remote_gid = source;
  c.sgid_index = id->sgid_index;
  id->listened_service = listening.service_id;
  by_remote_[{source, req.sender_comm_id}] = id.get();
  ++listening.pending_requests;
  return id.release();  // the application's from now on (rdma_destroy_id)
}

void Agent::on_mra(CmId& id, const Incoming& mra) {
  Connection& c = id.conn;
  if (!c.awaiting_answer) return;
  // The peer got our message and needs longer (IBA 12.6.6): wait its service
  // timeout before the next retry, with the retries counted afresh.
  c.timeout = std::max(c.timeout, cm_timeout(mra.mra_service_timeout));
  c.deadline = std::chrono::steady_clock::now() + c.timeout;
  c.retries_left = kMaxCmRetries;
}

void Agent::on_rep(CmId& id, const Incoming& rep) {
  Connection& c = id.conn;
  if (c.state == CmState::kEstablished && rep.sender_comm_id == c.remote_comm_id) {
    // Our RTU was lost: the peer repeats its REP; repeat the RTU.
    mad_port_->send(c.remote_gid, c.sgid_index, c.last_sent);
    return;
  }
  if (c.state != CmState::kReqSent) return;
  c.awaiting_answer = false;
  c.remote_comm_id = rep.sender_comm_id;
  c.negotiated.remote_qpn = rep.qpn;
  c.negotiated.send_psn = rep.starting_psn;
  // rdma_cm(7)'s pairing: what the peer serves is what we may issue, and back.
  c.negotiated.initiator_depth = std::min(c.negotiated.initiator_depth, rep.responder_resources);
  c.negotiated.responder_resources = rep.initiator_depth;
  c.negotiated.srq = rep.srq;
  id.remote_ece = rep.ece;
  if (id.ibv.qp == nullptr) {
    c.state = CmState::kRepReceived;  // rdma_establish(3) sends the RTU
    return deliver(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &rep);
  }
  if (int err = connect_qp(id)) {
    Mad rej = format_rej(c, kRejNoQp, nullptr, 0);
    send(id, rej, false);
    c.state = CmState::kClosed;
    return deliver(id, RDMA_CM_EVENT_CONNECT_ERROR, -err);
  }
  Mad rtu = format_rtu(id);
  send(id, rtu, false);
  c.state = CmState::kEstablished;
  watch_peer(id);
  deliver(id, RDMA_CM_EVENT_ESTABLISHED, 0, &rep);
}

void Agent::on_rej(CmId& id, const Incoming& rej) {
  Connection& c = id.conn;
  if (c.state != CmState::kReqSent && c.state != CmState::kRepSent &&
      c.state != CmState::kRepReceived)
    return;
  c.awaiting_answer = false;
  c.state = CmState::kClosed;
  qp_to_error(id);
  // rdma_cm(7): the event's status is the REJ's reason (IBA Table 112).
  deliver(id, RDMA_CM_EVENT_REJECTED, rej.reject_reason, &rej);
}

void Agent::on_dreq(CmId& id, const Incoming& dreq) {
  Connection& c = id.conn;
  Mad drep = format_drep(c);
  if (c.state == CmState::kClosed) {  // repeated: our DREP was lost
    mad_port_->send(c.remote_gid, c.sgid_index, drep);
    return;
  }
  if (c.state != CmState::kEstablished && c.state != CmState::kRepSent &&
      c.state != CmState::kDreqSent)
    return;
  send(id, drep, false);
  c.state = CmState::kClosed;
  qp_to_error(id);
  deliver(id, RDMA_CM_EVENT_DISCONNECTED, 0, &dreq);
}

}  // namespace softrdma::rdmacm
