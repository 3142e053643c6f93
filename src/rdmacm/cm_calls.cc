// The application's side of a connection: rdma_connect(3), rdma_accept(3),
// rdma_reject(3), rdma_disconnect(3), rdma_establish(3). Each sends its CM MAD
// through the agent (cm_protocol.cc), which sees the answer; a synchronous id
// then waits for the event here.
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstring>

#include "rdmacm/address.h"
#include "rdmacm/agent.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_format.h"
#include "wire/cm_ip.h"
#include "wire/cm_mad.h"

using namespace softrdma::rdmacm;

namespace {

// The depths this device can honour (ibv_query_device(3)), as rdma_cm clamps them.
void clamp_depths(ibv_context* context, uint8_t& responder_resources, uint8_t& initiator_depth) {
  ibv_device_attr attr{};
  if (ibv_query_device(context, &attr) != 0) return;
  responder_resources = uint8_t(std::min<int>(responder_resources, attr.max_qp_rd_atom));
  initiator_depth = uint8_t(std::min<int>(initiator_depth, attr.max_qp_init_rd_atom));
}

// rdma_get_request(3)'s ids become synchronous when the application answers:
// the request event it held is acknowledged and the id gets a channel of its own.
int become_synchronous(CmId& id) {
  if (!id.synchronous_after_request) return 0;
  id.synchronous_after_request = false;
  if (id.ibv.event != nullptr) {
    rdma_ack_cm_event(id.ibv.event);
    id.ibv.event = nullptr;
  }
  return rdma_migrate_id(&id.ibv, nullptr) == 0 ? 0 : errno;
}

// A destination on this host goes to whichever process holds its port now (the
// one at rdma_resolve_addr may have closed it and another listened since). A
// server between two listens (perftest -R closes its exchange listener and binds
// the next one while its client connects) is given a moment: the kernel's CM
// takes the REQ microseconds later, a softrdma process's bind takes longer. With
// still no holder, the REQ goes to this process and is rejected (no listener,
// IBA Table 112 reason 8), as the kernel answers.
void refresh_local_destination(CmId& id) {
  if (!id.local_destination) return;
  auto destination = IpEndpoint::from(&id.ibv.route.addr.dst_addr);
  if (!destination) return;
  constexpr auto kPatience = std::chrono::milliseconds(200);
  const auto give_up = std::chrono::steady_clock::now() + kPatience;
  for (;;) {
    if (auto gid = gid_of_local_owner(id.ibv.ps, *destination)) {
      id.ibv.route.addr.addr.ibaddr.dgid = *gid;
      id.path.dgid = *gid;
      return;
    }
    if (std::chrono::steady_clock::now() >= give_up) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The private data a call may carry: what its MAD holds, less the IP CM
// header a REQ or SIDR_REQ starts with (IBA 12.6, Annex A11). Longer data is
// EINVAL, as the kernel's CM answers; it is never cut short on the wire.
enum class Carrier { kRequest, kAccept, kReject };
size_t private_data_limit(const CmId& id, Carrier carrier) {
  namespace w = softrdma::wire;
  const bool ud = id.ibv.qp_type == IBV_QPT_UD;
  switch (carrier) {
    case Carrier::kRequest:
      return ud ? w::kIpCmSidrReqConsumerBytes : w::kIpCmReqConsumerBytes;
    case Carrier::kAccept:
      return ud ? w::CmSidrRep::kPrivateDataBytes : w::CmRep::kPrivateDataBytes;
    case Carrier::kReject:
      return ud ? w::CmSidrRep::kPrivateDataBytes : w::CmRej::kPrivateDataBytes;
  }
  return 0;
}

int connect(CmId& id, const rdma_conn_param& param) {
  if (!is_iwarp(id) && param.private_data_len > private_data_limit(id, Carrier::kRequest))
    return EINVAL;
  if (id.state != IdState::kRouteResolved) return EINVAL;
  refresh_local_destination(id);  // before the lock: it may wait
  Agent& agent = Agent::get();
  std::lock_guard lock(agent.cm_mutex());
  if (is_iwarp(id)) return agent.iwarp().connect(id, param);  // TCP and MPA
  if (id.ibv.qp_type == IBV_QPT_UD) return agent.connect_ud(id, param);  // SIDR
  if (int err = agent.open_mad_port()) return err;
  Connection& c = id.conn;
  agent.add_connection(id);
  c.remote_gid = id.ibv.route.addr.addr.ibaddr.dgid;
  c.sgid_index = id.sgid_index;
  c.transaction_id = (uint64_t(c.local_comm_id) << 32) | random_psn();
  Negotiated& n = c.negotiated;
  n.receive_psn = random_psn();
  n.responder_resources = param.responder_resources;
  n.initiator_depth = param.initiator_depth;
  clamp_depths(id.ibv.verbs, n.responder_resources, n.initiator_depth);
  n.retry_count = std::min<uint8_t>(param.retry_count, 7);
  n.rnr_retry_count = std::min<uint8_t>(param.rnr_retry_count, 7);
  n.path_mtu = ibv_mtu(id.path.mtu);
  // IBA 12.7.34 / the kernel's cma: the QP's ACK timeout from the path's packet
  // lifetime, one step above it (~134 ms on softrdma's path, resolve.cc).
  n.local_ack_timeout = id.ack_timeout >= 0 ? uint8_t(id.ack_timeout)
                                            : uint8_t(std::min(id.path.packet_life_time + 1, 31));
  n.srq = id.ibv.srq != nullptr || (id.ibv.qp != nullptr && id.ibv.qp->srq != nullptr);
  rdma_conn_param effective = param;
  effective.responder_resources = n.responder_resources;
  effective.initiator_depth = n.initiator_depth;
  const uint32_t qpn = id.ibv.qp != nullptr ? id.ibv.qp->qp_num : param.qp_num;
  Mad req = format_req(id, effective, qpn);
  id.state = IdState::kConnecting;
  c.state = CmState::kReqSent;
  return agent.send(id, req, true);
}

int accept(CmId& id, const rdma_conn_param* param) {
  if (!is_iwarp(id) && param != nullptr &&
      param->private_data_len > private_data_limit(id, Carrier::kAccept))
    return EINVAL;
  if (int err = become_synchronous(id)) return err;
  Agent& agent = Agent::get();
  std::lock_guard lock(agent.cm_mutex());
  if (is_iwarp(id)) return agent.iwarp().accept(id, param);
  if (id.ibv.qp_type == IBV_QPT_UD) return agent.answer_ud(id, true, param);
  Connection& c = id.conn;
  if (c.state != CmState::kReqReceived) return EINVAL;
  rdma_conn_param effective{};
  if (param != nullptr) effective = *param;
  Negotiated& n = c.negotiated;  // receive_psn: chosen when the REQ came (cm_receive.cc)
  if (param != nullptr) {
    n.responder_resources = effective.responder_resources;
    n.initiator_depth = effective.initiator_depth;
  }
  clamp_depths(id.ibv.verbs, n.responder_resources, n.initiator_depth);
  effective.responder_resources = n.responder_resources;
  effective.initiator_depth = n.initiator_depth;
  if (param != nullptr) n.rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
  if (id.ack_timeout >= 0) n.local_ack_timeout = uint8_t(id.ack_timeout);
  if (id.ibv.qp != nullptr) {
    if (int err = connect_qp(id)) return err;
  }
  const uint32_t qpn = id.ibv.qp != nullptr ? id.ibv.qp->qp_num : effective.qp_num;
  Mad rep = format_rep(id, effective, qpn);
  agent.request_answered(id);
  c.state = CmState::kRepSent;
  return agent.send(id, rep, true);
}

int reject(CmId& id, const void* private_data, uint8_t length) {
  if (!is_iwarp(id) && length > private_data_limit(id, Carrier::kReject)) return EINVAL;
  if (int err = become_synchronous(id)) return err;
  Agent& agent = Agent::get();
  std::lock_guard lock(agent.cm_mutex());
  if (is_iwarp(id)) return agent.iwarp().reject(id, private_data, length);
  if (id.ibv.qp_type == IBV_QPT_UD) {
    rdma_conn_param param{};
    param.private_data = private_data;
    param.private_data_len = length;
    return agent.answer_ud(id, false, &param);
  }
  Connection& c = id.conn;
  if (c.state != CmState::kReqReceived) return EINVAL;
  Mad rej = format_rej(c, kRejConsumer, private_data, length);
  agent.request_answered(id);
  c.state = CmState::kClosed;
  return agent.send(id, rej, false);
}

int disconnect(CmId& id) {
  Agent& agent = Agent::get();
  std::lock_guard lock(agent.cm_mutex());
  if (is_iwarp(id)) return agent.iwarp().disconnect(id);
  Connection& c = id.conn;
  // Already ending (the peer's DREQ came first, or ours is out): nothing more
  // to send; the kernel's rdma_disconnect answers 0 there too.
  if (c.state == CmState::kClosed || c.state == CmState::kDreqSent) {
    qp_to_error(id);
    return c.local_comm_id != 0 ? 0 : EINVAL;
  }
  if (c.state != CmState::kEstablished && c.state != CmState::kRepSent &&
      c.state != CmState::kRepReceived)
    return EINVAL;
  qp_to_error(id);
  Mad dreq = format_dreq(id);
  c.state = CmState::kDreqSent;
  return agent.send(id, dreq, true);
}

int establish(CmId& id) {
  Agent& agent = Agent::get();
  std::lock_guard lock(agent.cm_mutex());
  Connection& c = id.conn;
  if (c.state != CmState::kRepReceived) return EINVAL;
  Mad rtu = format_rtu(id);
  c.state = CmState::kEstablished;
  agent.watch_peer(id);
  return agent.send(id, rtu, false);
}

}  // namespace

SOFTRDMA_CM_EXPORT int rdma_connect(rdma_cm_id* ibv, rdma_conn_param* param) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    rdma_conn_param defaults{};
    defaults.retry_count = 7;
    defaults.rnr_retry_count = 7;
    if (int err = connect(id, param != nullptr ? *param : defaults)) return err;
    return id.synchronous ? complete_synchronously(id) : 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_accept(rdma_cm_id* ibv, rdma_conn_param* param) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    if (int err = accept(id, param)) return err;
    // A UD accept ends the exchange: no event follows on this side.
    return id.synchronous && id.ibv.qp_type != IBV_QPT_UD ? complete_synchronously(id) : 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_reject(rdma_cm_id* ibv, const void* private_data, uint8_t length) {
  return guard([&] { return ibv == nullptr ? EINVAL : reject(*to_id(ibv), private_data, length); });
}

// ECE is not negotiated (softrdma has no vendor options): a plain reject.
SOFTRDMA_CM_EXPORT int rdma_reject_ece(rdma_cm_id* ibv, const void* private_data, uint8_t length) {
  return rdma_reject(ibv, private_data, length);
}

SOFTRDMA_CM_EXPORT int rdma_disconnect(rdma_cm_id* ibv) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    if (int err = disconnect(id)) return err;
    return 0;
  });
}

