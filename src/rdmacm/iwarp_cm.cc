// The agent's side of rdma_cm over iWARP (iwarp_cm.h): listening sockets, the
// MPA request of each new connection, active connects and their MPA reply, the
// start-frame deadlines, and the QPs whose stream ended.
#include "rdmacm/iwarp_cm.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rdmacm/address.h"
#include "rdmacm/cm.h"
#include "rdmacm/verbs_private.h"

namespace softrdma::rdmacm {

namespace {

bool logging() {
  static const bool on = [] {
    const char* v = std::getenv("SOFTRDMA_RDMACM_LOG");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

void log_line(const char* what, int detail) {
  if (logging()) std::fprintf(stderr, "softrdma rdmacm iwarp: %s (%d)\n", what, detail);
}

// The kernel's cma_iw_handler: how an iWARP connect's status becomes an event.
rdma_cm_event_type event_for(int status) {
  switch (status) {
    case 0: return RDMA_CM_EVENT_ESTABLISHED;
    case -ECONNRESET:
    case -ECONNREFUSED: return RDMA_CM_EVENT_REJECTED;
    case -ETIMEDOUT: return RDMA_CM_EVENT_UNREACHABLE;
    default: return RDMA_CM_EVENT_CONNECT_ERROR;
  }
}

// The id's addresses are the socket's (siw reports getname_local/peer with the
// connection's events; the kernel's cma copies them into the id).
void take_addresses(CmId& id, int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_length = sizeof local, peer_length = sizeof peer;
  rdma_addr& addr = id.ibv.route.addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) == 0)
    if (auto e = IpEndpoint::from(reinterpret_cast<sockaddr*>(&local)))
      std::memcpy(&addr.src_storage, &e->storage, e->length());
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0)
    if (auto e = IpEndpoint::from(reinterpret_cast<sockaddr*>(&peer)))
      std::memcpy(&addr.dst_storage, &e->storage, e->length());
}

// The new id a request to `listener` makes (rdma_cm(7)), on its channel.
std::unique_ptr<CmId> passive_id(CmId& listener, int fd) {
  auto id = new_passive_id(listener);
  if (!id) return nullptr;
  take_addresses(*id, fd);
  id->state = IdState::kConnecting;
  return id;
}

}  // namespace

int iwarp_attach(ibv_qp* qp, const wire::iwarp::IwarpHandoff& handoff) {
  if (qp == nullptr) {
    close(handoff.fd);
    return EINVAL;
  }
  return softrdma_iwarp_attach(qp, &handoff);
}

// ---- the epoll table ----

void IwarpCm::watch(int fd, uint32_t events, Socket socket) {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  sockets_[fd] = std::move(socket);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0)
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event);
}

void IwarpCm::unwatch(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  sockets_.erase(fd);
}

void IwarpCm::retire(int fd) {
  auto it = sockets_.find(fd);
  if (it == sockets_.end()) {
    close(fd);  // never in the epoll
    return;
  }
  shutdown(fd, SHUT_RDWR);  // the peer (and a listener's port) learn it now
  it->second = Socket{};    // kRetired: closed by the thread after its batch
  it->second.deadline = Clock::time_point::min();
  wake();
}

void IwarpCm::wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

bool IwarpCm::serve(int fd) {
  auto it = sockets_.find(fd);
  if (it == sockets_.end()) return false;
  Socket& socket = it->second;
  switch (socket.role) {
    case Role::kListener: on_listener(fd, *socket.id); break;
    case Role::kPendingRequest: on_pending_request(fd, socket); break;
    case Role::kActive: on_active(fd, *socket.id); break;
    case Role::kRetired: break;
  }
  return true;
}

int IwarpCm::next_timeout_ms(Clock::time_point now) const {
  int wait = -1;
  for (const auto& [fd, socket] : sockets_) {
    if (socket.deadline == Clock::time_point::max()) continue;
    // A retired socket's deadline is time_point::min() (due at once): subtracted
    // from now it would overflow, so the difference is taken only ahead of now.
    int ms = 0;
    if (socket.deadline > now)
      ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(socket.deadline - now).count()) + 1;
    if (wait < 0 || ms < wait) wait = ms;
  }
  return wait;
}

