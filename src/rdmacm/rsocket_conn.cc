// rsockets' connections (rsocket(7)): rsocket, rbind, rlisten, raccept,
// rconnect, rshutdown, rclose, rgetpeername, rgetsockname. Each rsocket has an
// rdma_cm id on an event channel of its own, and its number is that channel's
// fd, as in rdma-core: distinct from every other open descriptor. The
// connection is the Communication Manager's (RDMA_PS_TCP), with rs_conn_data as
// the REQ's and REP's private data.
#include <poll.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "rdmacm/cm.h"
#include "rdmacm/rsocket.h"

namespace softrdma::rdmacm::rsock {
namespace {

std::mutex table_mutex;
std::unordered_map<int, RSocket*>& table() {
  static auto* t = new std::unordered_map<int, RSocket*>;  // outlives exit's destructors
  return *t;
}

// An rsocket around a new id on a new channel; nullptr with errno.
RSocket* make_socket(int domain, rdma_cm_id* id) {
  auto* s = new (std::nothrow) RSocket;
  if (s == nullptr) return errno = ENOMEM, nullptr;
  s->domain = domain;
  s->channel = rdma_create_event_channel();
  if (s->channel == nullptr) {
    delete s;
    return nullptr;
  }
  // Waits are poll(2) on the fd, so that rpoll and blocking calls share one path.
  fcntl(s->channel->fd, F_SETFL, fcntl(s->channel->fd, F_GETFL) | O_NONBLOCK);
  int ret = id == nullptr ? rdma_create_id(s->channel, &s->id, s, RDMA_PS_TCP)
                          : rdma_migrate_id(id, s->channel);
  if (ret != 0) {
    int err = errno;
    if (id != nullptr) rdma_destroy_id(id);
    rdma_destroy_event_channel(s->channel);
    delete s;
    errno = err;
    return nullptr;
  }
  if (id != nullptr) {
    s->id = id;
    id->context = s;
  }
  s->fd = s->channel->fd;
  insert(s);
  return s;
}

void destroy_socket(RSocket* s) {
  remove(s);
  forget_keepalive(*s);
  free_endpoint(*s);
  if (s->id != nullptr) rdma_destroy_id(s->id);
  if (s->channel != nullptr) rdma_destroy_event_channel(s->channel);
  delete s;
}

void inherit(RSocket& s, const RSocket& from) {
  s.sbuf_size = from.sbuf_size;
  s.rbuf_size = from.rbuf_size;
  s.sq_size = from.sq_size;
  s.rq_size = from.rq_size;
  s.sq_inline = from.sq_inline;
  s.target_iomap_size = from.target_iomap_size;
  s.fs_flags = from.fs_flags;
  s.fd_flags = from.fd_flags;
  s.nodelay = from.nodelay;
}

// The errno a failed connection shows (connect(2)): a REJ is a refusal.
int connect_errno(const rdma_cm_event& ev) {
  switch (ev.event) {
    case RDMA_CM_EVENT_REJECTED:
      return ECONNREFUSED;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return ev.status == -ETIMEDOUT ? ETIMEDOUT : EHOSTUNREACH;
    default:
      return ECONNABORTED;
  }
}

// The REQ's or REP's parameters: our rs_conn_data as private data, one RDMA
// READ each way (rsockets use none), and the most patient retries (the CM
// takes from them what its message carries).
rdma_conn_param conn_param(const ConnData& data) {
  rdma_conn_param param{};
  param.private_data = &data;
  param.private_data_len = sizeof data;
  param.flow_control = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  param.responder_resources = 1;
  param.initiator_depth = 1;
  return param;
}

int send_connect(RSocket& s) {
  if (int err = setup_endpoint(s)) return fail(err);
  ConnData data;
  format_conn_data(s, data);
  rdma_conn_param param = conn_param(data);
  return rdma_connect(s.id, &param);
}

void established(RSocket& s) {
  s.phase = Phase::kConnected;
  s.readable = s.writable = true;
}

// One CM event of a connecting or accepting socket: 0, or -1 with errno.
int on_event(RSocket& s, const rdma_cm_event& ev) {
  switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      s.phase = Phase::kResolvingRoute;
      return rdma_resolve_route(s.id, 2000);
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      s.phase = Phase::kConnecting;
      return send_connect(s);
    case RDMA_CM_EVENT_ESTABLISHED:
      if (s.phase == Phase::kConnecting) {
        ConnData data{};
        if (ev.param.conn.private_data == nullptr || ev.param.conn.private_data_len < sizeof data)
          return fail(EPROTO);
        std::memcpy(&data, ev.param.conn.private_data, sizeof data);
        if (data.version != 1) return fail(ENOTSUP);
        save_conn_data(s, data);
      }
      established(s);
      return 0;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
    case RDMA_CM_EVENT_DISCONNECTED:
    default:
      return fail(connect_errno(ev));
  }
}

}  // namespace

