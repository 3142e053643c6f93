#include "rdmacm/address.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace softrdma::rdmacm {

std::optional<IpEndpoint> IpEndpoint::from(const sockaddr* addr) {
  if (addr == nullptr) return std::nullopt;
  IpEndpoint e;
  if (addr->sa_family == AF_INET) {
    std::memcpy(&e.storage, addr, sizeof(sockaddr_in));
    return e;
  }
  if (addr->sa_family != AF_INET6) return std::nullopt;
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
  if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
    auto* in = reinterpret_cast<sockaddr_in*>(&e.storage);
    in->sin_family = AF_INET;
    in->sin_port = in6->sin6_port;
    std::memcpy(&in->sin_addr, &in6->sin6_addr.s6_addr[12], 4);
    return e;
  }
  std::memcpy(&e.storage, addr, sizeof(sockaddr_in6));
  return e;
}

uint16_t IpEndpoint::port() const {
  return family() == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port)
                             : ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

void IpEndpoint::set_port(uint16_t port) {
  if (family() == AF_INET)
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

bool IpEndpoint::is_wildcard() const {
  if (family() == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
}

bool IpEndpoint::is_loopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
}

ibv_gid IpEndpoint::as_gid() const {
  ibv_gid gid{};
  if (family() == AF_INET) {
    gid.raw[10] = gid.raw[11] = 0xff;
    std::memcpy(&gid.raw[12], &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, 4);
  } else {
    std::memcpy(gid.raw, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, 16);
  }
  return gid;
}

socklen_t IpEndpoint::length() const {
  return family() == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

namespace {

bool same_address(const IpEndpoint& a, const sockaddr* b) {
  auto other = IpEndpoint::from(b);
  if (!other || other->family() != a.family()) return false;
  ibv_gid x = a.as_gid(), y = other->as_gid();
  return std::memcmp(x.raw, y.raw, 16) == 0;
}

std::string address_text(const IpEndpoint& e) {
  if (e.is_wildcard()) return "*";
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = e.family() == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&e.storage)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&e.storage)->sin6_addr);
  inet_ntop(e.family(), raw, text, sizeof text);
  return text;
}

// "softrdma-rdmacm/<ps>/<port>/<address or *>" in the abstract namespace.
sockaddr_un reservation_name(rdma_port_space ps, uint16_t port, const std::string& address,
                             socklen_t& length) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  int n = std::snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "softrdma-rdmacm/%x/%u/%s",
                        unsigned(ps), unsigned(port), address.c_str());
  length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
  return un;
}

int connect_to(rdma_port_space ps, uint16_t port, const std::string& address) {
  socklen_t length;
  sockaddr_un un = reservation_name(ps, port, address, length);
  // Non-blocking: a holder whose backlog is full (stuck, or being probed by many)
  // answers EAGAIN at once instead of blocking the caller.
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&un), length) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

bool held(rdma_port_space ps, uint16_t port, const std::string& address) {
  int fd = connect_to(ps, port, address);
  if (fd < 0) return errno == EAGAIN;  // a full backlog is still a holder
  close(fd);
  return true;
}

// TCP's rule, which the kernel's rdma_cm follows: a wildcard and a specific
// address of one port overlap. Checked after our own bind, so of two racing
// binds at least one sees the other (both may fail; never both succeed).
bool overlaps(rdma_port_space ps, const IpEndpoint& address) {
  if (!address.is_wildcard()) return held(ps, address.port(), "*");
  // A wildcard: is any specific address of this host bound on the port? Only the
  // loopback and interface addresses can be; ask each.
  if (held(ps, address.port(), address.family() == AF_INET ? "127.0.0.1" : "::1")) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    auto e = IpEndpoint::from(i->ifa_addr);
    if (e && e->family() == address.family()) found = held(ps, address.port(), address_text(*e));
  }
  freeifaddrs(list);
  return found;
}

int bind_reservation(rdma_port_space ps, const IpEndpoint& address) {
  socklen_t length;
  sockaddr_un un = reservation_name(ps, address.port(), address_text(address), length);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&un), length) != 0 || listen(fd, 64) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  if (overlaps(ps, address)) {
    close(fd);
    errno = EADDRINUSE;
    return -1;
  }
  return fd;
}

}  // namespace

