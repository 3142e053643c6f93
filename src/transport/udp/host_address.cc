#include "transport/udp/host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace softrdma::transport::udp {

namespace {

constexpr uint32_t kLoopbackHost = 0x7f000001;  // 127.0.0.1

bool is_loopback(uint32_t ipv4) { return (ipv4 >> 24) == 127; }

// The source address of the default route. Any destination off the host's own
// networks takes that route; connect() on a UDP socket only looks the route up.
uint32_t default_route_source() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in far{};
  far.sin_family = AF_INET;
  far.sin_port = htons(9);                    // discard; nothing is sent
  far.sin_addr.s_addr = htonl(0x08080808);    // a global address, not on any local link
  sockaddr_in chosen{};
  socklen_t length = sizeof chosen;
  uint32_t source = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&far), sizeof far) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&chosen), &length) == 0)
    source = ntohl(chosen.sin_addr.s_addr);
  close(fd);
  return source;
}

std::vector<uint32_t> interface_addresses() {
  std::vector<uint32_t> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_UP) == 0 || (it->ifa_flags & IFF_LOOPBACK) != 0) continue;
    out.push_back(ntohl(reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr.s_addr));
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

uint32_t choose_host_address(uint32_t route_source, const uint32_t* addresses, size_t count) {
  // A default route through loopback (unusual, but possible) names no address
  // another host can reach: an interface's address is better.
  if (route_source != 0 && !is_loopback(route_source)) return route_source;
  for (size_t i = 0; i < count; ++i)
    if (addresses[i] != 0 && !is_loopback(addresses[i])) return addresses[i];
  return kLoopbackHost;
}

std::string host_address() {
  const std::vector<uint32_t> addresses = interface_addresses();
  const uint32_t chosen =
      choose_host_address(default_route_source(), addresses.data(), addresses.size());
  in_addr in{htonl(chosen)};
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &in, text, sizeof text);
  return text;
}

}  // namespace softrdma::transport::udp
