// IP addresses and ports for rdma_cm ids (docs/decisions/rdma-cm.md, "Addressing").
//
// A port is reserved host-wide (per network namespace, as the kernel's rdma_cm
// port spaces are) by binding an abstract AF_UNIX socket named after the port
// space, port and address: the kernel makes the bind exclusive and releases it
// when the process dies, so two servers on one port get EADDRINUSE with no
// daemon and no file to clean up. The reservation's socket also answers other
// processes of the host that want the GID of whoever bound it (the agent's
// thread serves it): each softrdma process has a loopback GID of its own, and
// a client naming 127.0.0.1:port must reach the process that listens there.
#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <utility>

namespace softrdma::rdmacm {

// An IP address and port, IPv4-mapped IPv6 addresses folded to IPv4.
struct IpEndpoint {
  sockaddr_storage storage{};

  static std::optional<IpEndpoint> from(const sockaddr* addr);
  int family() const { return storage.ss_family; }
  uint16_t port() const;  // host order
  void set_port(uint16_t port);
  bool is_wildcard() const;
  bool is_loopback() const;
  // ::ffff:a.b.c.d for IPv4, the address itself for IPv6 (IBA A17.4.5.1: a
  // RoCEv2 GID is the IP address).
  ibv_gid as_gid() const;
  socklen_t length() const;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// An address of this host (a wildcard, a loopback address, or an interface's).
bool is_local(const IpEndpoint& address);

// Reserves (ps, address, port) for an id; port 0 picks a free ephemeral port and
// writes it into `address`. Returns the reservation's listening socket, or -1 with
// errno EADDRINUSE (taken, also when a wildcard and a specific address of one
// port would overlap, as TCP's bind rules say) or another errno.
int reserve_port(rdma_port_space ps, IpEndpoint& address);

// The GID of the process that reserved (ps, destination) — the address itself or
// the wildcard of its port — asked through its reservation socket. Nothing when
// no process of this host holds it.
std::optional<ibv_gid> gid_of_local_owner(rdma_port_space ps, const IpEndpoint& destination);

// The reservation side: answers one request on an accepted connection with the
// GID of this process's device for the address it names.
void answer_gid_request(int connection, ibv_context* context);

// This process's GID for reaching `peer` (same IP family), and its table index.
std::optional<std::pair<ibv_gid, int>> local_gid_for(ibv_context* context,
                                                      const IpEndpoint& peer);

}  // namespace softrdma::rdmacm
