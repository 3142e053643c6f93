#include "transport/tcp/tcp_streams.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

#include "transport/udp/udp_socket.h"

namespace softrdma::transport::tcp {

namespace {

int open_stream_socket(const Gid& address) {
  const int family = wire::gid_is_ipv4(address) ? AF_INET : AF_INET6;
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  return fd >= 0 ? fd : -errno;
}

void set_no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int bind_to(int fd, const Gid& address, uint16_t port) {
  const udp::SocketAddress at = udp::to_socket_address(address, port);
  return ::bind(fd, at.get(), at.length) == 0 ? 0 : -errno;
}

uint16_t bound_port(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof storage;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) return 0;
  Gid ignored{};
  uint16_t port = 0;
  udp::from_socket_address(storage, ignored, port);
  return port;
}

}  // namespace

// A connection's socket resets if the process dies (SIGKILL, a crash, exit
// without a disconnect): the kernel then closes it with no linger, which sends a
// RST instead of the FIN of an orderly close. The peer's engine can so tell "the
// peer went" (ECONNRESET: its QP's connection was lost) from "the peer closed"
// (a FIN: the graceful teardown; DDP's stream teardown is graceful or abortive,
// as the LLP's, RFC 5041), as a RoCE peer tells a lost peer from a DREQ
// (rsockets.md "A peer that dies").
// close() takes the option off before ending a stream itself: every end it
// chooses is a FIN (tcp_streams_close.cc).
void TcpStreams::reset_if_abandoned(int fd, bool on) {
  const linger option{on ? 1 : 0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, sizeof option);
}

// MPA (RFC 5044) has no liveness of its own: a connection ends as its TCP stream
// does, and TCP left alone never notices a peer that went silent while the
// connection was idle: a FIN lost just before the peer's host stopped (a VM
// powered off under 2 % loss) left rping's server waiting for DISCONNECTED for
// ever. An RNIC's TCP probes an idle connection (Chelsio's iw_cxgb4 asks its
// offloaded connections for KEEP_ALIVE), and softrdma's RoCE QPs probe an idle
// peer (engine/rc/liveness.h): iWARP's
// streams do it with the kernel's keepalive, and bound unacknowledged bytes the
// same, so a dead peer ends the stream (kClosed, ETIMEDOUT) and the QP is lost.
void TcpStreams::watch_peer(int fd) const {
  if (liveness_.idle_s <= 0) return;
  const int on = 1, idle = liveness_.idle_s, probes = std::max(liveness_.probes, 1);
  const unsigned bound_ms = unsigned(liveness_.bound_ms());
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  // tcp(7): with keepalive on, TCP_USER_TIMEOUT also decides when unanswered
  // probes end the connection, as it decides for unacknowledged bytes.
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &bound_ms, sizeof bound_ms);
}

std::unique_ptr<TcpStreams> TcpStreams::open(const Gid& address, std::string& why,
                                             CloseTiming timing, PeerLiveness liveness) {
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) {
    why = std::string("epoll_create1: ") + std::strerror(errno);
    return nullptr;
  }
  const int timer_fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTimerTag;
  if (timer_fd < 0 || ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_fd, &ev) != 0) {
    why = std::string("timerfd: ") + std::strerror(errno);
    if (timer_fd >= 0) ::close(timer_fd);
    ::close(epoll_fd);
    return nullptr;
  }
  return std::unique_ptr<TcpStreams>(
      new TcpStreams(address, epoll_fd, timer_fd, timing, liveness));
}

// Streams still open close at once; those closing gracefully get to finish.
TcpStreams::~TcpStreams() {
  for (auto& [port, fd] : listeners_) ::close(fd);
  for (auto& [id, c] : connections_) {
    reset_if_abandoned(c.fd, false);  // the device was closed on purpose: a FIN
    ::close(c.fd);
  }
  listeners_.clear();
  connections_.clear();
  finish_closing();
  ::close(timer_fd_);
  ::close(epoll_fd_);
}

