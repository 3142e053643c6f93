// RoCEv2 over UDP sockets (DESIGN.md §3, §6; docs/decisions/transport.md).
//
// Receiving: one nonblocking socket bound to <address>:4791, drained with recvmmsg
// into a preallocated ring; every packet's ICRC is checked (IPv4: solving for the
// sender's Identification, which a socket never sees). Sending: per-QP source ports
// (0xC000 | hash(QPN)) from lazily created, unconnected send-only sockets with
// IP_PMTUDISC_DO, which makes Linux put IPv4 ID 0 in the header the ICRC covers.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/udp/handover.h"
#include "transport/udp/reuseport_steering.h"
#include "transport/udp/udp_counters.h"

struct mmsghdr;

namespace softrdma::transport {

// Sharing the address with the host's other processes, one socket each in the
// address's SO_REUSEPORT group (docs/decisions/host-rnic.md). Called from rx_burst.
struct SharedAddress {
  // The current probe round's nonce (the host registry's).
  std::function<uint64_t()> probe_nonce;
  // A probe of the round reached this socket: `index` is its place in the group.
  std::function<void(uint32_t index)> learned_index;
  // This process's hand-over (udp/handover.h), read by rx_burst; null: packets of
  // other processes' QPN blocks are dropped and counted.
  udp::Handover* handover = nullptr;
  // The hand-over slot of the process holding QPN block `block`; 0: nobody.
  std::function<uint32_t(uint32_t block)> handover_slot;
  // The hand-over slot of the process a packet to QP1 (a CM MAD) is for; 0: this
  // process takes it (it is this process's, or nobody's and its CM answers).
  // Unset: every MAD stays where it arrived.
  std::function<uint32_t(std::span<uint8_t> packet)> mad_slot;
};

struct UdpConfig {
  // Local IPv4 or IPv6 address, textual. Empty: default_loopback_address(), with
  // retries on other 127.x.y.z addresses if one is held by another process.
  std::string address;
  uint16_t port = wire::kRoceUdpPort;
  // Receive buffer wanted; SO_RCVBUFFORCE is tried first (it ignores rmem_max),
  // then SO_RCVBUF (capped by net.core.rmem_max). The effective size is reported.
  int rcvbuf_bytes = 16 << 20;
  int sndbuf_bytes = 4 << 20;
  // Datagrams one recvmmsg can return (64 KiB buffers each, touched when used:
  // with UDP_GRO one datagram may carry many packets).
  size_t rx_ring_packets = 32;
  // Most source-port sockets to open; beyond, packets leave from `port`.
  size_t max_source_port_sockets = 64;
  // Where to count (the process's status segment, runtime/status_segment.h); it
  // must outlive the transport. Null: in the transport.
  UdpCounters* counters = nullptr;
  // Set: `address` is shared (it must be given); it must outlive the transport.
  const SharedAddress* shared = nullptr;
  // Packets leave ECN-capable (ECT(0)) and arrive with their CE mark read
  // (udp_socket.h set_ecn_capable; docs/decisions/congestion-control.md). Off: the
  // ECN field is left 0 (Not-ECT) and not read.
  bool ecn = true;
};

// 4096 bytes of payload (largest path MTU) + every header RoCEv2 may carry, rounded.
inline constexpr size_t kRxBufferBytes = 4096 + 128;

// The loopback address this process uses when none is configured: 127.x.y.z derived
// from the pid (attempt 0 reads the pid in its last three bytes), other
// deterministic candidates for later attempts. Never 127.0.0.1, never x.y.z = 0 or
// 255.255.255. Host byte order.
uint32_t default_loopback_address(unsigned attempt = 0);
uint32_t default_loopback_address_for(uint32_t pid, unsigned attempt);
inline constexpr unsigned kLoopbackAttempts = 32;

class UdpTransport final : public Transport {
 public:
  // Opens the sockets. On failure returns null and says why in `error` (e.g. which
  // address:port is held and how to choose another).
  static std::unique_ptr<UdpTransport> open(const UdpConfig& config, std::string& error);
  ~UdpTransport() override;
  UdpTransport(const UdpTransport&) = delete;
  UdpTransport& operator=(const UdpTransport&) = delete;

  size_t tx_burst(std::span<TxPacket> packets) override;
  size_t tx_burst_with_errors(std::span<TxPacket> packets,
                              std::span<const BitError> errors) override;
  size_t rx_burst(std::span<RxPacket> packets) override;
  // An epoll fd over every receive socket (the unicast one, the link-local one,
  // one per multicast group joined): a group joined later is in it too.
  int rx_fd() const override { return epoll_fd_ >= 0 ? epoll_fd_ : rx_fd_; }
  // In a child of fork(), which never uses its copy of the parent's transport:
  // closes the copies of the receive sockets, so that the child does not keep the
  // parent's address (its place in a SO_REUSEPORT group, where the kernel would go
  // on steering packets that nobody reads) after the parent has gone. No lock is
  // taken (a parent thread may have held one at the fork); the object is leaked.
  void close_after_fork();
  // Whether a receive socket has a datagram queued (no wait).
  bool socket_has_data() const;
  Gid local_gid() const override { return local_gid_; }
  std::vector<Gid> local_gids() const override;
  bool refresh_addresses() override;
  TransportCounters counters() const override;
  std::string describe() const override;
  uint8_t tx_tos() const override { return config_.ecn ? wire::kEcnEct0 : 0; }
  uint16_t udp_port() const override { return port_; }
  // docs/decisions/multicast.md: a socket bound to the group, a member on the
  // interface of the local address. EOPNOTSUPP for a group of the other IP family
  // than this transport sends (an IPv6 group needs an IPv6 address or the served
  // link-local one: the loopback interface carries no IPv6 multicast).
  int join_group(const Gid& group) override;
  int leave_group(const Gid& group) override;
  size_t groups_joined() const { return groups_.size(); }

