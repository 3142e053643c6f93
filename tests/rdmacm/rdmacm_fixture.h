// Helpers of rdmacm_test: addresses and event waits through the public API.
#pragma once

#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <string>

namespace softrdma::rdmacm::testing {

inline sockaddr_in ipv4(const char* text, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, text, &a.sin_addr);
  return a;
}

inline sockaddr* as_sockaddr(sockaddr_in& a) { return reinterpret_cast<sockaddr*>(&a); }

inline std::string gid_text(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

// The next event of `channel` within a hang guard of 30 s (no timing is asserted).
inline rdma_cm_event* next_event(rdma_event_channel* channel) {
  pollfd p{channel->fd, POLLIN, 0};
  if (poll(&p, 1, 30000) != 1) return nullptr;
  rdma_cm_event* event = nullptr;
  return rdma_get_cm_event(channel, &event) == 0 ? event : nullptr;
}

// A port no rdma_cm id of the host holds now: bound, then released.
inline uint16_t free_port() {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP) != 0) return 0;
  sockaddr_in any = ipv4("127.0.0.1", 0);
  uint16_t port = 0;
  if (rdma_bind_addr(id, as_sockaddr(any)) == 0) port = ntohs(rdma_get_src_port(id));
  rdma_destroy_id(id);
  return port;
}

}  // namespace softrdma::rdmacm::testing
