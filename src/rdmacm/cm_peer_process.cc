// A peer process of this host that dies ends its connections at once
// (docs/decisions/rdma-cm.md, "A peer that dies"). The kernel's rdma_cm knows
// when a process dies because it holds the process's files; softrdma's agents
// use the kernel for the same: each publishes an abstract AF_UNIX socket named
// after its GIDs, and an agent whose connection is established connects to the
// one named after its peer's GID (on an address several processes share,
// docs/decisions/host-rnic.md, after the GID and the peer's slot, which the top
// bits of its Communication ID carry). A connection to it exists only if the peer is a
// process of this host (this network namespace: abstract names are per
// namespace), and the socket names that process exactly (SO_PEERPIDFD: a pidfd,
// immune to PID reuse). The pidfd becomes readable when the process exits, and
// each of its established connections ends as its DREQ would have ended it:
// QP to Error, DISCONNECTED. No DREQ goes out: nobody is left to answer it.
// Another host's peer is found by the QP instead (cm_peer_loss.cc).
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <set>

#include "rdmacm/agent.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_format.h"
#include "rdmacm/verbs_private.h"
#include "wire/cm_route.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (asm-generic/socket.h)
#endif

namespace softrdma::rdmacm {
namespace {

// "softrdma-rdmacm/alive/<GID>" in the abstract namespace; on a shared address
// (`slot` not 0), "softrdma-rdmacm/alive/<GID>/<slot>".
sockaddr_un liveness_name(const ibv_gid& gid, uint32_t slot, socklen_t& length) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  const int n =
      slot == 0
          ? std::snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "softrdma-rdmacm/alive/%s", text)
          : std::snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "softrdma-rdmacm/alive/%s/%u",
                          text, slot);
  length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
  return un;
}

// A pidfd of the process of this host that holds `gid` (with `slot`, on a shared
// address), or -1 (another host, or a softrdma without liveness sockets). The
// kernel records the listener's credentials at listen(2): the connection needs no
// answer.
int pidfd_of_holder(const ibv_gid& gid, uint32_t slot, pid_t& pid) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  socklen_t length = 0;
  sockaddr_un name = liveness_name(gid, slot, length);
  int pidfd = -1;
  ucred cred{};
  socklen_t cred_length = sizeof cred;
  if (connect(fd, reinterpret_cast<sockaddr*>(&name), length) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_length) == 0) {
    pid = cred.pid;
    socklen_t pidfd_length = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pidfd_length) != 0)
      pidfd = int(syscall(SYS_pidfd_open, pid, 0));  // before 6.5: by PID, just checked
  }
  close(fd);
  return pidfd;
}

}  // namespace

// Under mutex_, with the context just opened: one socket per distinct GID.
void Agent::publish_liveness() {
  // On an address other processes share (docs/decisions/host-rnic.md) a GID names
  // no one process: the name carries this process's slot, as its Comm IDs do.
  const uint32_t slot = softrdma_cm_id_slot(context_);
  ibv_port_attr port{};
  if (ibv_query_port(context_, 1, &port) != 0) return;
  std::set<std::array<uint8_t, 16>> named;  // std::array: GCC 12 warns on vector<uint8_t>'s <=>
  for (int index = 0; index < port.gid_tbl_len; ++index) {
    ibv_gid gid{};
    if (ibv_query_gid(context_, 1, index, &gid) != 0) continue;
    std::array<uint8_t, 16> raw;
    std::memcpy(raw.data(), gid.raw, raw.size());
    if (raw == std::array<uint8_t, 16>{} || !named.insert(raw).second) continue;
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    socklen_t length = 0;
    sockaddr_un name = liveness_name(gid, slot, length);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&name), length) == 0 && listen(fd, 64) == 0 &&
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) == 0) {
      liveness_fds_.insert(fd);
    } else if (fd >= 0) {
      close(fd);
    }
  }
}

// A liveness socket's connections are taken and closed: the asker had what it
// wanted when its connect returned.
bool Agent::serve_liveness_socket(int fd) {
  {
    std::lock_guard lock(mutex_);
    if (!liveness_fds_.contains(fd)) return false;
  }
  int connection;
  while ((connection = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0) close(connection);
  return true;
}

// Under cm_mutex_: a peer process exited.
bool Agent::serve_pidfd(int fd) {
  if (!pidfd_peers_.contains(fd)) return false;
  on_peer_exit(fd);
  return true;
}

// Under cm_mutex_.
void Agent::watch_peer(CmId& id) {
  pid_t pid = 0;
  // A peer alone on its address publishes by GID; one that shares it, by GID and
  // the slot its Communication ID carries (wire/cm_route.h).
  int pidfd = pidfd_of_holder(id.conn.remote_gid, 0, pid);
  const uint32_t slot = wire::comm_id_slot(id.conn.remote_comm_id);
  if (pidfd < 0 && slot != 0) {
    pidfd = pidfd_of_holder(id.conn.remote_gid, slot, pid);
    // The socket may be a former holder's of the slot, still exiting (its name
    // not yet released, the newcomer's not bound): only the slot's holder now,
    // as the address's registry says, is the peer (when this process shares the
    // address; a peer's registry on another address is not ours to read).
    const bool our_address = std::memcmp(id.conn.remote_gid.raw,
                                         id.ibv.route.addr.addr.ibaddr.sgid.raw, 16) == 0;
    const int owner = our_address ? softrdma_cm_slot_owner(id.ibv.verbs, slot) : 0;
    if (pidfd >= 0 && owner != 0 && owner != pid) {
      close(pidfd);
      pidfd = -1;
    }
  }
  if (pidfd < 0) return;
  if (pid == getpid() || peer_pidfds_.contains(pid)) {
    close(pidfd);
    if (pid != getpid()) id.conn.peer_pid = pid;
    return;
  }
  epoll_event event{};
  event.events = EPOLLIN;  // a pidfd is readable once its process has exited
  event.data.fd = pidfd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pidfd, &event) != 0) {
    close(pidfd);
    return;
  }
  peer_pidfds_[pid] = pidfd;
  pidfd_peers_[pidfd] = pid;
  id.conn.peer_pid = pid;
}

// Under cm_mutex_, on the agent's thread: the peer exited; its pidfd is closed.
// Only here: a pidfd closed by another thread could still be in the batch of
// events the agent is serving, under a number the process may reuse. So a peer
// process is watched from its first connection until it exits (one pidfd per
// live peer process), not only while connections to it last.
void Agent::unwatch_peer(pid_t pid) {
  auto it = peer_pidfds_.find(pid);
  if (it == peer_pidfds_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second, nullptr);
  close(it->second);
  pidfd_peers_.erase(it->second);
  peer_pidfds_.erase(it);
}

// Under cm_mutex_: the kernel would now send the dead process's DREQs; each of
// its established connections ends as on_dreq ends one (IBA 12.9.6): QP to
// Error (the survivor's work is flushed), DISCONNECTED.
void Agent::on_peer_exit(int pidfd) {
  const pid_t pid = pidfd_peers_[pidfd];
  for (auto& [comm_id, id] : connections_) {
    Connection& c = id->conn;
    if (c.peer_pid != pid) continue;
    c.peer_pid = 0;
    if (c.state != CmState::kEstablished) continue;
    c.state = CmState::kClosed;
    c.lost = true;
    qp_to_error(*id);
    deliver(*id, RDMA_CM_EVENT_DISCONNECTED, 0);
  }
  unwatch_peer(pid);
}

}  // namespace softrdma::rdmacm