RSocket* lookup(int fd) {
  std::lock_guard lock(table_mutex);
  auto it = table().find(fd);
  return it == table().end() ? nullptr : it->second;
}
void insert(RSocket* s) {
  std::lock_guard lock(table_mutex);
  table()[s->fd] = s;
}
void remove(RSocket* s) {
  std::lock_guard lock(table_mutex);
  table().erase(s->fd);
}

// Takes the socket's CM events until it is connected or failed; with
// `nonblock`, -1 with EINPROGRESS while it is neither.
int drive_connect(RSocket& s, bool nonblock) {
  while (s.opening()) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(s.channel, &ev) != 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (nonblock) return fail(EINPROGRESS);
      pollfd p{s.channel->fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
      continue;
    }
    int ret = on_event(s, *ev);
    int err = errno;
    rdma_ack_cm_event(ev);
    if (ret != 0) {
      s.phase = Phase::kConnectError;
      s.err = err;
      return fail(err);
    }
  }
  if (s.phase == Phase::kConnectError) return fail(s.err != 0 ? s.err : ECONNREFUSED);
  return 0;
}

}  // namespace softrdma::rdmacm::rsock

using namespace softrdma::rdmacm::rsock;

// rsocket(3): SOCK_STREAM over AF_INET/AF_INET6 (SOCK_NONBLOCK, SOCK_CLOEXEC).
// Datagram rsockets are not offered (EOPNOTSUPP; docs/decisions/rsockets.md).
SOFTRDMA_CM_EXPORT int rsocket(int domain, int type, int protocol) {
  const int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT);
  if (kind == SOCK_DGRAM) return fail(EOPNOTSUPP);
  if (kind != SOCK_STREAM || (protocol != 0 && protocol != IPPROTO_TCP)) return fail(EPROTONOSUPPORT);
  RSocket* s = make_socket(domain, nullptr);
  if (s == nullptr) return -1;
  s->fs_flags = (type & SOCK_NONBLOCK) != 0 ? O_NONBLOCK : 0;
  s->fd_flags = (type & SOCK_CLOEXEC) != 0 ? FD_CLOEXEC : 0;
  return s->fd;
}

SOFTRDMA_CM_EXPORT int rbind(int fd, const sockaddr* addr, socklen_t len) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  if (addr == nullptr || len < sizeof(sockaddr_in)) return fail(EINVAL);
  std::lock_guard lock(s->mutex);
  if (s->phase != Phase::kInit) return fail(EINVAL);
  if (rdma_bind_addr(s->id, const_cast<sockaddr*>(addr)) != 0) return -1;
  s->phase = Phase::kBound;
  return 0;
}

SOFTRDMA_CM_EXPORT int rlisten(int fd, int backlog) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  if (s->phase == Phase::kListening) return 0;
  if (s->phase != Phase::kBound && s->phase != Phase::kInit) return fail(EINVAL);
  if (rdma_listen(s->id, backlog) != 0) return -1;
  s->phase = Phase::kListening;
  return 0;
}

namespace {

// Accepts one connection request: a socket for its id, with our rs_conn_data
// in the REP. The request's id is rejected if it cannot be served.
RSocket* accept_request(RSocket& listener, rdma_cm_id* id, const ConnData& creq) {
  RSocket* s = make_socket(listener.domain, id);
  if (s == nullptr) {
    return nullptr;  // make_socket destroyed the id; the peer's REQ times out
  }
  inherit(*s, listener);
  const int err = creq.version != 1 ? ECONNABORTED : setup_endpoint(*s);
  if (err != 0) {
    rdma_reject(s->id, nullptr, 0);
    destroy_socket(s);
    return errno = err, nullptr;
  }
  save_conn_data(*s, creq);
  ConnData cresp;
  format_conn_data(*s, cresp);
  rdma_conn_param param = conn_param(cresp);
  s->phase = Phase::kAccepting;
  if (rdma_accept(s->id, &param) != 0) {
    int err = errno;
    destroy_socket(s);
    return errno = err, nullptr;
  }
  return s;
}

}  // namespace