// After the thread's batch of events: retired sockets close; a request not
// whole in time is dropped (siw: 5 s); an unanswered request fails the connect
// as UNREACHABLE with -ETIMEDOUT (siw's CONNECT_REPLY -ETIMEDOUT after 10 s).
void IwarpCm::on_timeouts(Clock::time_point now) {
  for (auto it = sockets_.begin(); it != sockets_.end();) {
    const int fd = it->first;
    Socket& socket = (it++)->second;
    if (socket.deadline > now) continue;
    switch (socket.role) {
      case Role::kRetired:
        unwatch(fd);
        close(fd);
        break;
      case Role::kPendingRequest:
        if (socket.id != nullptr) {  // not orphaned by its listener's destroy
          ++counters_.timed_out;
          log_line("no MPA request in time; closed", fd);
        }
        unwatch(fd);
        close(fd);
        break;
      case Role::kActive: fail(*socket.id, -ETIMEDOUT); break;
      case Role::kListener: break;
    }
  }
}

// ---- passive: accept, read the request, deliver CONNECT_REQUEST ----

void IwarpCm::on_listener(int fd, CmId& listener) {
  for (;;) {
    const int connection = accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (connection < 0) return;
    const int one = 1;  // siw's default (siw_tcp_nagle off): start frames and FPDUs go at once
    setsockopt(connection, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Socket socket;
    socket.role = Role::kPendingRequest;
    socket.id = &listener;
    socket.request = std::make_unique<iwarp::StartFrameReader>(/*reply=*/false);
    socket.deadline = Clock::now() + iwarp::kRequestTimeout;
    watch(connection, EPOLLIN | EPOLLRDHUP, std::move(socket));
    on_pending_request(connection, sockets_[connection]);  // it may be here already
  }
}

void IwarpCm::on_pending_request(int fd, Socket& socket) {
  const iwarp::ReadStatus status = socket.request->read(fd);
  if (status == iwarp::ReadStatus::kNeedMore) return;
  CmId* listener = socket.id;
  std::unique_ptr<iwarp::StartFrameReader> request = std::move(socket.request);
  unwatch(fd);  // `socket` is gone from here on
  if (status != iwarp::ReadStatus::kDone || listener == nullptr) return refuse(fd, status);
  if (request->frame().markers) {
    // RFC 5044 §7.1: a request that needs markers is answered with R (siw does
    // the same); softrdma never uses them.
    ++counters_.markers;
    log_line("MPA request with markers; rejected", fd);
    std::array<uint8_t, iwarp::kMaxFrameBytes> out;
    iwarp::send_frame(fd, std::span(out).first(iwarp::write_reject(*request, {}, out)));
    close(fd);
    return;
  }
  if (listener->pending_requests >= listener->backlog) {
    ++counters_.over_backlog;
    std::array<uint8_t, iwarp::kMaxFrameBytes> out;
    iwarp::send_frame(fd, std::span(out).first(iwarp::write_reject(*request, {}, out)));
    close(fd);
    return;
  }
  admit(fd, *listener, std::move(request));
}

void IwarpCm::refuse(int fd, iwarp::ReadStatus why) {
  switch (why) {
    case iwarp::ReadStatus::kBadKey: ++counters_.not_mpa; break;
    case iwarp::ReadStatus::kBadFrame: ++counters_.bad_frame; break;
    case iwarp::ReadStatus::kTooLong: ++counters_.too_long; break;
    case iwarp::ReadStatus::kClosed: ++counters_.closed_early; break;
    case iwarp::ReadStatus::kDone:       // its listener is gone
    case iwarp::ReadStatus::kNeedMore: break;
  }
  log_line(iwarp::to_string(why), fd);
  close(fd);
}

// RFC 6581 §5: the request's IRD is what we may issue, its ORD what we must
// serve; rdma_cm presents them swapped (responder_resources = the peer's ORD),
// as siw and the kernel's cma do.
void IwarpCm::admit(int fd, CmId& listener, std::unique_ptr<iwarp::StartFrameReader> request) {
  std::unique_ptr<CmId> id = passive_id(listener, fd);
  if (id == nullptr) return refuse(fd, iwarp::ReadStatus::kDone);
  IwarpConnection& c = id->iwarp;
  c.phase = IwarpPhase::kRequestReceived;
  c.fd = fd;  // out of the epoll: nothing more is read until the answer
  c.peer_frame = *request;
  ++listener.pending_requests;
  ids_.insert(id.get());
  const auto& e = c.peer_frame.frame().enhanced;
  CmId& mine = *id.release();  // the application's from now on (rdma_destroy_id)
  deliver_iwarp(mine, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &mine.iwarp.peer_frame,
                e ? e->ord : 0, e ? e->ird : 0);
}

// ---- active: TCP connect, the request, the reply ----

void IwarpCm::on_active(int fd, CmId& id) {
  if (id.iwarp.phase == IwarpPhase::kConnecting) return on_connected(fd, id);
  if (id.iwarp.phase == IwarpPhase::kAwaitingReply) return on_reply(fd, id);
}

void IwarpCm::on_connected(int fd, CmId& id) {
  int err = 0;
  socklen_t length = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &length) != 0) err = errno;
  if (err == EINPROGRESS || err == EALREADY) return;
  if (err != 0) return fail(id, -err);  // refused: REJECTED, as iw_cm reports it
  IwarpConnection& c = id.iwarp;
  take_addresses(id, fd);
  if (int e = iwarp::send_frame(fd, std::span(c.request).first(c.request_bytes)))
    return fail(id, -e);
  c.phase = IwarpPhase::kAwaitingReply;
  Socket& socket = sockets_[fd];
  socket.deadline = Clock::now() + iwarp::kReplyTimeout;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event);
}

