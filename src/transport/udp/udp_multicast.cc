// Multicast over the UDP transport (docs/decisions/multicast.md). RoCEv2 sends a
// multicast packet to the group's IP address on UDP 4791 (IBA A17.4.5.1, as Linux
// Soft-RoCE does: rxe_mcast.c joins the IP group on the netdev). A socket bound to
// a unicast address never receives multicast, so each group gets a socket of its
// own, bound to the group address and a member on the local address's interface.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::transport {

// Packets to an IPv4 group leave from an IPv4 socket, to an IPv6 one from an IPv6
// socket: this transport's own, or the served link-local one (gid-table.md).
bool UdpTransport::serves_family_of(const Gid& dst) const {
  return wire::gid_is_ipv4(dst) != ipv6_ || (!wire::gid_is_ipv4(dst) && link_local_fd_ >= 0);
}

int UdpTransport::join_group(const Gid& group) {
  if (!wire::gid_is_multicast(group)) return EINVAL;
  if (!serves_family_of(group)) return EOPNOTSUPP;
  if (std::any_of(groups_.begin(), groups_.end(), [&](const Group& g) { return g.gid == group; }))
    return 0;
  // An IPv6 group is joined where IPv6 is served: the link-local socket's
  // interface when this transport's own address is IPv4.
  const uint32_t ifindex =
      !wire::gid_is_ipv4(group) && !ipv6_ ? link_local_ifindex_ : multicast_ifindex_;
  const int fd = udp::open_group_socket(group, port_, ifindex);
  if (fd < 0) return -fd;
  udp::set_receive_buffer(fd, config_.rcvbuf_bytes);
  udp::enable_packet_info(fd, !wire::gid_is_ipv4(group));
  if (!wire::gid_is_ipv4(group)) udp::accept_zero_udp_checksum(fd);
  udp::enable_gro(fd);
  groups_.push_back(Group{group, fd});
  watch(fd);
  return 0;
}

int UdpTransport::leave_group(const Gid& group) {
  auto it = std::find_if(groups_.begin(), groups_.end(),
                         [&](const Group& g) { return g.gid == group; });
  if (it == groups_.end()) return ENOENT;
  const int fd = it->fd;
  groups_.erase(it);
  if (epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  std::erase(rx_fds_, fd);
  // The ring may still hold datagrams read from it: they stay valid (the ring owns
  // its buffers) and are delivered; the engine drops them if no QP is attached.
  close(fd);  // closing the socket leaves the group (the kernel drops its membership)
  return 0;
}

}  // namespace softrdma::transport
