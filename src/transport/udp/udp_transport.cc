#include "transport/udp/udp_transport.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/udp/udp_rx.h"
#include "transport/udp/udp_socket.h"
#include "wire/icrc.h"
#include "wire/opcodes.h"

namespace softrdma::transport {

namespace {

constexpr uint16_t kFirstSourcePort = 0xC000;
constexpr size_t kMinRoceBytes = wire::kBthBytes + wire::kIcrcBytes;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 127.0.0.0 (the network), 127.0.0.1 (what everything else binds) and
// 127.255.255.255 (the broadcast address of lo's 127/8) are never handed out.
bool usable_loopback_host(uint32_t host24) {
  return host24 != 0 && host24 != 1 && host24 != 0xffffff;
}

[[gnu::cold]] std::string port_held_message(const std::string& address, uint16_t port) {
  return "softrdma: UDP port " + std::to_string(port) + " on " + address +
         " is already held by another socket (another softrdma process, or the kernel's "
         "Soft-RoCE/rdma_rxe on this address?). Set SOFTRDMA_ADDR to another local address "
         "(any 127.x.y.z works without set-up), or stop the other user of " + address + ":" +
         std::to_string(port) + ".";
}

[[gnu::cold]] std::string bind_error_message(const std::string& address, uint16_t port,
                                             int error) {
  if (error == EADDRINUSE) return port_held_message(address, port);
  std::string message = "softrdma: cannot bind UDP " + address + ":" + std::to_string(port) +
                        ": " + std::strerror(error);
  if (error == EADDRNOTAVAIL)
    message += " (the address is on no interface of this host; check SOFTRDMA_ADDR)";
  return message;
}

}  // namespace

uint32_t default_loopback_address_for(uint32_t pid, unsigned attempt) {
  // Attempt 0 spells the pid (pid_max is at most 2^22) so `ss -uln` reads naturally.
  uint32_t host = pid & 0xffffff;
  if (attempt != 0) host = uint32_t(splitmix64((uint64_t(pid) << 32) | attempt)) & 0xffffff;
  for (uint32_t salt = 1; !usable_loopback_host(host); ++salt)
    host = uint32_t(splitmix64(uint64_t(host) * 131 + salt)) & 0xffffff;
  return (127u << 24) | host;
}

uint32_t default_loopback_address(unsigned attempt) {
  return default_loopback_address_for(uint32_t(getpid()), attempt);
}

std::unique_ptr<UdpTransport> UdpTransport::open(const UdpConfig& config, std::string& error) {
  if (!config.address.empty()) {
    const std::optional<Gid> gid = udp::parse_device_address(config.address, error);
    if (!gid) return nullptr;
    const int fd = udp::open_udp_socket(!wire::gid_is_ipv4(*gid));
    if (fd < 0) {
      error = std::string("softrdma: cannot open a UDP socket: ") + std::strerror(-fd);
      return nullptr;
    }
    // A shared address: this socket joins the address's group (host-rnic.md).
    const int one = 1;
    if (config.shared != nullptr) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (const int rc = udp::bind_socket(fd, *gid, config.port); rc != 0) {
      close(fd);
      error = bind_error_message(config.address, config.port, rc);
      return nullptr;
    }
    std::unique_ptr<UdpTransport> transport(new UdpTransport(config, fd, *gid));
    transport->serve_link_local();
    return transport;
  }
  if (config.shared != nullptr) {
    error = "softrdma: a shared address must be named";
    return nullptr;
  }
  // Default addressing (DESIGN.md §6): a loopback address of this process's own.
  for (unsigned attempt = 0; attempt < kLoopbackAttempts; ++attempt) {
    const Gid gid = wire::gid_from_ipv4(default_loopback_address(attempt));
    const int fd = udp::open_udp_socket(false);
    if (fd < 0) {
      error = std::string("softrdma: cannot open a UDP socket: ") + std::strerror(-fd);
      return nullptr;
    }
    const int rc = udp::bind_socket(fd, gid, config.port);
    if (rc == 0) return std::unique_ptr<UdpTransport>(new UdpTransport(config, fd, gid));
    close(fd);
    if (rc != EADDRINUSE) {
      error = bind_error_message(udp::address_to_string(gid), config.port, rc);
      return nullptr;
    }
  }
  error = "softrdma: UDP port " + std::to_string(config.port) + " is held on all " +
          std::to_string(kLoopbackAttempts) +
          " loopback addresses tried for this process (is something bound to 0.0.0.0:" +
          std::to_string(config.port) + ", e.g. the kernel's Soft-RoCE?). Set SOFTRDMA_ADDR "
          "to a free local address.";
  return nullptr;
}

UdpTransport::UdpTransport(const UdpConfig& config, int fd, Gid gid)
    : config_(config), rx_fd_(fd), local_gid_(gid), port_(config.port),
      ipv6_(!wire::gid_is_ipv4(gid)),
      rx_(std::make_unique<RxRing>(std::max<size_t>(1, config.rx_ring_packets))),
      port_fds_(std::make_unique<std::array<std::atomic<int>, kSourcePorts>>()),
      counters_(config.counters != nullptr ? *config.counters : own_counters_) {
  for (auto& entry : *port_fds_) entry.store(-1, std::memory_order_relaxed);
  rcvbuf_bytes_ = udp::set_receive_buffer(fd, config.rcvbuf_bytes);
  counters_.rx_buffer_bytes.store(uint64_t(rcvbuf_bytes_), std::memory_order_relaxed);
  udp::set_send_buffer(fd, config.sndbuf_bytes);
  udp::enable_packet_info(fd, ipv6_);
  if (config.ecn) {
    udp::set_ecn_capable(fd, ipv6_);
    udp::report_ecn(fd, ipv6_);
  }
  if (ipv6_) udp::accept_zero_udp_checksum(fd);
  // docs/decisions/gso-gro.md: a run of segments of one flow arrives as one datagram.
  gro_ = udp::enable_gro(fd);
  udp::enable_receive_timestamps(fd);
  multicast_ifindex_ = udp::interface_of(gid);
  udp::set_multicast_interface(fd, ipv6_, multicast_ifindex_);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  watch(fd);
  if (config.shared != nullptr && config.shared->handover != nullptr)
    watch_in_epoll(config.shared->handover->fd());
}

// A receive socket more: read by rx_burst, and in rx_fd()'s epoll set.
void UdpTransport::watch(int fd) {
  rx_fds_.push_back(fd);
  watch_in_epoll(fd);
}

void UdpTransport::watch_in_epoll(int fd) {
  if (epoll_fd_ < 0) return;
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
}

UdpTransport::~UdpTransport() {
  for (const Group& group : groups_) close(group.fd);
  for (int fd : owned_port_fds_) close(fd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (link_local_fd_ >= 0) close(link_local_fd_);
  close(rx_fd_);
}

bool UdpTransport::socket_has_data() const {
  pollfd fds[2] = {{rx_fd_, POLLIN, 0}, {link_local_fd_, POLLIN, 0}};
  return poll(fds, link_local_fd_ >= 0 ? 2 : 1, 0) > 0;
}

void UdpTransport::close_after_fork() {
  if (link_local_fd_ >= 0) close(link_local_fd_);
  close(rx_fd_);
}

// Linux Soft-RoCE lists an interface's IPv6 link-local address as GID 0 and a peer
// that picks index 0 sends there, after an IPv6 neighbour solicitation the kernel
// answers only for an address the host has: so softrdma serves the real one.
void UdpTransport::serve_link_local() {
  if (ipv6_ || (wire::gid_to_ipv4(local_gid_) >> 24) == 127) return;
  Gid gid;
  uint32_t ifindex = 0;
  if (!udp::find_link_local(wire::gid_to_ipv4(local_gid_), gid, ifindex)) return;
  const int fd = udp::open_udp_socket(true);
  if (fd < 0) return;
  // A shared address's link-local twin is shared too, in a group of its own. No
  // program steers it yet (the probes learn indices in the IPv4 group only): the
  // kernel hashes its packets among the members and the others hand over what is
  // not theirs (docs/decisions/host-rnic.md, "Defaults").
  const int one = 1;
  if (config_.shared != nullptr) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (udp::bind_socket(fd, gid, port_, ifindex) != 0) {
    close(fd);
    return;
  }
  udp::set_receive_buffer(fd, config_.rcvbuf_bytes);
  udp::set_send_buffer(fd, config_.sndbuf_bytes);
  udp::enable_packet_info(fd, true);
  if (config_.ecn) {
    udp::set_ecn_capable(fd, true);
    udp::report_ecn(fd, true);
  }
  udp::accept_zero_udp_checksum(fd);
  udp::enable_gro(fd);
  udp::enable_receive_timestamps(fd);
  udp::set_multicast_interface(fd, true, ifindex);
  link_local_fd_ = fd;
  link_local_gid_ = gid;
  link_local_ifindex_ = ifindex;
  watch(fd);
}

void UdpTransport::stop_serving_link_local() {
  if (link_local_fd_ < 0) return;
  if (epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, link_local_fd_, nullptr);
  std::erase(rx_fds_, link_local_fd_);
  close(link_local_fd_);  // datagrams already in the ring stay valid (it owns its buffers)
  link_local_fd_ = -1;
  link_local_gid_ = Gid{};
  link_local_ifindex_ = 0;
}

// An interface that gets its link-local address after the device opened (a service
// started before the network was up), or loses it (link down), or gets another:
// served from when it can be bound until it goes. A tentative address (IPv6
// duplicate address detection still running) cannot be bound yet; the kernel's
// next message, when DAD ends, brings another try.
bool UdpTransport::refresh_addresses() {
  if (ipv6_ || (wire::gid_to_ipv4(local_gid_) >> 24) == 127) return false;
  Gid gid;
  uint32_t ifindex = 0;
  const bool present = udp::find_link_local(wire::gid_to_ipv4(local_gid_), gid, ifindex);
  const bool served = link_local_fd_ >= 0;
  if (served && present && gid == link_local_gid_ && ifindex == link_local_ifindex_) return false;
  if (!served && !present) return false;
  stop_serving_link_local();
  if (present) serve_link_local();
  return served || link_local_fd_ >= 0;
}

std::vector<Gid> UdpTransport::local_gids() const {
  if (link_local_fd_ < 0) return {local_gid_};
  return {local_gid_, link_local_gid_};
}

bool UdpTransport::sendable(const Gid& dst) const {
  if (wire::gid_is_ipv4(dst) != ipv6_) return true;
  return link_local_fd_ >= 0 && (udp::is_link_local(dst) || wire::gid_is_multicast(dst));
}

int UdpTransport::socket_for(const TxPacket& packet) {
  if (link_local_fd_ >= 0 && !wire::gid_is_ipv4(packet.dst)) return link_local_fd_;
  return socket_for_port(packet.src_port);
}

size_t UdpTransport::source_port_sockets() const {
  std::lock_guard lock(port_fds_mutex_);
  return owned_port_fds_.size();
}

int UdpTransport::socket_for_port(uint16_t src_port) {
  if (src_port < kFirstSourcePort) return rx_fd_;
  // Acquire: pairs with the release store below, so a reader sees a fully set-up fd.
  const int fd = (*port_fds_)[src_port - kFirstSourcePort].load(std::memory_order_acquire);
  return fd >= 0 ? fd : open_source_port_socket(src_port);
}

// A send-only socket bound to (local address, src_port). Unconnected, so Linux puts
// IPv4 ID 0 (ip_select_ident: no connected peer + DF). When the port is held or the
// cap is reached, packets leave from the receive socket's port instead.
int UdpTransport::open_source_port_socket(uint16_t src_port) {
  std::lock_guard lock(port_fds_mutex_);
  std::atomic<int>& entry = (*port_fds_)[src_port - kFirstSourcePort];
  if (const int fd = entry.load(std::memory_order_relaxed); fd >= 0) return fd;
  int fd = rx_fd_;
  if (owned_port_fds_.size() < config_.max_source_port_sockets) {
    const int candidate = udp::open_udp_socket(ipv6_);
    if (candidate >= 0 && udp::bind_socket(candidate, local_gid_, src_port) == 0) {
      // Nothing is sent to these ports (RoCEv2 replies go to 4791): keep the
      // receive queue, which is never read, small.
      int small = 4096;
      setsockopt(candidate, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
      udp::set_send_buffer(candidate, config_.sndbuf_bytes);
      if (config_.ecn) udp::set_ecn_capable(candidate, ipv6_);
      udp::set_multicast_interface(candidate, ipv6_, multicast_ifindex_);
      owned_port_fds_.push_back(candidate);
      fd = candidate;
    } else if (candidate >= 0) {
      close(candidate);
    }
  }
  entry.store(fd, std::memory_order_release);
  return fd;
}

TransportCounters UdpTransport::counters() const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  TransportCounters c;
  c.tx_packets = get(counters_.tx_packets);
  c.tx_bytes = get(counters_.tx_bytes);
  c.tx_errors = get(counters_.tx_errors);
  c.tx_port_fallback = get(counters_.tx_port_fallback);
  c.rx_packets = get(counters_.rx_packets);
  c.rx_bytes = get(counters_.rx_bytes);
  c.rx_bad_icrc = get(counters_.rx_bad_icrc);
  c.rx_truncated = get(counters_.rx_truncated);
  c.rx_ipv4_id_solved = get(counters_.rx_ipv4_id_solved);
  c.rx_ce_marked = get(counters_.rx_ce_marked);
  c.tx_gso_sends = get(counters_.tx_gso_sends);
  c.tx_gso_segments = get(counters_.tx_gso_segments);
  c.rx_gro_datagrams = get(counters_.rx_gro_datagrams);
  c.rx_gro_segments = get(counters_.rx_gro_segments);
  c.rx_buffer_bytes = uint64_t(rcvbuf_bytes_);
  return c;
}

std::string UdpTransport::describe() const {
  const std::string address = udp::address_to_string(local_gid_);
  return (ipv6_ ? "[" + address + "]" : address) + ":" + std::to_string(port_) +
         " (UDP, rcvbuf " + std::to_string(rcvbuf_bytes_) + " B)";
}

}  // namespace softrdma::transport
