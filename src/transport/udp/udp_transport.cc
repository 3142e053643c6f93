#include "transport/udp/udp_transport.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/udp/udp_socket.h"
#include "wire/icrc.h"
#include "wire/opcodes.h"

namespace softrdma::transport {

namespace {

constexpr uint16_t kFirstSourcePort = 0xC000;
constexpr size_t kMinRoceBytes = wire::kBthBytes + wire::kIcrcBytes;

// Room for one IP_PKTINFO or IPV6_PKTINFO control message.
struct alignas(cmsghdr) ControlBuffer {
  uint8_t bytes[CMSG_SPACE(sizeof(in6_pktinfo))];
};

// The local address a datagram was sent to, from its IP_PKTINFO / IPV6_PKTINFO.
bool destination_from_control(msghdr& header, wire::Gid& dst) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&header); c != nullptr; c = CMSG_NXTHDR(&header, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo info;
      std::memcpy(&info, CMSG_DATA(c), sizeof info);
      dst = wire::gid_from_ipv4(ntohl(info.ipi_addr.s_addr));
      return true;
    }
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo info;
      std::memcpy(&info, CMSG_DATA(c), sizeof info);
      std::memcpy(dst.data(), info.ipi6_addr.s6_addr, dst.size());
      return true;
    }
  }
  return false;
}

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

struct UdpTransport::RxRing {
  explicit RxRing(size_t packets)
      : buffers(packets * kRxBufferBytes), msgs(packets), iovs(packets), names(packets),
        controls(packets) {
    for (size_t i = 0; i < packets; ++i) {
      iovs[i] = {buffers.data() + i * kRxBufferBytes, kRxBufferBytes};
      msghdr& h = msgs[i].msg_hdr;
      h.msg_iov = &iovs[i];
      h.msg_iovlen = 1;
      h.msg_name = &names[i];
      h.msg_control = controls[i].bytes;
    }
  }
  // recvmmsg overwrites the lengths and flags it returns: reset them.
  void prepare(size_t count) {
    for (size_t i = 0; i < count; ++i) {
      msghdr& h = msgs[i].msg_hdr;
      h.msg_namelen = sizeof(sockaddr_storage);
      h.msg_controllen = sizeof(ControlBuffer);
      h.msg_flags = 0;
    }
  }
  std::vector<uint8_t> buffers;
  std::vector<mmsghdr> msgs;
  std::vector<iovec> iovs;
  std::vector<sockaddr_storage> names;
  std::vector<ControlBuffer> controls;
};

// One sendmmsg worth of packets, on the sender's stack: tx_burst is thread-safe
// without sharing these.
struct UdpTransport::TxBatch {
  static constexpr size_t kMax = 32;
  mmsghdr msgs[kMax];  // left uninitialised: prepare_run fills what it uses
  iovec iovs[kMax];
  sockaddr_in6 addresses[kMax];  // holds a sockaddr_in for IPv4
};

std::unique_ptr<UdpTransport> UdpTransport::open(const UdpConfig& config, std::string& error) {
  if (!config.address.empty()) {
    const std::optional<Gid> gid = udp::parse_address(config.address);
    if (!gid) {
      error = "softrdma: '" + config.address + "' is not an IPv4 or IPv6 address (SOFTRDMA_ADDR)";
      return nullptr;
    }
    const int fd = udp::open_udp_socket(!wire::gid_is_ipv4(*gid));
    if (fd < 0) {
      error = std::string("softrdma: cannot open a UDP socket: ") + std::strerror(-fd);
      return nullptr;
    }
    if (const int rc = udp::bind_socket(fd, *gid, config.port); rc != 0) {
      close(fd);
      error = bind_error_message(config.address, config.port, rc);
      return nullptr;
    }
    std::unique_ptr<UdpTransport> transport(new UdpTransport(config, fd, *gid));
    transport->serve_link_local();
    return transport;
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
      port_fds_(std::make_unique<std::array<std::atomic<int>, kSourcePorts>>()) {
  for (auto& entry : *port_fds_) entry.store(-1, std::memory_order_relaxed);
  rcvbuf_bytes_ = udp::set_receive_buffer(fd, config.rcvbuf_bytes);
  udp::set_send_buffer(fd, config.sndbuf_bytes);
  udp::enable_packet_info(fd, ipv6_);
  if (ipv6_) udp::accept_zero_udp_checksum(fd);
}

UdpTransport::~UdpTransport() {
  for (int fd : owned_port_fds_) close(fd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
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
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0 || udp::bind_socket(fd, gid, port_, ifindex) != 0) {
    if (epoll >= 0) close(epoll);
    close(fd);
    return;
  }
  udp::set_receive_buffer(fd, config_.rcvbuf_bytes);
  udp::set_send_buffer(fd, config_.sndbuf_bytes);
  udp::enable_packet_info(fd, true);
  udp::accept_zero_udp_checksum(fd);
  for (int watched : {rx_fd_, fd}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = watched;
    epoll_ctl(epoll, EPOLL_CTL_ADD, watched, &event);
  }
  link_local_fd_ = fd;
  link_local_gid_ = gid;
  link_local_ifindex_ = ifindex;
  epoll_fd_ = epoll;
}

std::vector<Gid> UdpTransport::local_gids() const {
  if (link_local_fd_ < 0) return {local_gid_};
  return {local_gid_, link_local_gid_};
}

bool UdpTransport::sendable(const Gid& dst) const {
  if (wire::gid_is_ipv4(dst) != ipv6_) return true;
  return link_local_fd_ >= 0 && udp::is_link_local(dst);
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
      owned_port_fds_.push_back(candidate);
      fd = candidate;
    } else if (candidate >= 0) {
      close(candidate);
    }
  }
  entry.store(fd, std::memory_order_release);
  return fd;
}