bool is_local(const IpEndpoint& address) {
  if (address.is_wildcard() || address.is_loopback()) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next)
    found = i->ifa_addr != nullptr && same_address(address, i->ifa_addr);
  freeifaddrs(list);
  return found;
}

namespace {

// Whether a TCP socket of this namespace holds `address`'s port now (a listener,
// or a connection's local end). An iWARP listener later binds the same port in
// TCP, so an ephemeral pick skips such ports rather than failing in rdma_listen.
bool tcp_port_taken(const IpEndpoint& address) {
  const int fd = socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool taken = bind(fd, address.get(), address.length()) != 0 && errno == EADDRINUSE;
  close(fd);
  return taken;
}

}  // namespace

int reserve_port(rdma_port_space ps, IpEndpoint& address) {
  if (address.port() != 0) return bind_reservation(ps, address);
  // The kernel's default ephemeral range (ip_local_port_range), from a random start.
  constexpr uint32_t kFirst = 32768, kCount = 61000 - 32768;
  uint32_t start = 0;
  if (getrandom(&start, sizeof start, 0) != sizeof start) start = uint32_t(getpid());
  for (uint32_t i = 0; i < kCount; ++i) {
    address.set_port(uint16_t(kFirst + (start + i) % kCount));
    if (tcp_port_taken(address)) continue;
    int fd = bind_reservation(ps, address);
    if (fd >= 0 || errno != EADDRINUSE) return fd;
  }
  address.set_port(0);
  errno = EADDRINUSE;
  return -1;
}

std::optional<ibv_gid> gid_of_local_owner(rdma_port_space ps, const IpEndpoint& destination) {
  int fd = connect_to(ps, destination.port(), address_text(destination));
  if (fd < 0) fd = connect_to(ps, destination.port(), "*");
  if (fd < 0) return std::nullopt;
  const ibv_gid asked = destination.as_gid();
  ibv_gid answer{};
  // The owner's agent answers at once; a dead or stuck owner gives no answer, and
  // the timeout keeps rdma_resolve_addr from hanging on it.
  fcntl(fd, F_SETFL, 0);
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  bool ok = send(fd, asked.raw, 16, MSG_NOSIGNAL) == 16 && recv(fd, answer.raw, 16, 0) == 16;
  close(fd);
  if (!ok) return std::nullopt;
  return answer;
}

void answer_gid_request(int connection, ibv_context* context) {
  ibv_gid asked{};
  if (recv(connection, asked.raw, 16, MSG_DONTWAIT) == 16) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    std::memcpy(&in6.sin6_addr, asked.raw, 16);
    auto peer = IpEndpoint::from(reinterpret_cast<sockaddr*>(&in6));
    if (auto mine = local_gid_for(context, *peer))
      send(connection, mine->first.raw, 16, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  close(connection);
}

std::optional<std::pair<ibv_gid, int>> local_gid_for(ibv_context* context,
                                                      const IpEndpoint& peer) {
  ibv_port_attr port{};
  if (ibv_query_port(context, 1, &port) != 0) return std::nullopt;
  const ibv_gid wanted = peer.as_gid();
  std::optional<std::pair<ibv_gid, int>> first_of_family;
  for (int index = 0; index < port.gid_tbl_len; ++index) {
    ibv_gid gid{};
    if (ibv_query_gid(context, 1, index, &gid) != 0) continue;
    static constexpr uint8_t kZero[16] = {};
    if (std::memcmp(gid.raw, kZero, 16) == 0) continue;
    // The entry that is the address itself (the peer is this host), else the
    // first of the peer's family: IPv4-mapped for IPv4, plain IPv6 otherwise.
    if (std::memcmp(gid.raw, wanted.raw, 16) == 0) return std::pair{gid, index};
    const bool mapped = gid.raw[10] == 0xff && gid.raw[11] == 0xff &&
                        std::memcmp(gid.raw, kZero, 10) == 0;
    if (!first_of_family && mapped == (peer.family() == AF_INET)) first_of_family = {gid, index};
  }
  return first_of_family;
}

}  // namespace softrdma::rdmacm
