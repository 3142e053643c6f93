// rdma_join_multicast(3), rdma_join_multicast_ex(3), rdma_leave_multicast(3) on
// RoCE: there is no subnet administrator to join through; a group's GID is its IP
// address (IPv4 as ::ffff:a.b.c.d, as the kernel's cma makes a RoCEv2 MGID), the
// id's QP is attached to it (ibv_attach_mcast: the device joins the IP group,
// docs/decisions/multicast.md), and MULTICAST_JOIN gives the group's address in
// param.ud: an AH to the MGID, QPN 0xFFFFFF, rdma_cm's UDP Q_Key, and the
// caller's context as the private data, as librdmacm delivers it.
#include <algorithm>
#include <cstring>

#include "rdmacm/address.h"
#include "rdmacm/agent.h"
#include "rdmacm/cm.h"

namespace softrdma::rdmacm {

namespace {

bool is_multicast(const IpEndpoint& group) {
  if (group.family() == AF_INET) {
    const uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&group.storage)->sin_addr.s_addr);
    return (a >> 28) == 0xe;  // 224.0.0.0/4
  }
  return IN6_IS_ADDR_MULTICAST(&reinterpret_cast<const sockaddr_in6*>(&group.storage)->sin6_addr);
}

bool same_gid(const ibv_gid& a, const ibv_gid& b) { return std::memcmp(a.raw, b.raw, 16) == 0; }

int join(CmId& id, const sockaddr* addr, void* context) {
  auto group = IpEndpoint::from(addr);
  if (!group) return addr == nullptr ? EINVAL : EAFNOSUPPORT;
  if (id.ibv.qp_type != IBV_QPT_UD || id.ibv.verbs == nullptr || !is_multicast(*group))
    return EINVAL;
  const ibv_gid mgid = group->as_gid();
  auto source = local_gid_for(id.ibv.verbs, *group);
  if (!source) return EADDRNOTAVAIL;
  std::lock_guard lock(Agent::get().cm_mutex());
  for (const ibv_gid& joined : id.groups)
    if (same_gid(joined, mgid)) return EADDRINUSE;  // rdma-core: one join per address
  if (id.ibv.qp != nullptr) {
    if (int err = ibv_attach_mcast(id.ibv.qp, &mgid, 0)) return err;
  }
  id.groups.push_back(mgid);
  Event* event = new_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
  rdma_ud_param& ud = event->ibv.param.ud;
  ud.private_data = context;
  ud.ah_attr.is_global = 1;
  ud.ah_attr.grh.dgid = mgid;
  ud.ah_attr.grh.sgid_index = uint8_t(source->second);
  ud.ah_attr.grh.hop_limit = 1;  // the local link, as the group's IP TTL
  ud.ah_attr.port_num = id.ibv.port_num != 0 ? id.ibv.port_num : 1;
  ud.qp_num = 0xFFFFFF;
  ud.qkey = RDMA_UDP_QKEY;
  post(id, event);
  return 0;
}

int leave(CmId& id, const sockaddr* addr) {
  auto group = IpEndpoint::from(addr);
  if (!group) return EINVAL;
  const ibv_gid mgid = group->as_gid();
  std::lock_guard lock(Agent::get().cm_mutex());
  auto it = std::find_if(id.groups.begin(), id.groups.end(),
                         [&](const ibv_gid& g) { return same_gid(g, mgid); });
  if (it == id.groups.end()) return EADDRNOTAVAIL;
  if (id.ibv.qp != nullptr) ibv_detach_mcast(id.ibv.qp, &mgid, 0);
  id.groups.erase(it);
  return 0;
}

}  // namespace

}  // namespace softrdma::rdmacm

using namespace softrdma::rdmacm;

SOFTRDMA_CM_EXPORT int rdma_join_multicast(rdma_cm_id* ibv, sockaddr* addr, void* context) {
  return guard([&] { return ibv == nullptr ? EINVAL : join(*to_id(ibv), addr, context); });
}

// Full members and send-only full members are joined alike: the device receives
// for every attached QP, and a send needs no membership (multicast.md).
SOFTRDMA_CM_EXPORT int rdma_join_multicast_ex(rdma_cm_id* ibv, rdma_cm_join_mc_attr_ex* attr,
                                              void* context) {
  return guard([&] {
    if (ibv == nullptr || attr == nullptr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
      return EINVAL;
    return join(*to_id(ibv), attr->addr, context);
  });
}

SOFTRDMA_CM_EXPORT int rdma_leave_multicast(rdma_cm_id* ibv, sockaddr* addr) {
  return guard([&] { return ibv == nullptr ? EINVAL : leave(*to_id(ibv), addr); });
}
