// rdma_cm ids and their local addresses: rdma_create_id(3), rdma_destroy_id(3),
// rdma_bind_addr(3), rdma_listen(3), rdma_get_src_port(3), rdma_get_dst_port(3),
// rdma_migrate_id(3), rdma_set_option(3), rdma_get_devices(3).
#include <cstdlib>
#include <cstring>
#include <memory>

#include "rdmacm/address.h"
#include "rdmacm/agent.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_format.h"

using namespace softrdma::rdmacm;

namespace {

// Read as the int the caller passed: a value outside the enum is the caller's
// mistake to answer with EINVAL, not a load of an invalid enum value here.
bool known_port_space(const rdma_port_space& ps) {
  int raw;
  std::memcpy(&raw, &ps, sizeof raw);
  return raw == RDMA_PS_TCP || raw == RDMA_PS_UDP || raw == RDMA_PS_IB || raw == RDMA_PS_IPOIB;
}

// rdma_create_id(3): "RDMA_PS_UDP - provides unreliable, connectionless QP
// communication ... RDMA_PS_TCP - provides reliable, connection-oriented QP
// communication"; RDMA_PS_IPOIB is UD too, RDMA_PS_IB is RC by default.
ibv_qp_type qp_type_of(rdma_port_space ps) {
  return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

}  // namespace

namespace softrdma::rdmacm {

int attach(CmId& id, rdma_event_channel* channel) {
  if (channel == nullptr) {
    id.synchronous = true;
    id.own_channel = to_channel(rdma_create_event_channel());
    if (id.own_channel == nullptr) return errno;
    channel = &id.own_channel->ibv;
  }
  id.channel = to_channel(channel);
  id.ibv.channel = id.synchronous ? nullptr : channel;
  std::lock_guard lock(id.channel->mutex);
  ++id.channel->ids;
  return 0;
}

void detach(CmId& id) {
  {
    std::unique_lock lock(id.channel->mutex);
    // rdma_destroy_id(3): "the user must call rdma_ack_cm_event ... before
    // destroying"; it waits for outstanding events, as rdma-core does. Events
    // still queued (never taken) are dropped here.
    auto& queue = id.channel->queue;
    int dropped = 0;
    for (auto it = queue.begin(); it != queue.end();) {
      if ((*it)->ibv.id == &id.ibv) {
        delete *it;
        it = queue.erase(it);
        --id.events_outstanding;
        ++dropped;
      } else {
        ++it;
      }
    }
    consume_tokens(*id.channel, dropped);
    id.events_acked.wait(lock, [&] { return id.events_outstanding == 0; });
    --id.channel->ids;
  }
  if (id.own_channel != nullptr) rdma_destroy_event_channel(&id.own_channel->ibv);
}

// Gives an id its source address and reserves its port host-wide (address.h).
std::unique_ptr<CmId> new_passive_id(CmId& listener) {
  auto id = std::make_unique<CmId>();
  id->ibv.context = listener.ibv.context;
  id->ibv.ps = listener.ibv.ps;
  id->ibv.qp_type = listener.ibv.qp_type;
  // A request comes in on the device (even to a listener bound to no device).
  id->device = listener.device != nullptr ? listener.device : listener.ibv.verbs;
  id->ibv.verbs = id->device;
  id->ibv.pd = listener.ibv.pd != nullptr ? listener.ibv.pd : Agent::get().default_pd();
  id->ibv.port_num = listener.ibv.port_num;
  id->listener = &listener;
  if (attach(*id, &listener.channel->ibv) != 0) return nullptr;
  id->ibv.channel = listener.ibv.channel;  // a synchronous listener's children are too
  return id;
}

namespace {

// Whether `context` serves loopback addresses: one of its GIDs is one (with
// nothing configured, each process's device is a 127.x.y.z; docs/configuration.md).
bool serves_loopback(ibv_context* context) {
  ibv_port_attr port{};
  if (ibv_query_port(context, 1, &port) != 0) return false;
  for (int index = 0; index < port.gid_tbl_len; ++index) {
    ibv_gid gid{};
    if (ibv_query_gid(context, 1, index, &gid) != 0) continue;
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static constexpr uint8_t kIpv6Loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    if (std::memcmp(gid.raw, kMapped, 12) == 0 && gid.raw[12] == 127) return true;  // 127.0.0.0/8
    if (std::memcmp(gid.raw, kIpv6Loopback, 16) == 0) return true;
  }
  return false;
}

}  // namespace

int bind_id(CmId& id, const sockaddr* addr) {
  if (id.state != IdState::kIdle) return EINVAL;
  auto address = IpEndpoint::from(addr);
  if (!address) return addr == nullptr ? EINVAL : EAFNOSUPPORT;
  if (!is_local(*address)) return EADDRNOTAVAIL;
  ibv_context* context = Agent::get().context();
  if (context == nullptr) return ENODEV;
  int fd = reserve_port(id.ibv.ps, *address);
  if (fd < 0) return errno;
  id.port_reservation = fd;
  Agent::get().watch_reservation(fd);
  std::memcpy(&id.ibv.route.addr.src_storage, &address->storage, address->length());
  id.device = context;
  id.ibv.port_num = 1;
  id.state = IdState::kAddrBound;
  // The kernel's rdma_cm takes a loopback address as it takes the wildcard
  // (cma.c, cma_any_addr): the id gets no device until a request or
  // rdma_resolve_addr gives it one. libfabric's verbs provider relies on it: it
  // binds "localhost" and, finding no device, names the interface's address as
  // the endpoint's (verbs_info.c, vrb_fill_addr); given one, it would publish
  // 127.0.0.1 and its peers on other hosts would connect to themselves. A
  // device that serves loopback (nothing configured) keeps binding it.
  if (address->is_loopback() && !serves_loopback(context)) return 0;
  id.ibv.verbs = context;
  // rdma-core gives an id its device's PD as soon as it has a device, and
  // programs use it (pyverbs makes its external QPs on `id->pd`).
  id.ibv.pd = Agent::get().default_pd();
  return 0;
}

}  // namespace softrdma::rdmacm

SOFTRDMA_CM_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** out,
                                      void* context, rdma_port_space ps) {
  return guard([&] {
    if (out == nullptr || !known_port_space(ps)) return EINVAL;
    auto id = std::make_unique<CmId>();
    id->ibv.context = context;
    id->ibv.ps = ps;
    id->ibv.qp_type = qp_type_of(ps);
    if (int err = attach(*id, channel)) return err;
    *out = &id.release()->ibv;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_destroy_id(rdma_cm_id* ibv) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId* id = to_id(ibv);
    {
      // A connection still up is ended for the peer too (IBA 12.9.6: the
      // consumer's destroy sends a DREQ), then the id leaves the agent's tables.
      Agent& agent = Agent::get();
      std::lock_guard lock(agent.cm_mutex());
      if (id->conn.state == CmState::kEstablished) {
        Mad dreq = format_dreq(*id);
        agent.send(*id, dreq, false);
      }
      agent.forget(*id);
      // A QP the application keeps past its id is the application's alone.
      agent.disown_qp(*id);
    }
    if (id->ibv.event != nullptr) rdma_ack_cm_event(id->ibv.event);
    if (id->port_reservation >= 0) Agent::get().forget_reservation(id->port_reservation);
    detach(*id);
    delete id;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_bind_addr(rdma_cm_id* ibv, sockaddr* addr) {
  return guard([&] { return ibv == nullptr ? EINVAL : bind_id(*to_id(ibv), addr); });
}

// rdma_listen(3): an id not bound yet listens on the IPv4 wildcard with an
// ephemeral port, as the kernel binds it.
SOFTRDMA_CM_EXPORT int rdma_listen(rdma_cm_id* ibv, int backlog) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    if (id.state == IdState::kIdle) {
      sockaddr_in any{};
      any.sin_family = AF_INET;
      if (int err = bind_id(id, reinterpret_cast<sockaddr*>(&any))) return err;
    }
    if (id.state != IdState::kAddrBound) return EINVAL;
    Agent& agent = Agent::get();
    std::lock_guard lock(agent.cm_mutex());
    id.backlog = backlog > 0 ? backlog : 1024;  // the agent's thread reads it (cm_receive.cc)
    if (is_iwarp(id)) {
      // A TCP listener beside the port's reservation (iwarp_cm.h).
      if (int err = agent.iwarp().listen(id, id.backlog)) return err;
      id.state = IdState::kListening;
      return 0;
    }
    if (int err = agent.open_mad_port()) return err;
    if (int err = agent.add_listener(id)) return err;
    id.state = IdState::kListening;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) {
  if (id == nullptr) return 0;
  auto address = IpEndpoint::from(&id->route.addr.src_addr);
  return address ? htons(address->port()) : 0;
}

SOFTRDMA_CM_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) {
  if (id == nullptr) return 0;
  auto address = IpEndpoint::from(&id->route.addr.dst_addr);
  return address ? htons(address->port()) : 0;
}

// rdma_migrate_id(3): moves the id (and its future events) to another channel;
// it waits until the id's events on the old channel are acknowledged.
SOFTRDMA_CM_EXPORT int rdma_migrate_id(rdma_cm_id* ibv, rdma_event_channel* channel) {
  return guard([&] {
    if (ibv == nullptr) return EINVAL;
    CmId& id = *to_id(ibv);
    if (id.synchronous && channel == nullptr) return 0;
    CmId moved_from;  // the old attachment, released like a destroyed id's
    moved_from.channel = id.channel;
    moved_from.own_channel = id.own_channel;
    {
      std::unique_lock lock(id.channel->mutex);
      id.events_acked.wait(lock, [&] { return id.events_outstanding == 0; });
    }
    id.synchronous = false;
    id.own_channel = nullptr;
    if (int err = attach(id, channel)) return err;
    detach(moved_from);
    return 0;
  });
}

// rdma_set_option(3): the options softrdma honours. RDMA_OPTION_ID_TOS and
// RDMA_OPTION_ID_REUSEADDR are accepted (the TOS is not yet the packets' IP TOS);
// the others are for InfiniBand paths or specific devices.
SOFTRDMA_CM_EXPORT int rdma_set_option(rdma_cm_id* ibv, int level, int optname, void* optval,
                                       size_t optlen) {
  return guard([&] {
    if (ibv == nullptr || optval == nullptr) return EINVAL;
    if (level != RDMA_OPTION_ID) return ENOSYS;
    switch (optname) {
      case RDMA_OPTION_ID_TOS: return optlen == sizeof(uint8_t) ? 0 : EINVAL;
      case RDMA_OPTION_ID_ACK_TIMEOUT: {
        // The QP's ACK timeout (IBA 4.096 µs × 2^n) instead of the path's.
        if (optlen != sizeof(uint8_t)) return EINVAL;
        const uint8_t value = *static_cast<const uint8_t*>(optval);
        if (value > 31) return EINVAL;
        to_id(ibv)->ack_timeout = value;
        return 0;
      }
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY: return optlen == sizeof(int) ? 0 : EINVAL;
      default: return ENOSYS;
    }
  });
}

SOFTRDMA_CM_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  ibv_context* context = Agent::get().context();
  auto** list = static_cast<ibv_context**>(calloc(2, sizeof(ibv_context*)));
  if (list == nullptr) return nullptr;
  list[0] = context;
  if (num_devices != nullptr) *num_devices = context != nullptr ? 1 : 0;
  return list;
}

SOFTRDMA_CM_EXPORT void rdma_free_devices(ibv_context** list) { free(list); }
