// The synchronous shortcuts of rdma_verbs(7)'s examples: rdma_create_ep(3),
// rdma_destroy_ep(3), rdma_get_request(3). An endpoint is an id with no channel:
// each call waits for its own event.
#include "rdmacm/cm.h"

using namespace softrdma::rdmacm;

namespace {

int create_ep(rdma_cm_id*& out, const rdma_addrinfo& res, ibv_pd* pd, const ibv_qp_init_attr* qp_attr) {
  rdma_cm_id* cm = nullptr;
  const auto ps = rdma_port_space(res.ai_port_space != 0 ? res.ai_port_space : RDMA_PS_TCP);
  if (rdma_create_id(nullptr, &cm, nullptr, ps) != 0) return errno;
  CmId& id = *to_id(cm);
  ibv_qp_init_attr attr{};
  if (qp_attr != nullptr) {
    attr = *qp_attr;
    attr.qp_type = cm->qp_type;  // the port space's (rdma_getaddrinfo's ai_qp_type)
  }
  int err = 0;
  if (res.ai_flags & RAI_PASSIVE) {
    // rdma_get_request makes each connection's QP from what is kept here.
    if (rdma_bind_addr(cm, res.ai_src_addr) != 0) err = errno;
    id.ep_pd = pd;
    id.ep_has_qp = qp_attr != nullptr;
    id.ep_qp_attr = attr;
  } else if (rdma_resolve_addr(cm, res.ai_src_addr, res.ai_dst_addr, 2000) != 0 ||
             rdma_resolve_route(cm, 2000) != 0 ||
             (qp_attr != nullptr && rdma_create_qp(cm, pd, &attr) != 0)) {
    err = errno;
  }
  if (err != 0) {
    rdma_destroy_id(cm);
    return err;
  }
  out = cm;
  return 0;
}

}  // namespace

SOFTRDMA_CM_EXPORT int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                                      ibv_qp_init_attr* qp_init_attr) {
  return guard([&] {
    if (id == nullptr || res == nullptr) return EINVAL;
    return create_ep(*id, *res, pd, qp_init_attr);
  });
}

SOFTRDMA_CM_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

// rdma_get_request(3): the next connection request of a synchronous listener,
// its QP made as rdma_create_ep was told; the new id answers synchronously.
SOFTRDMA_CM_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  return guard([&] {
    if (listen == nullptr || out == nullptr) return EINVAL;
    CmId& listener = *to_id(listen);
    if (listener.state != IdState::kListening || !listener.synchronous) return EINVAL;
    for (;;) {
      rdma_cm_event* event = nullptr;
      if (rdma_get_cm_event(&listener.channel->ibv, &event) != 0) return errno;
      if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        rdma_ack_cm_event(event);
        continue;
      }
      CmId& id = *to_id(event->id);
      if (listener.ep_has_qp) {
        ibv_qp_init_attr attr = listener.ep_qp_attr;
        if (rdma_create_qp(&id.ibv, listener.ep_pd, &attr) != 0) {
          int err = errno;
          rdma_reject(&id.ibv, nullptr, 0);
          rdma_ack_cm_event(event);
          rdma_destroy_id(&id.ibv);
          return err;
        }
      }
      id.ibv.event = event;
      id.synchronous_after_request = true;
      *out = &id.ibv;
      return 0;
    }
  });
}