  int effective_rcvbuf_bytes() const { return rcvbuf_bytes_; }
  size_t source_port_sockets() const;

  // A shared address (udp_shared.cc): probes 0 .. count-1 of round `nonce` sent to
  // the group, so that each member learns its index; 0 or -errno.
  int send_probes(uint32_t count, uint64_t nonce);
  // The group's steering program for `members` (slot = QPN block -> index); 0 or -errno.
  int steer(std::span<const udp::SlotIndex> members);
  // QPN block `block` is this process's: its packets stay here (the others' are
  // handed over). Any thread; read by rx_burst.
  void own_block(uint32_t block);
  uint64_t handed_over() const { return counters_.rx_handed_over.load(std::memory_order_relaxed); }
  uint64_t no_owner() const { return counters_.rx_no_owner.load(std::memory_order_relaxed); }
  uint64_t probes_read() const { return counters_.rx_probes.load(std::memory_order_relaxed); }
  uint64_t probes_ignored() const {
    return counters_.rx_probes_ignored.load(std::memory_order_relaxed);
  }

 private:
  UdpTransport(const UdpConfig& config, int fd, Gid gid);
  struct RxRing;
  struct TxBatch;

  // An IPv4 address on an interface with an IPv6 link-local address: that address
  // is served too, on port 4791 (docs/decisions/gid-table.md). Quietly not, when it
  // cannot be bound.
  void serve_link_local();
  void stop_serving_link_local();
  // The socket a packet leaves from: by destination family, then by source port.
  int socket_for(const TxPacket& packet);
  bool sendable(const Gid& dst) const;
  int socket_for_port(uint16_t src_port);
  [[gnu::cold]] int open_source_port_socket(uint16_t src_port);
  bool sendable(const TxPacket& p) const;
  size_t gso_group(std::span<TxPacket> packets, size_t first, size_t room) const;
  void stamp(std::span<TxPacket> group, const Gid& src, uint16_t used_port, iovec* iovs);
  size_t prepare_run(std::span<TxPacket> packets, int fd, TxBatch& batch);
  size_t send_burst(std::span<TxPacket> packets, std::span<const BitError> errors);
  size_t send_run(int fd, TxBatch& batch);
  bool refill(int fd, size_t wanted);
  bool open_datagram();
  void watch(int fd);
  // The IP family a packet to `dst` leaves with, and so a group's, is served.
  bool serves_family_of(const Gid& dst) const;
  size_t collect_received(std::span<RxPacket> packets);
  // A shared address's probe (not a RoCE packet: no ICRC): read, or ignored.
  void take_probe(const RxPacket& packet);
  // A shared address: the packet is another process's (its QPN block), handed
  // over to it; false when it is this process's.
  bool hand_over_if_not_mine(const RxPacket& packet);
  void flush_handovers();
  // Packets other members handed over, their ICRCs checked as if from UDP.
  size_t collect_handed_over(std::span<RxPacket> packets);
  // Epoll only (not read by refill: another format).
  void watch_in_epoll(int fd);
  bool check_received_icrc(RxPacket& packet, uint16_t likely_id = 0);

  const UdpConfig config_;
  const int rx_fd_;
  const Gid local_gid_;
  const uint16_t port_;
  const bool ipv6_;
  int rcvbuf_bytes_ = 0;
  bool gro_ = false;                // UDP_GRO is on for the receive socket
  std::atomic<bool> gso_{true};     // UDP_SEGMENT is used until the kernel refuses it
  // The interface's IPv6 link-local address, served by its own socket (-1: none).
  int link_local_fd_ = -1;
  Gid link_local_gid_{};
  uint32_t link_local_ifindex_ = 0;
  int epoll_fd_ = -1;  // over rx_fds_
  // Every receive socket: rx_fd_, then link_local_fd_, then the groups' (in order
  // joined). A refill starts at rx_next_ and moves it on, so none starves.
  std::vector<int> rx_fds_;
  size_t rx_next_ = 0;
  // The interface multicast leaves through and groups are joined on: the one of
  // the local address (docs/decisions/multicast.md); 0 when none was found.
  uint32_t multicast_ifindex_ = 0;
  struct Group {
    Gid gid;
    int fd;
  };
  std::vector<Group> groups_;  // joined and left with the engine held (cold path)

  std::unique_ptr<RxRing> rx_;

  // Source port (0xC000..0xFFFF) -> fd to send from: -1 not tried yet, rx_fd_ when
  // the port could not be had. Read without the lock; written under it.
  static constexpr size_t kSourcePorts = 0x4000;
  std::unique_ptr<std::array<std::atomic<int>, kSourcePorts>> port_fds_;
  mutable std::mutex port_fds_mutex_;
  std::vector<int> owned_port_fds_;  // guarded by port_fds_mutex_

  static constexpr size_t kBlockWords = (1u << (24 - wire::kQpnBlockShift)) / 64;
  std::array<std::atomic<uint64_t>, kBlockWords> own_blocks_{};
  uint32_t handover_turn_ = 0;  // every so often the hand-over is read first
  bool handovers_queued_ = false;  // hand_over_if_not_mine queued since the last flush

  UdpCounters own_counters_;  // used when the config names no cells
  UdpCounters& counters_;     // own_counters_ or UdpConfig::counters
};

}  // namespace softrdma::transport
