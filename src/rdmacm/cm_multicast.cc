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

int join(CmId& id, const sockaddr* addr, void* context, bool send_only) {
  auto group = IpEndpoint::from(addr);
  if (!group) return addr == nullptr ? EINVAL : EAFNOSUPPORT;
  if (id.ibv.qp_type != IBV_QPT_UD || id.ibv.verbs == nullptr || !is_multicast(*group))
    return EINVAL;
  const ibv_gid mgid = group->as_gid();
  auto source = local_gid_for(id.ibv.verbs, *group);
  if (!source) return EADDRNOTAVAIL;
  std::lock_guard lock(Agent::get().cm_mutex());
  for (const CmId::Group& joined : id.groups)
    if (same_gid(joined.mgid, mgid)) return EADDRINUSE;  // rdma-core: one join per address
  // A send-only full member sends to the group and receives nothing from it:
  // its QP is not attached (librdmacm leaves it so too).
  const bool attach = id.ibv.qp != nullptr && !send_only;
  if (attach) {
    if (int err = ibv_attach_mcast(id.ibv.qp, &mgid, 0)) return err;
  }
  id.groups.push_back({mgid, attach});
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
                         [&](const CmId::Group& g) { return same_gid(g.mgid, mgid); });
  if (it == id.groups.end()) return EADDRNOTAVAIL;
  if (it->attached && id.ibv.qp != nullptr) ibv_detach_mcast(id.ibv.qp, &mgid, 0);
  id.groups.erase(it);
  return 0;
}

}  // namespace

}  // namespace softrdma::rdmacm

using namespace softrdma::rdmacm;

SOFTRDMA_CM_EXPORT int rdma_join_multicast(rdma_cm_id* ibv, sockaddr* addr, void* context) {
  return guard([&] { return ibv == nullptr ? EINVAL : join(*to_id(ibv), addr, context, false); });
}

// The address and the join flags are both required; a send needs no
// membership on RoCE (multicast.md), so a send-only full member is a join whose
// QP stays detached.
SOFTRDMA_CM_EXPORT int rdma_join_multicast_ex(rdma_cm_id* ibv, rdma_cm_join_mc_attr_ex* attr,
                                              void* context) {
  return guard([&] {
    if (ibv == nullptr || attr == nullptr) return EINVAL;
    if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED) return ENOTSUP;
    if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
        !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
        attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
      return EINVAL;
    return join(*to_id(ibv), attr->addr, context,
                attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
  });
}

SOFTRDMA_CM_EXPORT int rdma_leave_multicast(rdma_cm_id* ibv, sockaddr* addr) {
  return guard([&] { return ibv == nullptr ? EINVAL : leave(*to_id(ibv), addr); });
}
