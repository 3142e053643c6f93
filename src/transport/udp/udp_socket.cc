#include "transport/udp/udp_socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/udp.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

// linux/in6.h has it; glibc's netinet/in.h (2.36) does not.
#ifndef IPV6_MULTICAST_ALL
#define IPV6_MULTICAST_ALL 29
#endif

namespace softrdma::transport::udp {

std::optional<Gid> parse_address(const std::string& text) {
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return wire::gid_from_ipv4(ntohl(v4.s_addr));
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    Gid gid;
    std::memcpy(gid.data(), v6.s6_addr, gid.size());
    return gid;
  }
  return std::nullopt;
}

std::string address_to_string(const Gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (wire::gid_is_ipv4(gid)) {
    in_addr v4{htonl(wire::gid_to_ipv4(gid))};
    inet_ntop(AF_INET, &v4, text, sizeof text);
  } else {
    in6_addr v6{};
    std::memcpy(v6.s6_addr, gid.data(), gid.size());
    inet_ntop(AF_INET6, &v6, text, sizeof text);
  }
  return text;
}

socklen_t write_socket_address(const Gid& gid, uint16_t port, sockaddr_in6& out) {
  if (wire::gid_is_ipv4(gid)) {
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    v4.sin_addr.s_addr = htonl(wire::gid_to_ipv4(gid));
    static_assert(sizeof v4 <= sizeof out);
    std::memcpy(&out, &v4, sizeof v4);
    return sizeof v4;
  }
  out = sockaddr_in6{};
  out.sin6_family = AF_INET6;
  out.sin6_port = htons(port);
  std::memcpy(out.sin6_addr.s6_addr, gid.data(), gid.size());
  return sizeof out;
}

SocketAddress to_socket_address(const Gid& gid, uint16_t port) {
  SocketAddress out;
  sockaddr_in6 address;
  out.length = write_socket_address(gid, port, address);
  std::memcpy(&out.storage, &address, out.length);
  return out;
}

bool from_socket_address(const sockaddr_storage& address, Gid& gid, uint16_t& port) {
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    gid = wire::gid_from_ipv4(ntohl(v4->sin_addr.s_addr));
    port = ntohs(v4->sin_port);
    return true;
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    std::memcpy(gid.data(), v6->sin6_addr.s6_addr, gid.size());
    port = ntohs(v6->sin6_port);
    return true;
  }
  return false;
}

int open_udp_socket(bool ipv6) {
  const int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int on = 1;
  int pmtu = ipv6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO;
  const int rc = ipv6 ? setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu)
                      : setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  // IPv6 sockets carry IPv6 only: an IPv4-mapped peer must go through an IPv4 socket,
  // whose header (and so ICRC) is IPv4.
  if (rc == 0 && ipv6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  if (rc != 0) {
    const int error = errno;
    close(fd);
    return -error;
  }
  return fd;
}

int bind_socket(int fd, const Gid& gid, uint16_t port, uint32_t scope_id) {
  SocketAddress address = to_socket_address(gid, port);
  if (scope_id != 0 && address.storage.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&address.storage)->sin6_scope_id = scope_id;
  return bind(fd, address.get(), address.length) == 0 ? 0 : errno;
}

bool port_held(const Gid& gid, uint16_t port) {
  const int fd = open_udp_socket(!wire::gid_is_ipv4(gid));
  if (fd < 0) return false;
  const int rc = bind_socket(fd, gid, port);
  close(fd);
  return rc == EADDRINUSE;
}

bool find_link_local(uint32_t ipv4, Gid& link_local, uint32_t& ifindex) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  std::string name;  // the interface holding ipv4
  for (ifaddrs* it = list; it != nullptr && name.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
    if (ntohl(in->sin_addr.s_addr) == ipv4) name = it->ifa_name;
  }
  bool found = false;
  for (ifaddrs* it = list; it != nullptr && !found && !name.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET6 || name != it->ifa_name)
      continue;
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
    Gid gid;
    std::memcpy(gid.data(), in6->sin6_addr.s6_addr, gid.size());
    if (!is_link_local(gid)) continue;
    link_local = gid;
    ifindex = if_nametoindex(it->ifa_name);
    found = ifindex != 0;
  }
  freeifaddrs(list);
  return found;
}

