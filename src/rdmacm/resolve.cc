// rdma_resolve_addr(3) and rdma_resolve_route(3): an IP address to a GID and a
// path, with no subnet administrator (RoCE has none: the GID is the address,
// IBA A17.4.5.1). A destination on this host is whichever softrdma process holds
// its port (address.h); elsewhere, the address itself.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "rdmacm/address.h"
#include "rdmacm/agent.h"
#include "rdmacm/cm.h"

using namespace softrdma::rdmacm;

namespace {

// The source address when none was given: the wildcard of the destination's
// family (rdma_resolve_addr(3): "If no source address is given, ... bound to a
// source address based on the local routing tables").
int bind_for(CmId& id, const sockaddr* src, const IpEndpoint& destination) {
  if (src != nullptr) return bind_id(id, src);
  sockaddr_storage any{};
  any.ss_family = sa_family_t(destination.family());
  return bind_id(id, reinterpret_cast<sockaddr*>(&any));
}

// A wildcard source becomes the address the host's routing picks for the
// destination (rdma_resolve_addr(3): "bound to a source address based on the
// local routing tables"): what a connected UDP socket is given, no packet sent.
// Programs publish it (libfabric's rxm sends it to its peer as its own name).
void choose_source_address(CmId& id, const IpEndpoint& destination) {
  auto bound = IpEndpoint::from(&id.ibv.route.addr.src_addr);
  if (!bound || !bound->is_wildcard()) return;
  int fd = socket(destination.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  IpEndpoint probe = destination;
  if (probe.port() == 0) probe.set_port(9);  // connect(2) on UDP wants a port
  sockaddr_storage chosen{};
  socklen_t length = sizeof chosen;
  if (connect(fd, probe.get(), probe.length()) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&chosen), &length) == 0) {
    if (auto source = IpEndpoint::from(reinterpret_cast<sockaddr*>(&chosen))) {
      source->set_port(bound->port());
      std::memcpy(&id.ibv.route.addr.src_storage, &source->storage, source->length());
    }
  }
  close(fd);
}

// iWARP: TCP finds the peer; the destination's address is all there is to
// resolve (the kernel's cma resolves no GID for an iWARP device either).
int resolve_iwarp(CmId& id, const IpEndpoint& destination) {
  choose_source_address(id, destination);
  std::memcpy(&id.ibv.route.addr.dst_storage, &destination.storage, destination.length());
  id.local_destination = false;
  id.state = IdState::kAddrResolved;
  return 0;
}

int resolve(CmId& id, const sockaddr* src, const sockaddr* dst) {
  auto destination = IpEndpoint::from(dst);
  if (!destination) return dst == nullptr ? EINVAL : EAFNOSUPPORT;
  if (destination->is_wildcard()) return EADDRNOTAVAIL;
  if (id.state == IdState::kIdle) {
    if (int err = bind_for(id, src, *destination)) return err;
  } else if (id.state != IdState::kAddrBound && id.state != IdState::kAddrResolved) {
    return EINVAL;
  }
  if (id.ibv.verbs == nullptr) {
    // Bound to no device (a loopback address, bind_id): resolving gives it one,
    // as the kernel's rdma_resolve_addr acquires the device of the route.
    id.ibv.verbs = id.device;
    id.ibv.pd = Agent::get().default_pd();
  }
  if (is_iwarp(id)) return resolve_iwarp(id, *destination);
  ibv_context* context = id.ibv.verbs;
  auto source = local_gid_for(context, *destination);
  if (!source) return EADDRNOTAVAIL;  // no GID of that family (IPv6 on a loopback-only device)
  ibv_gid destination_gid = destination->as_gid();
  id.local_destination = is_local(*destination);
  if (id.local_destination) {
    // The process that holds the port; if none does (yet), this process's own
    // GID: a connect then meets no listener and is rejected, as on one host
    // with the kernel.
    destination_gid = gid_of_local_owner(id.ibv.ps, *destination).value_or(source->first);
  }
  rdma_addr& addr = id.ibv.route.addr;
  choose_source_address(id, *destination);
  std::memcpy(&addr.dst_storage, &destination->storage, destination->length());
  addr.addr.ibaddr.sgid = source->first;
  addr.addr.ibaddr.dgid = destination_gid;
  addr.addr.ibaddr.pkey = htons(0xffff);
  id.sgid_index = source->second;
  id.state = IdState::kAddrResolved;
  return 0;
}

}  // namespace

namespace softrdma::rdmacm {

// The path a RoCE port takes to the peer: its GIDs, the default P_Key, the
// port's active MTU; LIDs are unused (0xffff on the wire, IBA A17.4.5.1).
int fill_route(CmId& id) {
  ibv_port_attr port{};
  if (int err = ibv_query_port(id.ibv.verbs, id.ibv.port_num, &port)) return err;
  ibv_sa_path_rec& path = id.path;
  path = ibv_sa_path_rec{};
  path.dgid = id.ibv.route.addr.addr.ibaddr.dgid;
  path.sgid = id.ibv.route.addr.addr.ibaddr.sgid;
  path.dlid = path.slid = htons(0xffff);
  path.reversible = 1;
  path.numb_path = 1;
  path.pkey = htons(0xffff);
  path.hop_limit = 64;
  path.mtu_selector = 2;  // exactly
  path.mtu = uint8_t(port.active_mtu);
  path.rate_selector = 2;
  path.rate = uint8_t(IBV_RATE_10_GBPS);
  path.packet_life_time_selector = 2;
  path.packet_life_time = 14;  // ~67 ms (4.096 µs × 2^14), a LAN's
  id.ibv.route.path_rec = &path;
  id.ibv.route.num_paths = 1;
  id.state = IdState::kRouteResolved;
  return 0;
}

}  // namespace softrdma::rdmacm

namespace {

// Queues the outcome as the man pages' event, or fails the call itself when
// the id is synchronous.
int report(CmId& id, int err, rdma_cm_event_type ok, rdma_cm_event_type failed) {
  post(id, new_event(id, err == 0 ? ok : failed, -err));
  return id.synchronous ? complete_synchronously(id) : 0;
}

}  // namespace

SOFTRDMA_CM_EXPORT int rdma_resolve_addr(rdma_cm_id* ibv, sockaddr* src, sockaddr* dst,
                                         int /*timeout_ms*/) {
  return guard([&] {
    if (ibv == nullptr || dst == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    int err = resolve(id, src, dst);
    // A bad argument fails the call; a destination that cannot be reached is
    // the ADDR_ERROR event (rdma_resolve_addr(3)).
    if (err == EINVAL || err == EAFNOSUPPORT || err == EADDRINUSE || err == ENODEV) return err;
    return report(id, err, RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_ERROR);
  });
}

SOFTRDMA_CM_EXPORT int rdma_resolve_route(rdma_cm_id* ibv, int /*timeout_ms*/) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    if (id.state != IdState::kAddrResolved && id.state != IdState::kRouteResolved) return EINVAL;
    if (is_iwarp(id)) {
      // The kernel's cma_resolve_iw_route: no path records, the event at once.
      id.ibv.route.path_rec = nullptr;
      id.ibv.route.num_paths = 0;
      id.state = IdState::kRouteResolved;
      return report(id, 0, RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_ROUTE_ERROR);
    }
    return report(id, fill_route(id), RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_ROUTE_ERROR);
  });
}