// raccept(3): the next connection request on the listener's channel, accepted.
// A blocking listener waits for the request and for the connection's RTU.
SOFTRDMA_CM_EXPORT int raccept(int fd, sockaddr* addr, socklen_t* addrlen) {
  RSocket* l = lookup(fd);
  if (l == nullptr) return fail(EBADF);
  std::unique_lock lock(l->mutex);
  if (l->phase != Phase::kListening) return fail(EINVAL);
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(l->channel, &ev) != 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if ((l->fs_flags & O_NONBLOCK) != 0) return fail(EAGAIN);
      pollfd p{l->channel->fd, POLLIN, 0};
      lock.unlock();
      int ret = poll(&p, 1, -1);
      lock.lock();
      if (ret < 0 && errno != EINTR) return -1;
      continue;
    }
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(ev);
      continue;
    }
    rdma_cm_id* id = ev->id;
    ConnData creq{};
    if (ev->param.conn.private_data != nullptr && ev->param.conn.private_data_len >= sizeof creq)
      std::memcpy(&creq, ev->param.conn.private_data, sizeof creq);
    rdma_ack_cm_event(ev);
    RSocket* s = accept_request(*l, id, creq);
    if (s == nullptr) continue;  // that request failed; the next one may not
    lock.unlock();
    {
      std::lock_guard slock(s->mutex);
      if ((s->fs_flags & O_NONBLOCK) == 0 && drive_connect(*s, false) != 0) {
        destroy_socket(s);
        lock.lock();
        continue;
      }
    }
    if (addr != nullptr && addrlen != nullptr) rgetpeername(s->fd, addr, addrlen);
    return s->fd;
  }
}

// rconnect(3): a non-blocking socket answers EINPROGRESS and finishes in rpoll
// (POLLOUT) or in its next call; rgetsockopt(SO_ERROR) tells how it went.
SOFTRDMA_CM_EXPORT int rconnect(int fd, const sockaddr* addr, socklen_t len) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  const bool nonblock = (s->fs_flags & O_NONBLOCK) != 0;
  switch (s->phase) {
    case Phase::kInit:
    case Phase::kBound:
      if (addr == nullptr || len < sizeof(sockaddr_in)) return fail(EINVAL);
      if (rdma_resolve_addr(s->id, nullptr, const_cast<sockaddr*>(addr), 2000) != 0) return -1;
      s->phase = Phase::kResolvingAddr;
      break;
    case Phase::kConnected:
      return 0;
    case Phase::kListening:
      return fail(EINVAL);
    default:
      if (!s->opening()) return fail(s->err != 0 ? s->err : ENOTCONN);
  }
  return drive_connect(*s, nonblock);
}

// rshutdown(3): the peer learns of it in band (kCtrlShutdown, kCtrlDisconnect),
// after which the call waits for every send to complete.
SOFTRDMA_CM_EXPORT int rshutdown(int fd, int how) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
  std::unique_lock lock(s->mutex);
  if (!s->connected()) return s->phase == Phase::kDisconnected ? 0 : fail(ENOTCONN);
  uint32_t ctrl = kCtrlDisconnect;
  if (how == SHUT_RDWR) {
    s->readable = s->writable = false;
  } else if (how == SHUT_WR) {
    s->writable = false;
    ctrl = s->readable ? kCtrlShutdown : kCtrlDisconnect;
  } else {
    s->readable = false;
    if (s->writable) return 0;
  }
  auto slot_free = [](RSocket& r) { return r.ctrl_seqno != r.ctrl_max_seqno || !r.connected(); };
  if (!slot_free(*s) && process_cq(*s, lock, false, slot_free) != 0) return -1;
  int ret = 0;
  if (s->connected()) ret = post_ctrl(*s, ctrl);
  if (s->connected())
    process_cq(*s, lock, false, [](RSocket& r) { return all_sends_done(r) || !r.connected(); });
  return ret;
}

// rclose(3): shuts a connected socket down, then frees it; destroying the id
// ends the connection in the CM (DREQ).
SOFTRDMA_CM_EXPORT int rclose(int fd) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  if (s->connected()) rshutdown(fd, SHUT_RDWR);
  destroy_socket(s);
  return 0;
}

namespace {

int copy_addr(const sockaddr* from, sockaddr* to, socklen_t* len) {
  if (to == nullptr || len == nullptr) return fail(EFAULT);
  const socklen_t size = from->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(to, from, std::min(size, *len));
  *len = size;
  return 0;
}

}  // namespace

SOFTRDMA_CM_EXPORT int rgetpeername(int fd, sockaddr* addr, socklen_t* len) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  if (!s->connected() && s->phase != Phase::kDisconnected) return fail(ENOTCONN);
  return copy_addr(rdma_get_peer_addr(s->id), addr, len);
}

SOFTRDMA_CM_EXPORT int rgetsockname(int fd, sockaddr* addr, socklen_t* len) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  sockaddr* local = rdma_get_local_addr(s->id);
  if (local->sa_family == AF_UNSPEC) {  // not bound yet: the wildcard, port 0
    sockaddr_storage any{};
    any.ss_family = sa_family_t(s->domain);
    return copy_addr(reinterpret_cast<sockaddr*>(&any), addr, len);
  }
  return copy_addr(local, addr, len);
}