// Fills `batch` with the leading packets that go out of socket `fd`; returns how
// many (at least one). Writes each ICRC with the source port actually used.
size_t UdpTransport::prepare_run(std::span<TxPacket> packets, int fd, TxBatch& batch) {
  size_t n = 0;
  uint64_t fallbacks = 0;
  for (; n < packets.size() && n < TxBatch::kMax; ++n) {
    TxPacket& p = packets[n];
    if (n > 0 && (p.bytes.size() < kMinRoceBytes || !sendable(p.dst) || socket_for(p) != fd))
      break;
    const bool link_local = fd == link_local_fd_;
    // The link-local socket sends from 4791: no per-QP source port there.
    const uint16_t used_port = fd == rx_fd_ || link_local ? port_ : p.src_port;
    fallbacks += used_port != p.src_port && p.src_port >= kFirstSourcePort && !link_local;
    p.src = link_local ? link_local_gid_ : local_gid_;
    p.src_port = used_port;
    const wire::IpUdpInfo info{.src = p.src, .dst = p.dst, .src_port = used_port,
                               .dst_port = port_, .ipv4_id = 0, .ipv4_df = true};
    wire::write_icrc(info, p.bytes);
    apply_wire_corruption(p);
    batch.iovs[n] = {p.bytes.data(), p.bytes.size()};
    msghdr& h = batch.msgs[n].msg_hdr;
    h = msghdr{};
    h.msg_name = &batch.addresses[n];
    h.msg_namelen = udp::write_socket_address(p.dst, port_, batch.addresses[n]);
    if (link_local) batch.addresses[n].sin6_scope_id = link_local_ifindex_;
    h.msg_iov = &batch.iovs[n];
    h.msg_iovlen = 1;
  }
  if (fallbacks != 0) counters_.tx_port_fallback.fetch_add(fallbacks, std::memory_order_relaxed);
  return n;
}