int TcpStreams::listen(uint16_t port) {
  if (port != 0 && listeners_.contains(port)) return -EADDRINUSE;
  const int fd = open_stream_socket(address_);
  if (fd < 0) return fd;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int err = bind_to(fd, address_, port);
  if (err == 0 && ::listen(fd, SOMAXCONN) != 0) err = -errno;
  const uint16_t bound = err == 0 ? bound_port(fd) : 0;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerTag | bound;
  if (err == 0 && ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) err = -errno;
  if (err != 0) {
    ::close(fd);
    return err;
  }
  listeners_[bound] = fd;
  return bound;
}

void TcpStreams::stop_listening(uint16_t port) {
  auto it = listeners_.find(port);
  if (it == listeners_.end()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second, nullptr);
  ::close(it->second);
  listeners_.erase(it);
}

StreamId TcpStreams::add(int fd, bool connecting, const Gid& peer, uint16_t peer_port) {
  while (next_id_ == kNoStream || connections_.contains(next_id_)) ++next_id_;
  const StreamId id = next_id_++;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (connecting ? uint32_t(EPOLLOUT) : 0u);
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return kNoStream;
  }
  reset_if_abandoned(fd, true);
  watch_peer(fd);
  connections_[id] = Connection{fd, connecting, peer, peer_port};
  return id;
}

// From this transport's address (the process's own, as its datagrams' source),
// so that the peer sees the address the GID table lists.
StreamId TcpStreams::connect(const Gid& dst, uint16_t port, int& err) {
  const int fd = open_stream_socket(address_);
  if (fd < 0) {
    err = -fd;
    return kNoStream;
  }
  set_no_delay(fd);
  const udp::SocketAddress to = udp::to_socket_address(dst, port);
  int result = bind_to(fd, address_, 0);
  if (result == 0 && ::connect(fd, to.get(), to.length) != 0 && errno != EINPROGRESS)
    result = -errno;
  if (result != 0) {
    ::close(fd);
    err = -result;
    return kNoStream;
  }
  const StreamId id = add(fd, /*connecting=*/true, dst, port);
  if (id == kNoStream) err = ENOMEM;
  return id;
}

StreamId TcpStreams::adopt(int fd, int& err) {
  sockaddr_storage from{};
  socklen_t length = sizeof from;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&from), &length) != 0) {
    err = errno;
    ::close(fd);
    return kNoStream;
  }
  set_no_delay(fd);
  Gid peer{};
  uint16_t peer_port = 0;
  udp::from_socket_address(from, peer, peer_port);
  const StreamId id = add(fd, /*connecting=*/false, peer, peer_port);
  if (id == kNoStream) err = ENOMEM;
  return id;
}

