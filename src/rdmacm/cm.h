// softrdma's librdmacm.so.1 (issue 8; docs/decisions/rdma-cm.md): the objects
// behind rdma_cma.h's public structs, and the one way out of an exported call.
//
// Each public struct (rdma_event_channel, rdma_cm_id, rdma_cm_event) is the first
// member of the object that owns it, so the pointer an application holds leads
// to the object without a lookup, as in rdma-core.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "rdmacm/connection.h"
#include "rdmacm/iwarp_connection.h"

#define SOFTRDMA_CM_EXPORT extern "C" __attribute__((visibility("default")))

namespace softrdma::rdmacm {

struct CmId;

// An event handed to the application: rdma_cm_event plus the private data it
// points at (IBA 12.6: at most 224 bytes, a DREP/RTU's; an iWARP start frame's
// up to RDMA_MAX_PRIVATE_DATA, 256), freed by rdma_ack_cm_event.
struct Event {
  rdma_cm_event ibv{};
  uint8_t private_data[256]{};
};

// rdma_create_event_channel(3): `fd` is the read end of a pipe that holds one
// byte per queued event, so the application may poll it, make it non-blocking
// (rdma_get_cm_event then answers EAGAIN) and block in read as with the kernel's
// rdma_cm device.
struct EventChannel {
  rdma_event_channel ibv{};
  int write_fd = -1;
  std::mutex mutex;
  std::deque<Event*> queue;  // guarded by mutex
  int ids = 0;               // ids created on it (destroy is EBUSY meanwhile)
  // Set by rdma_destroy_event_channel, which closes only the write end and keeps
  // the object (channel.cc, "A channel read after its destruction").
  std::atomic<bool> destroyed{false};
};

enum class IdState {
  kIdle,           // created
  kConnecting,     // a connection of the Communication Manager (conn.state says where)
  kAddrBound,      // rdma_bind_addr or rdma_resolve_addr gave it a source address
  kAddrResolved,   // rdma_resolve_addr: the destination's GID is known
  kRouteResolved,  // rdma_resolve_route
  kListening,      // rdma_listen
};

// What an rdma_cm_id is.
struct CmId {
  rdma_cm_id ibv{};
  EventChannel* channel = nullptr;
  // rdma_create_id with no channel: calls that would queue an event wait for it
  // instead (rdma_create_ep(3), "synchronous operation").
  bool synchronous = false;
  IdState state = IdState::kIdle;
  // The host-wide reservation of its source port (address.cc), or -1.
  int port_reservation = -1;
  int backlog = 0;
  // A listener's requests delivered and not yet accepted or rejected: at the
  // backlog (rdma_listen(3)), further REQs are rejected, so a flood of REQs
  // cannot grow the process without bound. Under the agent's cm_mutex.
  int pending_requests = 0;
  int sgid_index = 0;     // the local GID the route uses
  // The destination is an address of this host: which process holds its port is
  // asked again at rdma_connect (a server may re-listen between resolve and connect).
  bool local_destination = false;
  // rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT): the QP's ACK timeout, or -1.
  int ack_timeout = -1;
  // ECE: what the application puts in its REQ/REP, and what the peer's carried.
  ibv_ece local_ece{};
  ibv_ece remote_ece{};
  // rdma_join_multicast(3): the groups joined (their MGIDs), under cm_mutex;
  // a send-only full member's QP is not attached (it receives nothing).
  struct Group {
    ibv_gid mgid;
    bool attached;
  };
  std::vector<Group> groups;
  ibv_sa_path_rec path{};
  // The channel of a synchronous id, owned by it.
  EventChannel* own_channel = nullptr;
  // The Communication Manager's connection (cm_protocol.cc), under the agent's
  // cm_mutex: the id is in the agent's tables while conn.local_comm_id != 0.
  Connection conn;
  // On an iWARP device, the connection is TCP and MPA instead (iwarp_cm.cc),
  // under the agent's cm_mutex.
  IwarpConnection iwarp;
  uint64_t service_id = 0;  // a listener's, while it is in the agent's table
  // A passive id's: the service its listener claimed (Agent::settle_services).
  uint64_t listened_service = 0;
  // The device the id is bound to; `ibv.verbs` shows it to the application,
  // except after a bind to a loopback address the device does not serve, which
  // the kernel binds to no device (bind_id in ids.cc).
  ibv_context* device = nullptr;
  CmId* listener = nullptr; // a passive id's listener (CONNECT_REQUEST's listen_id)
  // rdma_create_ep(3) on a passive id: what rdma_get_request makes each new id's QP of.
  ibv_pd* ep_pd = nullptr;
  bool ep_has_qp = false;
  ibv_qp_init_attr ep_qp_attr{};
  // rdma_get_request(3): the new id is synchronous from its rdma_accept on.
  bool synchronous_after_request = false;
  // Events queued or handed out and not yet acknowledged (rdma_destroy_id(3)
  // waits for them). Guarded by the channel's mutex.
  int events_outstanding = 0;
  std::condition_variable events_acked;
};

inline CmId* to_id(rdma_cm_id* id) { return reinterpret_cast<CmId*>(id); }

// An id of an iWARP device (IBV_TRANSPORT_IWARP) connects over TCP and MPA, not
// with CM MADs (docs/decisions/iwarp-cm.md).
inline bool is_iwarp(const CmId& id) {
  const ibv_context* context = id.ibv.verbs != nullptr ? id.ibv.verbs : id.device;
  return context != nullptr && context->device != nullptr &&
         context->device->transport_type == IBV_TRANSPORT_IWARP;
}
inline EventChannel* to_channel(rdma_event_channel* c) {
  return reinterpret_cast<EventChannel*>(c);
}

// librdmacm's convention (rdma_cm(7)): -1 with errno.
inline int fail(int err) {
  errno = err;
  return -1;
}

// Runs `body` (returning 0 or a positive errno) and converts to the -1/errno
// convention; no exception crosses the C ABI (DESIGN.md §1).
template <typename Body>
int guard(Body&& body) noexcept {
  try {
    int err = body();
    return err == 0 ? 0 : fail(err);
  } catch (const std::bad_alloc&) {
    return fail(ENOMEM);
  } catch (...) {
    return fail(EIO);
  }
}

// channel.cc: queue an event for `id` on its channel (the id's outstanding count
// grows; rdma_ack_cm_event shrinks it). Returns the event so a caller may fill
// the parameters before it is queued by `post`.
Event* new_event(CmId& id, rdma_cm_event_type type, int status);
void post(CmId& id, Event* event);
// Takes `count` queued events' bytes out of the channel's pipe, for events
// dropped without being read (rdma_destroy_id).
void consume_tokens(EventChannel& channel, int count);

// ids.cc: puts an id on a channel (null: a private one, and the id is
// synchronous) and takes it off (dropping its queued events, waiting for those
// handed out).
int attach(CmId& id, rdma_event_channel* channel);
void detach(CmId& id);
int bind_id(CmId& id, const sockaddr* addr);
// A connection request's new id (rdma_cm(7)): the listener's context, port space,
// QP type, device, PD and port, on the listener's channel; null when the channel
// takes no more ids.
std::unique_ptr<CmId> new_passive_id(CmId& listener);
// qp.cc: the id's QP to RTR and RTS with what the connection settled (IBA
// 12.7.2), or to Error when the connection ends.
int connect_qp(CmId& id);
void qp_to_error(CmId& id);
// resolve.cc: the id's path from its GIDs (state kRouteResolved).
int fill_route(CmId& id);

// A random 24-bit starting PSN (IBA 9.7.1: any value).
uint32_t random_psn();

// A synchronous id (no channel) waits for its event right away: 0, or the
// event's failure as an errno (rdma_create_ep(3)).
int complete_synchronously(CmId& id);

}  // namespace softrdma::rdmacm