// RFC 5044 §7.1 / RFC 6581 §5: the reply accepts (the engine takes the socket,
// ESTABLISHED with its private data) or rejects (R: REJECTED with its private
// data and siw's status, -ECONNRESET); one that breaks our request ends it as
// siw's initiator does (CONNECT_ERROR, -EINVAL).
void IwarpCm::on_reply(int fd, CmId& id) {
  IwarpConnection& c = id.iwarp;
  const iwarp::ReadStatus status = c.peer_frame.read(fd);
  if (status == iwarp::ReadStatus::kNeedMore) return;
  if (status == iwarp::ReadStatus::kClosed) return fail(id, -ECONNRESET);
  if (status != iwarp::ReadStatus::kDone) {
    log_line(iwarp::to_string(status), fd);
    return fail(id, -EINVAL);
  }
  if (c.peer_frame.frame().reject) return fail(id, -ECONNRESET, &c.peer_frame);
  ibv_device_attr device{};
  ibv_query_device(id.ibv.verbs, &device);
  const auto agreed = iwarp::settle(c.offer, c.peer_frame, uint16_t(device.max_qp_rd_atom));
  if (!agreed) {
    log_line("MPA reply breaks the request", fd);
    return fail(id, -EINVAL, &c.peer_frame);
  }
  unwatch(fd);  // the engine's from here on, open or closed
  c.fd = -1;
  c.agreed = *agreed;
  wire::iwarp::IwarpHandoff handoff;
  handoff.fd = fd;
  handoff.crc = agreed->crc;
  handoff.initiator = true;
  handoff.rtr = agreed->rtr;
  handoff.ird = agreed->ird;
  handoff.ord = agreed->ord;
  if (int err = iwarp_attach(id.ibv.qp, handoff)) {
    c.phase = IwarpPhase::kClosed;
    qp_to_error(id);
    return deliver_iwarp(id, RDMA_CM_EVENT_CONNECT_ERROR, -err, nullptr, 0, 0);
  }
  c.phase = IwarpPhase::kEstablished;
  deliver_iwarp(id, RDMA_CM_EVENT_ESTABLISHED, 0, &c.peer_frame, agreed->ird, agreed->ord);
}

// The connect failed: its socket closes (the agent's thread, or one never
// watched), the QP goes to Error as rdma-core's REJECTED handling moves it, and
// the event is the kernel's for the status (event_for).
void IwarpCm::fail(CmId& id, int status, const iwarp::StartFrameReader* reply) {
  IwarpConnection& c = id.iwarp;
  if (c.fd >= 0) {
    unwatch(c.fd);
    close(c.fd);
    c.fd = -1;
  }
  c.phase = IwarpPhase::kClosed;
  qp_to_error(id);
  deliver_iwarp(id, event_for(status), status, reply, 0, 0);
}

// The engine moved an established connection's QP to Error: its TCP stream
// ended (peer FIN or RST) or failed. As siw's peer close under RDMA mode
// (IW_CM_EVENT_DISCONNECT, then CLOSE), rdma_cm's DISCONNECTED, once; lost
// unless the peer closed the stream in order (a FIN).
bool IwarpCm::qp_failed(uint32_t qpn) {
  for (CmId* id : ids_) {
    if (id->ibv.qp == nullptr || id->ibv.qp->qp_num != qpn) continue;
    if (id->iwarp.phase != IwarpPhase::kEstablished) return true;
    id->iwarp.phase = IwarpPhase::kClosed;
    id->iwarp.lost = softrdma_qp_closed_by_peer(id->ibv.qp) != 1;
    deliver_iwarp(*id, RDMA_CM_EVENT_DISCONNECTED, 0, nullptr, 0, 0);
    return true;
  }
  return false;
}

}  // namespace softrdma::rdmacm
