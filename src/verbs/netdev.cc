#include "verbs/netdev.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "wire/ip_udp.h"

namespace softrdma::verbs {

namespace {

bool same_address(const sockaddr* sa, const transport::Gid& gid) {
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET && wire::gid_is_ipv4(gid)) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return ntohl(in->sin_addr.s_addr) == wire::gid_to_ipv4(gid);
  }
  if (sa->sa_family == AF_INET6 && !wire::gid_is_ipv4(gid)) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return std::memcmp(in6->sin6_addr.s6_addr, gid.data(), 16) == 0;
  }
  return false;
}

int interface_mtu(const char* name) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq req{};
  std::strncpy(req.ifr_name, name, IFNAMSIZ - 1);
  const int mtu = ioctl(fd, SIOCGIFMTU, &req) == 0 ? req.ifr_mtu : 0;
  close(fd);
  return mtu;
}

// 127.0.0.0/8 answers on lo even when only 127.0.0.1 is configured on it.
bool is_loopback_gid(const transport::Gid& gid) {
  if (wire::gid_is_ipv4(gid)) return (wire::gid_to_ipv4(gid) >> 24) == 127;
  static const uint8_t kLoopback6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return std::memcmp(gid.data(), kLoopback6, 16) == 0;
}

}  // namespace

Netdev netdev_of(const transport::Gid& gid) {
  Netdev out;
  const bool loopback = is_loopback_gid(gid);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    const bool match = loopback ? (it->ifa_flags & IFF_LOOPBACK) != 0 && it->ifa_addr &&
                                      it->ifa_addr->sa_family == AF_INET
                                : same_address(it->ifa_addr, gid);
    if (!match) continue;
    out.ifindex = if_nametoindex(it->ifa_name);
    out.mtu = interface_mtu(it->ifa_name);
    out.loopback = loopback;
    break;
  }
  freeifaddrs(list);
  return out;
}

ibv_mtu active_mtu_for(const Netdev& netdev) {
  constexpr int kRoceHeadroom = 40 + 8 + 12 + 4 + 28 + 4;
  if (netdev.mtu <= 0) return IBV_MTU_1024;  // unknown: Ethernet's 1500 B
  const int room = netdev.mtu - kRoceHeadroom;
  if (room >= 4096) return IBV_MTU_4096;
  if (room >= 2048) return IBV_MTU_2048;
  if (room >= 1024) return IBV_MTU_1024;
  if (room >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

}  // namespace softrdma::verbs
