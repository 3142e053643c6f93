// rdma_create_qp(3), rdma_create_qp_ex(3), rdma_destroy_qp(3),
// rdma_init_qp_attr(3): a QP made for an id and brought to the state the man
// pages promise — a connected type to INIT (the connection moves it on), a UD QP
// to RTS with rdma_cm's UDP Q_Key.
#include <algorithm>
#include <cstring>

#include "rdmacm/agent.h"
#include "rdmacm/cm.h"

using namespace softrdma::rdmacm;

namespace {

// RDMA_UDP_QKEY of rdma_cma.h: the Q_Key of RDMA_PS_UDP ids.
constexpr uint32_t kUdpQkey = 0x01234567;

// rdma_init_qp_attr(3) for INIT: port 1, the default P_Key's index, and the
// remote rights a connection's responder needs (the kernel grants REMOTE_WRITE,
// and READ/ATOMIC by the responder resources, which rdma_cm asks for at the
// maximum).
int init_attributes(const CmId& id, ibv_qp_attr& attr, int& mask) {
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = id.ibv.port_num != 0 ? id.ibv.port_num : 1;
  attr.pkey_index = 0;
  mask = IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX;
  if (is_iwarp(id)) {
    // The kernel's iw_cm (iwcm_init_qp_init_attr) grants remote WRITE and READ;
    // the P_Key index stays for the engine's INIT rule (ibv_modify_qp(3)).
    attr.qp_access_flags =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mask |= IBV_QP_ACCESS_FLAGS;
    return 0;
  }
  if (id.ibv.qp_type == IBV_QPT_UD) {
    attr.qkey = kUdpQkey;
    mask |= IBV_QP_QKEY;
  } else {
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  return 0;
}

// iWARP: the connection manager moves the QP to RTS itself (the engine, on
// softrdma_iwarp_attach). The kernel's iw_cm gives RTR the INIT rights again
// and RTS nothing to change (iwcm_init_qp_rts_attr: an empty mask).
int iwarp_attributes(const CmId& id, ibv_qp_attr& attr, int& mask) {
  const ibv_qp_state wanted = attr.qp_state;
  if (wanted != IBV_QPS_RTR && wanted != IBV_QPS_RTS) return EINVAL;
  if (id.iwarp.phase == IwarpPhase::kClosed || id.iwarp.phase == IwarpPhase::kListening)
    return EINVAL;
  attr = ibv_qp_attr{};
  attr.qp_state = wanted;
  mask = 0;
  if (wanted == IBV_QPS_RTR) {
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS;
  }
  return 0;
}

// IBA 12.7.2 / rdma_init_qp_attr(3) for RTR and RTS: the peer's QP and PSN,
// the path, and the RDMA READ/ATOMIC depths the REQ and REP settled.
int connected_attributes(const CmId& id, ibv_qp_attr& attr, int& mask) {
  if (is_iwarp(id)) return iwarp_attributes(id, attr, mask);
  const Connection& c = id.conn;
  if (c.state != CmState::kReqReceived && c.state != CmState::kRepSent &&
      c.state != CmState::kRepReceived && c.state != CmState::kEstablished &&
      c.state != CmState::kReqSent)
    return EINVAL;
  const Negotiated& n = c.negotiated;
  const ibv_qp_state wanted = attr.qp_state;
  attr = ibv_qp_attr{};
  attr.qp_state = wanted;
  if (wanted == IBV_QPS_RTR) {
    attr.path_mtu = n.path_mtu;
    attr.dest_qp_num = n.remote_qpn;
    attr.rq_psn = n.receive_psn;
    attr.max_dest_rd_atomic = n.responder_resources;
    // The kernel's CM gives RC 0 (cm_init_qp_rtr_attr, drivers/infiniband/core/
    // cm.c): 655.36 ms by IBA Table 45. Programs count on that window to post a
    // receive after the peer's SEND: with rnr_retry 5 it is ~3.9 s, where 0.64 ms
    // would leave ~4 ms, lost to a descheduled process (rdma-core's
    // test_rdmacm_async_traffic_external_qp under load).
    attr.min_rnr_timer = 0;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = c.remote_gid;
    attr.ah_attr.grh.sgid_index = uint8_t(c.sgid_index);
    attr.ah_attr.grh.hop_limit = 64;
    attr.ah_attr.port_num = id.ibv.port_num != 0 ? id.ibv.port_num : 1;
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return 0;
  }
  if (wanted != IBV_QPS_RTS) return EINVAL;
  attr.sq_psn = n.send_psn;
  attr.timeout = n.local_ack_timeout;
  attr.retry_cnt = n.retry_count;
  attr.rnr_retry = n.rnr_retry_count;
  attr.max_rd_atomic = n.initiator_depth;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
         IBV_QP_MAX_QP_RD_ATOMIC;
  return 0;
}

int bring_up(CmId& id, ibv_qp* qp) {
  ibv_qp_attr attr;
  int mask;
  init_attributes(id, attr, mask);
  if (int err = ibv_modify_qp(qp, &attr, mask)) return err;
  if (qp->qp_type != IBV_QPT_UD) return 0;
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  if (int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE)) return err;
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// rdma_create_qp(3): "If send or receive completion queues are not specified,
// the rdma_cm will allocate them", each with a completion channel.
int make_cq(CmId& id, uint32_t depth, ibv_comp_channel*& channel, ibv_cq*& cq) {
  channel = ibv_create_comp_channel(id.ibv.verbs);
  if (channel == nullptr) return errno;
  cq = ibv_create_cq(id.ibv.verbs, int(std::max(depth, 1u)), &id.ibv, channel, 0);
  return cq == nullptr ? errno : 0;
}

int make_cqs(CmId& id, ibv_qp_init_attr_ex& attr) {
  if (attr.send_cq == nullptr) {
    if (int err = make_cq(id, attr.cap.max_send_wr, id.ibv.send_cq_channel, id.ibv.send_cq))
      return err;
    attr.send_cq = id.ibv.send_cq;
  }
  if (attr.recv_cq == nullptr) {
    if (int err = make_cq(id, attr.cap.max_recv_wr, id.ibv.recv_cq_channel, id.ibv.recv_cq))
      return err;
    attr.recv_cq = id.ibv.recv_cq;
  }
  return 0;
}

void destroy_cqs(CmId& id) {
  if (id.ibv.send_cq != nullptr) ibv_destroy_cq(id.ibv.send_cq);
  if (id.ibv.send_cq_channel != nullptr) ibv_destroy_comp_channel(id.ibv.send_cq_channel);
  if (id.ibv.recv_cq != nullptr) ibv_destroy_cq(id.ibv.recv_cq);
  if (id.ibv.recv_cq_channel != nullptr) ibv_destroy_comp_channel(id.ibv.recv_cq_channel);
  id.ibv.send_cq = id.ibv.recv_cq = nullptr;
  id.ibv.send_cq_channel = id.ibv.recv_cq_channel = nullptr;
}

// ECE (docs/decisions/selective-repeat.md): the active side's REQ carries its
// QP's offer, as rdma-core's librdmacm does; the QP the passive side makes for a
// REQ that carried softrdma's offer takes it (ibv_set_ece keeps what both
// understand), and its REP carries that answer. A REP answers nothing else:
// rdma-core's librdmacm hands any REP's vendor ID to ibv_set_ece, whose default
// for providers without ECE (rxe's) returns EOPNOTSUPP without setting errno, and
// then reads errno: a stale ECONNREFUSED (perftest -R's first connect leaves one)
// ends the connection. Interop found it (rxe clients of a softrdma server:
// RDMA_CM_EVENT_CONNECT_ERROR). A device without ECE (iWARP) offers nothing.
void init_ece(CmId& id, ibv_qp* qp) {
  ibv_ece ece{};
  if (ibv_query_ece(qp, &ece) != 0) return;
  if (id.conn.state != CmState::kReqReceived) {
    id.local_ece = ece;  // the active side: its offer
    return;
  }
  id.local_ece = ibv_ece{};
  if (id.remote_ece.vendor_id != ece.vendor_id) return;
  ibv_ece offered = id.remote_ece;
  if (ibv_set_ece(qp, &offered) == 0 && ibv_query_ece(qp, &ece) == 0) id.local_ece = ece;
}

int create_qp(CmId& id, ibv_qp_init_attr_ex& attr) {
  if (id.ibv.verbs == nullptr || id.ibv.qp != nullptr) return EINVAL;  // not bound, or has one
  if (!(attr.comp_mask & IBV_QP_INIT_ATTR_PD) || attr.pd == nullptr) {
    attr.pd = id.ibv.pd != nullptr ? id.ibv.pd : Agent::get().default_pd();
    if (attr.pd == nullptr) return ENOMEM;
    attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (attr.pd->context != id.ibv.verbs) return EINVAL;
  if (attr.qp_type != id.ibv.qp_type) return EINVAL;  // the port space fixes it
  if (attr.srq == nullptr) attr.srq = id.ibv.srq;  // rdma_create_srq's, if any
  if (int err = make_cqs(id, attr)) {
    destroy_cqs(id);
    return err;
  }
  ibv_qp* qp = ibv_create_qp_ex(id.ibv.verbs, &attr);
  if (qp == nullptr) {
    int err = errno;
    destroy_cqs(id);
    return err;
  }
  if (int err = bring_up(id, qp)) {
    ibv_destroy_qp(qp);
    destroy_cqs(id);
    return err;
  }
  if (qp->qp_type == IBV_QPT_RC) init_ece(id, qp);
  Agent& agent = Agent::get();
  std::lock_guard lock(agent.cm_mutex());  // the agent reads id.ibv.qp under it
  id.ibv.qp = qp;
  agent.own_qp(id);
  id.ibv.pd = attr.pd;
  return 0;
}

}  // namespace

SOFTRDMA_CM_EXPORT int rdma_create_qp_ex(rdma_cm_id* ibv, ibv_qp_init_attr_ex* attr) {
  return guard([&] {
    if (ibv == nullptr || attr == nullptr) return EINVAL;
    return create_qp(*to_id(ibv), *attr);
  });
}

SOFTRDMA_CM_EXPORT int rdma_create_qp(rdma_cm_id* ibv, ibv_pd* pd, ibv_qp_init_attr* attr) {
  return guard([&] {
    if (ibv == nullptr || attr == nullptr) return EINVAL;
    ibv_qp_init_attr_ex ex{};
    std::memcpy(&ex, attr, sizeof *attr);  // ibv_qp_init_attr is ex's prefix
    ex.comp_mask = pd != nullptr ? IBV_QP_INIT_ATTR_PD : 0;
    ex.pd = pd;
    if (int err = create_qp(*to_id(ibv), ex)) return err;
    attr->send_cq = ex.send_cq;
    attr->recv_cq = ex.recv_cq;
    attr->cap = ex.cap;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT void rdma_destroy_qp(rdma_cm_id* ibv) {
  if (ibv == nullptr) return;
  ibv_qp* qp;
  {
    // The agent moves the QP on a peer's REP or DREQ under this lock: it must
    // never see a QP being destroyed.
    Agent& agent = Agent::get();
    std::lock_guard lock(agent.cm_mutex());
    agent.disown_qp(*to_id(ibv));
    qp = ibv->qp;
    ibv->qp = nullptr;
    // A QP attached to a group cannot be destroyed (EBUSY, as the kernel
    // answers): the id's joins are left first (rdma_join_multicast(3)).
    if (qp != nullptr)
      for (const CmId::Group& group : to_id(ibv)->groups)
        if (group.attached) ibv_detach_mcast(qp, &group.mgid, 0);
  }
  // Null: the application destroyed it already (ibv_destroy_qp, Agent::own_qp);
  // the CQs made for it are still the id's.
  if (qp != nullptr) ibv_destroy_qp(qp);
  destroy_cqs(*to_id(ibv));
}

namespace softrdma::rdmacm {

int connect_qp(CmId& id) {
  // The active side: the REP's answer to its offer (none from a peer without ECE:
  // the QP stays as IBA has it).
  if (id.ibv.qp->qp_type == IBV_QPT_RC && id.remote_ece.vendor_id != 0 &&
      id.conn.state == CmState::kReqSent) {
    ibv_ece ece = id.remote_ece;
    ibv_set_ece(id.ibv.qp, &ece);
  }
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = IBV_QPS_RTR;
  if (int err = connected_attributes(id, attr, mask)) return err;
  if (int err = ibv_modify_qp(id.ibv.qp, &attr, mask)) return err;
  attr.qp_state = IBV_QPS_RTS;
  if (int err = connected_attributes(id, attr, mask)) return err;
  return ibv_modify_qp(id.ibv.qp, &attr, mask);
}

// rdma_disconnect(3): "transitions any associated QP to the error state"; so
// does a rejection or a peer's DREQ (the kernel's cma.c).
void qp_to_error(CmId& id) {
  if (id.ibv.qp == nullptr || id.ibv.qp_type == IBV_QPT_UD) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(id.ibv.qp, &attr, IBV_QP_STATE);
}

}  // namespace softrdma::rdmacm

// rdma_init_qp_attr(3): the attributes for the QP's next state: INIT from the
// id, RTR and RTS from what the connection's REQ and REP settled.
SOFTRDMA_CM_EXPORT int rdma_init_qp_attr(rdma_cm_id* ibv, ibv_qp_attr* qp_attr,
                                         int* qp_attr_mask) {
  return guard([&] {
    if (ibv == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return EINVAL;
    if (qp_attr->qp_state == IBV_QPS_INIT)
      return init_attributes(*to_id(ibv), *qp_attr, *qp_attr_mask);
    std::lock_guard lock(Agent::get().cm_mutex());
    return connected_attributes(*to_id(ibv), *qp_attr, *qp_attr_mask);
  });
}

// rdma_create_srq(3) / rdma_create_srq_ex(3): an SRQ on the id's PD (unless one
// is given), kept as id->srq for the QP rdma_create_qp makes next.
SOFTRDMA_CM_EXPORT int rdma_create_srq_ex(rdma_cm_id* ibv, ibv_srq_init_attr_ex* attr) {
  return guard([&] {
    if (ibv == nullptr || attr == nullptr || ibv->verbs == nullptr || ibv->srq != nullptr)
      return EINVAL;
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr) {
      attr->pd = ibv->pd != nullptr ? ibv->pd : Agent::get().default_pd();
      attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    ibv_srq* srq = ibv_create_srq_ex(ibv->verbs, attr);
    if (srq == nullptr) return errno;
    ibv->srq = srq;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_create_srq(rdma_cm_id* ibv, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (attr == nullptr) return fail(EINVAL);
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = attr->srq_context;
  ex.attr = attr->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | (pd != nullptr ? IBV_SRQ_INIT_ATTR_PD : 0);
  ex.srq_type = IBV_SRQT_BASIC;
  ex.pd = pd;
  if (rdma_create_srq_ex(ibv, &ex) != 0) return -1;
  attr->attr = ex.attr;
  return 0;
}

SOFTRDMA_CM_EXPORT void rdma_destroy_srq(rdma_cm_id* ibv) {
  if (ibv == nullptr || ibv->srq == nullptr) return;
  ibv_destroy_srq(ibv->srq);
  ibv->srq = nullptr;
}