// ECE (IBA Comment 9434): softrdma has no vendor options of its own, but carries
// what the application sets in its REQ or REP and shows what the peer sent.
SOFTRDMA_CM_EXPORT int rdma_set_local_ece(rdma_cm_id* ibv, ibv_ece* ece) {
  return guard([&] {
    if (ibv == nullptr || ece == nullptr || ece->vendor_id > 0xffffff) return EINVAL;
    std::lock_guard lock(Agent::get().cm_mutex());
    to_id(ibv)->local_ece = *ece;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_get_remote_ece(rdma_cm_id* ibv, ibv_ece* ece) {
  return guard([&] {
    if (ibv == nullptr || ece == nullptr) return EINVAL;
    std::lock_guard lock(Agent::get().cm_mutex());
    *ece = to_id(ibv)->remote_ece;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_establish(rdma_cm_id* ibv) {
  return guard([&] { return ibv == nullptr ? EINVAL : establish(*to_id(ibv)); });
}

// rdma_notify(3): data arrived on the QP before the RTU (IBA 12.9.6: a
// "communication established" event stands for the RTU); other events are
// accepted and change nothing.
SOFTRDMA_CM_EXPORT int rdma_notify(rdma_cm_id* ibv, ibv_event_type event) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    std::lock_guard lock(Agent::get().cm_mutex());
    if (event == IBV_EVENT_COMM_EST && id.conn.state == CmState::kRepSent) {
      id.conn.awaiting_answer = false;
      id.conn.state = CmState::kEstablished;
      Agent::get().watch_peer(id);
      deliver(id, RDMA_CM_EVENT_ESTABLISHED, 0);
    }
    return 0;
  });
}