uint32_t interface_of(const Gid& gid) {
  const bool v4 = wire::gid_is_ipv4(gid);
  const bool loopback = v4 ? (wire::gid_to_ipv4(gid) >> 24) == 127
                           : gid == Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t index = 0;
  for (ifaddrs* it = list; it != nullptr && index == 0; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    bool match = false;
    if (loopback) {
      match = (it->ifa_flags & IFF_LOOPBACK) != 0;
    } else if (v4 && it->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
      match = ntohl(in->sin_addr.s_addr) == wire::gid_to_ipv4(gid);
    } else if (!v4 && it->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      match = std::memcmp(in6->sin6_addr.s6_addr, gid.data(), gid.size()) == 0;
    }
    if (match) index = if_nametoindex(it->ifa_name);
  }
  freeifaddrs(list);
  return index;
}

void set_multicast_interface(int fd, bool ipv6, uint32_t ifindex) {
  int on = 1;
  if (ipv6) {
    int index = int(ifindex);
    setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &index, sizeof index);
    setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &on, sizeof on);
    return;
  }
  ip_mreqn request{};
  request.imr_ifindex = int(ifindex);
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &request, sizeof request);
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &on, sizeof on);
}

// SO_REUSEADDR is safe here, unlike on the unicast socket: a datagram to a group
// is delivered to every socket bound to it (the kernel clones it for each,
// __udp4_lib_mcast_deliver), never balanced between them, and only members get
// it (IP_MULTICAST_ALL off: not even a group joined by another socket).
int open_group_socket(const Gid& group, uint16_t port, uint32_t ifindex) {
  const bool ipv6 = !wire::gid_is_ipv4(group);
  const int fd = open_udp_socket(ipv6);
  if (fd < 0) return fd;
  int on = 1, off = 0;
  int rc = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (rc == 0) rc = bind_socket(fd, group, port, ipv6 ? ifindex : 0) == 0 ? 0 : -1;
  if (rc == 0 && ipv6) {
    ipv6_mreq request{};
    std::memcpy(request.ipv6mr_multiaddr.s6_addr, group.data(), group.size());
    request.ipv6mr_interface = ifindex;
    rc = setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &request, sizeof request);
    if (rc == 0) setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &off, sizeof off);
  } else if (rc == 0) {
    ip_mreqn request{};
    request.imr_multiaddr.s_addr = htonl(wire::gid_to_ipv4(group));
    request.imr_ifindex = int(ifindex);
    rc = setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &request, sizeof request);
    if (rc == 0) setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &off, sizeof off);
  }
  if (rc != 0) {
    const int error = errno;
    close(fd);
    return -error;
  }
  return fd;
}

int set_receive_buffer(int fd, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  int effective = 0;
  socklen_t length = sizeof effective;
  getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &effective, &length);
  return effective;
}

void set_send_buffer(int fd, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

void set_ecn_capable(int fd, bool ipv6) {
  int ect0 = wire::kEcnEct0;  // DSCP 0
  if (ipv6) setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &ect0, sizeof ect0);
  else setsockopt(fd, IPPROTO_IP, IP_TOS, &ect0, sizeof ect0);
}

void report_ecn(int fd, bool ipv6) {
  int on = 1;
  if (ipv6) setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof on);
  else setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
}

void enable_packet_info(int fd, bool ipv6) {
  int on = 1;
  if (ipv6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on);
  } else {
    setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on);
  }
}

bool enable_gro(int fd) {
  int on = 1;
  return setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
}

void enable_receive_timestamps(int fd) {
  int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
}

void accept_zero_udp_checksum(int fd) {
  int on = 1;
  setsockopt(fd, SOL_UDP, UDP_NO_CHECK6_RX, &on, sizeof on);
}

// An address a device cannot be: the wildcard (binding it takes port 4791 on every
// address of the host), multicast, or the limited broadcast address. Null: usable.
const char* unusable_address(const Gid& gid) {
  if (wire::gid_is_ipv4(gid)) {
    const uint32_t a = wire::gid_to_ipv4(gid);
    if (a == 0) return "the wildcard address";
    if ((a >> 28) == 0xe) return "a multicast address";
    if (a == 0xffffffff) return "the broadcast address";
    return nullptr;
  }
  if (std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; }))
    return "the wildcard address";
  if (gid[0] == 0xff) return "a multicast address";
  return nullptr;
}


std::optional<Gid> parse_device_address(const std::string& text, std::string& error) {
  const std::optional<Gid> gid = parse_address(text);
  if (!gid) {
    error = "softrdma: '" + text + "' is not an IPv4 or IPv6 address (SOFTRDMA_ADDR)";
    return std::nullopt;
  }
  if (const char* why = unusable_address(*gid)) {
    error = "softrdma: SOFTRDMA_ADDR " + text + " is " + why +
            ": a device needs one address of this host's own (it would otherwise take "
            "UDP port 4791 on every address, and no other softrdma process could open its "
            "device)";
    return std::nullopt;
  }
  return gid;
}

}  // namespace softrdma::transport::udp