// Sends batch[0, count) on `fd`; returns how many were consumed (sent, or refused
// for good and counted). Stops early when the socket's send buffer is full.
size_t UdpTransport::send_run(int fd, TxBatch& batch, size_t count) {
  size_t done = 0;
  uint64_t bytes = 0, sent = 0, errors = 0;
  while (done < count) {
    const int r = sendmmsg(fd, &batch.msgs[done], unsigned(count - done), MSG_DONTWAIT);
    if (r > 0) {
      for (size_t i = done; i < done + size_t(r); ++i) bytes += batch.iovs[i].iov_len;
      done += size_t(r);
      sent += size_t(r);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
    // Refused for good (EMSGSIZE above the path MTU, no route ...): lost, as on a
    // network; RC retransmits, UD/UC lose it. Counted.
    ++errors;
    ++done;
  }
  counters_.tx_packets.fetch_add(sent, std::memory_order_relaxed);
  counters_.tx_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (errors != 0) counters_.tx_errors.fetch_add(errors, std::memory_order_relaxed);
  return done;
}

size_t UdpTransport::tx_burst(std::span<TxPacket> packets) {
  TxBatch batch;
  size_t taken = 0;
  while (taken < packets.size()) {
    TxPacket& first = packets[taken];
    if (first.bytes.size() < kMinRoceBytes || !sendable(first.dst)) {
      counters_.tx_errors.fetch_add(1, std::memory_order_relaxed);  // unsendable: dropped
      ++taken;
      continue;
    }
    const int fd = socket_for(first);
    const std::span<TxPacket> run_packets = packets.subspan(taken);
    const size_t run = prepare_run(run_packets, fd, batch);
    const size_t sent = send_run(fd, batch, run);
    // The kernel has copied what it sent: take injected corruption back out.
    for (size_t i = 0; i < run; ++i) apply_wire_corruption(run_packets[i]);
    taken += sent;
    if (sent < run) break;
  }
  return taken;
}

size_t UdpTransport::rx_burst(std::span<RxPacket> packets) {
  const size_t want = std::min(packets.size(), rx_->msgs.size());
  size_t slots = 0;
  size_t n = drain(rx_fd_, packets.first(want), slots);
  // The second socket fills the ring's slots after those the first one used (kept
  // packets point into them, dropped ones too, in any order).
  if (link_local_fd_ >= 0 && slots < want)
    n += drain(link_local_fd_, packets.subspan(n, want - slots), slots);
  return n;
}

// Receives into ring slots from `slots` on, at most packets.size(); advances `slots`
// past those used and returns the packets kept.
size_t UdpTransport::drain(int fd, std::span<RxPacket> packets, size_t& slots) {
  if (packets.empty()) return 0;
  rx_->prepare(slots + packets.size());
  int received;
  do {
    received = recvmmsg(fd, rx_->msgs.data() + slots, unsigned(packets.size()),
                        MSG_DONTWAIT, nullptr);
  } while (received < 0 && errno == EINTR);
  if (received <= 0) return 0;
  const size_t first = slots;
  slots += size_t(received);
  return collect_received(packets, first, size_t(received));
}

// Turns the ring's first `received` datagrams into RxPackets, dropping (and
// counting) the truncated and those whose ICRC fails.
size_t UdpTransport::collect_received(std::span<RxPacket> packets, size_t first_slot,
                                      size_t received) {
  size_t n = 0;
  uint64_t bytes = 0, truncated = 0, bad_icrc = 0, solved = 0;
  for (size_t i = first_slot; i < first_slot + received; ++i) {
    mmsghdr& m = rx_->msgs[i];
    if ((m.msg_hdr.msg_flags & MSG_TRUNC) != 0 || m.msg_len < kMinRoceBytes) {
      ++truncated;
      continue;
    }
    RxPacket& out = packets[n];
    out = RxPacket{};
    out.bytes = std::span<uint8_t>(rx_->buffers.data() + i * kRxBufferBytes, m.msg_len);
    if (!udp::from_socket_address(rx_->names[i], out.src, out.src_port)) continue;
    if (!destination_from_control(m.msg_hdr, out.dst)) out.dst = local_gid_;
    if (!check_received_icrc(out)) {
      ++bad_icrc;
      continue;
    }
    solved += out.ipv4_id != 0 || !out.ipv4_df;
    bytes += m.msg_len;
    ++n;
  }
  counters_.rx_packets.fetch_add(n, std::memory_order_relaxed);
  counters_.rx_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (truncated) counters_.rx_truncated.fetch_add(truncated, std::memory_order_relaxed);
  if (bad_icrc) counters_.rx_bad_icrc.fetch_add(bad_icrc, std::memory_order_relaxed);
  if (solved) counters_.rx_ipv4_id_solved.fetch_add(solved, std::memory_order_relaxed);
  return n;
}

// DESIGN.md §3 trap 2: the socket hides the sender's IPv4 ID and DF, which the ICRC
// covers; solve for them (16 + 1 unknown bits, so 15 bits of the CRC still check,
// docs/decisions/icrc.md). softrdma's own senders use ID 0 + DF: the first guess.
bool UdpTransport::check_received_icrc(RxPacket& packet) {
  const wire::IpUdpInfo info{.src = packet.src, .dst = packet.dst, .src_port = packet.src_port,
                             .dst_port = port_};
  if (!wire::gid_is_ipv4(packet.src)) return wire::check_icrc(info, packet.bytes);
  const std::optional<wire::SolvedIpv4> solved = wire::solve_icrc_ipv4(info, packet.bytes);
  if (!solved) return false;
  packet.ipv4_id = solved->id;
  packet.ipv4_df = solved->df;
  return true;
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
  c.rx_buffer_bytes = uint64_t(rcvbuf_bytes_);
  return c;
}

std::string UdpTransport::describe() const {
  const std::string address = udp::address_to_string(local_gid_);
  return (ipv6_ ? "[" + address + "]" : address) + ":" + std::to_string(port_) +
         " (UDP, rcvbuf " + std::to_string(rcvbuf_bytes_) + " B)";
}

}  // namespace softrdma::transport