void TcpStreams::watch(StreamId id, const Connection& c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (c.want_writable ? uint32_t(EPOLLOUT) : 0u);
  ev.data.u64 = id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void TcpStreams::want_writable(StreamId stream, bool want) {
  auto it = connections_.find(stream);
  if (it == connections_.end() || it->second.connecting || it->second.want_writable == want)
    return;
  it->second.want_writable = want;
  want ? ++wanting_room_ : --wanting_room_;
  watch(stream, it->second);
}

size_t TcpStreams::accept_all(uint16_t port, int fd, std::span<StreamEvent> events) {
  size_t n = 0;
  while (n < events.size()) {
    sockaddr_storage from{};
    socklen_t length = sizeof from;
    const int conn = ::accept4(fd, reinterpret_cast<sockaddr*>(&from), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (conn < 0) break;  // EAGAIN: none left (others: the client gave up)
    set_no_delay(conn);
    Gid peer{};
    uint16_t peer_port = 0;
    udp::from_socket_address(from, peer, peer_port);
    const StreamId id = add(conn, /*connecting=*/false, peer, peer_port);
    if (id != kNoStream) events[n++] = StreamEvent{id, StreamEvent::kAccepted, port, 0};
  }
  return n;
}

StreamEvent TcpStreams::settle_connect(StreamId id, Connection& c) {
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  if (error != 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);  // reported once
    return StreamEvent{id, StreamEvent::kClosed, c.peer_port, error};
  }
  c.connecting = false;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  return StreamEvent{id, StreamEvent::kConnected, c.peer_port, 0};
}

StreamEvent TcpStreams::writable(StreamId id, Connection& c) {
  if (c.want_writable) --wanting_room_;
  c.want_writable = false;
  watch(id, c);
  return StreamEvent{id, StreamEvent::kWritable, c.peer_port, 0};
}

size_t TcpStreams::poll(std::span<StreamEvent> events) {
  expire_closing();
  std::array<epoll_event, 64> ready;
  const int max = int(std::min(events.size(), ready.size()));
  const int got = max > 0 ? ::epoll_wait(epoll_fd_, ready.data(), max, 0) : 0;
  size_t n = 0;
  for (int i = 0; i < got && n < events.size(); ++i) {
    const uint64_t tag = ready[i].data.u64;
    if (tag == kTimerTag) {
      uint64_t expirations;
      if (::read(timer_fd_, &expirations, sizeof expirations) > 0) expire_closing();
      continue;
    }
    if ((tag & kClosingTag) != 0) {
      drain_closing(int(uint32_t(tag)));
      continue;
    }
    if ((tag & kListenerTag) != 0) {
      const uint16_t port = uint16_t(tag);
      auto it = listeners_.find(port);
      if (it != listeners_.end()) n += accept_all(port, it->second, events.subspan(n));
      continue;
    }
    auto it = connections_.find(StreamId(tag));
    if (it == connections_.end()) continue;
    Connection& c = it->second;
    const uint32_t what = ready[i].events;
    if (c.connecting) {
      events[n++] = settle_connect(it->first, c);
    } else if ((what & EPOLLERR) != 0) {
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &length);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);  // reported once
      events[n++] = StreamEvent{it->first, StreamEvent::kClosed, c.peer_port,
                                error != 0 ? error : ECONNRESET};
    } else if ((what & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) != 0) {
      events[n++] = StreamEvent{it->first, StreamEvent::kReadable, c.peer_port, 0};
      if ((what & EPOLLOUT) != 0 && c.want_writable && n < events.size())
        events[n++] = writable(it->first, c);
    } else if ((what & EPOLLOUT) != 0 && c.want_writable) {
      events[n++] = writable(it->first, c);
    }
  }
  return n;
}

ssize_t TcpStreams::read(StreamId stream, std::span<uint8_t> into) {
  auto it = connections_.find(stream);
  if (it == connections_.end()) return -EBADF;
  if (it->second.connecting) return 0;
  const ssize_t n = ::recv(it->second.fd, into.data(), into.size(), MSG_DONTWAIT);
  if (n > 0) return n;
  if (n == 0) return into.empty() ? 0 : kEndOfStream;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
}

ssize_t TcpStreams::write(StreamId stream, std::span<const iovec> parts) {
  auto it = connections_.find(stream);
  if (it == connections_.end()) return -EBADF;
  if (it->second.connecting) return -ENOTCONN;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(parts.data());
  msg.msg_iovlen = std::min<size_t>(parts.size(), IOV_MAX);
  // MSG_NOSIGNAL: a peer's close is an error here, not a SIGPIPE for the process.
  const ssize_t n = ::sendmsg(it->second.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return n;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
}

bool TcpStreams::peer_of(StreamId stream, Gid& address, uint16_t& port) const {
  auto it = connections_.find(stream);
  if (it == connections_.end()) return false;
  address = it->second.peer;
  port = it->second.peer_port;
  return true;
}

std::string TcpStreams::describe() const {
  return "TCP " + udp::address_to_string(address_) + " (" + std::to_string(listeners_.size()) +
         " listening, " + std::to_string(connections_.size()) + " connections)";
}

}  // namespace softrdma::transport::tcp
