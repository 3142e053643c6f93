// Address handles for UD (ibv_create_ah(3), ibv_destroy_ah(3),
// ibv_init_ah_from_wc(3), ibv_create_ah_from_wc(3)). The engine's Ah holds the
// ibv_ah as its first member (engine/ah.h), so a UD work request's wr.ud.ah leads
// the engine straight to the address.
#include <arpa/inet.h>

#include <cstring>

#include "verbs/objects.h"
#include "verbs/process.h"
#include "wire/ip_udp.h"

using namespace softrdma::verbs;
namespace engine = softrdma::engine;

namespace {


// The GID index of `gid` in the device's table, or -1.
int gid_index(ibv_context* context, const ibv_gid& gid) {
  const auto& gids = to_context(context)->device->gids();
  for (size_t i = 0; i < gids.size(); ++i)
    if (std::memcmp(gids[i].data(), gid.raw, sizeof gid.raw) == 0) return int(i);
  return -1;
}

// The GRH a UD receive starts with (engine/ud/datagram.cc): an IPv6 header, or
// an IPv4 header in its last 20 bytes (RoCEv2, IBA A17.4.5.1). Fills the
// source and destination GIDs, traffic class, flow label and hop limit.
bool read_grh(const ibv_grh& grh, ibv_global_route& route, ibv_gid& local) {
  const uint32_t word0 = ntohl(grh.version_tclass_flow);
  if ((word0 >> 28) == 6) {
    route.dgid = grh.sgid;
    local = grh.dgid;
    route.traffic_class = uint8_t(word0 >> 20);
    route.flow_label = word0 & 0xfffff;
    route.hop_limit = grh.hop_limit;
    return true;
  }
  const auto* ip = reinterpret_cast<const uint8_t*>(&grh) + 20;
  if ((ip[0] >> 4) != 4) return false;
  uint32_t src, dst;
  std::memcpy(&src, ip + 12, 4);
  std::memcpy(&dst, ip + 16, 4);
  const auto src_gid = softrdma::wire::gid_from_ipv4(ntohl(src));
  const auto dst_gid = softrdma::wire::gid_from_ipv4(ntohl(dst));
  std::memcpy(route.dgid.raw, src_gid.data(), 16);
  std::memcpy(local.raw, dst_gid.data(), 16);
  route.traffic_class = ip[1];
  route.flow_label = 0;
  route.hop_limit = 0xff;  // rdma-core's answer for IPv4: any TTL will do
  return true;
}

}  // namespace

SOFTRDMA_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  return guard_ptr([&]() -> ibv_ah* {
    if (pd == nullptr || attr == nullptr) return fail(EINVAL);
    if (!live(pd->context)) return fail(EIO);
    int err = 0;
    engine::Ah* ah = to_context(pd->context)->device->create_ah(to_pd(pd)->pd, *attr, err);
    if (ah == nullptr) return fail(err);
    ah->ibv.context = pd->context;
    ah->ibv.pd = pd;
    ah->ibv.handle = uint32_t(reinterpret_cast<uintptr_t>(ah));
    return &ah->ibv;
  });
}

SOFTRDMA_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  return guard_errno([&] {
    if (ah == nullptr) return EINVAL;
    return to_context(ah->context)->device->destroy_ah(engine::Ah::from(ah));
  });
}

// ibv_init_ah_from_wc(3): the address that answers a UD message: its sender's GID
// from the GRH, the local GID it came to as the source index.
SOFTRDMA_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc,
                                        ibv_grh* grh, ibv_ah_attr* attr) {
  if (context == nullptr || wc == nullptr || attr == nullptr) return errno = EINVAL, -1;
  *attr = ibv_ah_attr{};
  attr->port_num = port_num;
  attr->sl = wc->sl;
  attr->dlid = wc->slid;
  attr->src_path_bits = wc->dlid_path_bits;
  // RoCE: the GRH is the address (IBA A17.4.5.1); without one there is none.
  if (!(wc->wc_flags & IBV_WC_GRH) || grh == nullptr) return errno = EPROTONOSUPPORT, -1;
  ibv_gid local{};
  if (!read_grh(*grh, attr->grh, local)) return errno = EPROTONOSUPPORT, -1;
  const int index = gid_index(context, local);
  if (index < 0) return errno = ENOENT, -1;
  attr->is_global = 1;
  attr->grh.sgid_index = uint8_t(index);
  return 0;
}

SOFTRDMA_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh,
                                              uint8_t port_num) {
  if (pd == nullptr) return fail(EINVAL);
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}
