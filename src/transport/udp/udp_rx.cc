// Receiving: recvmmsg into a preallocated ring, UDP_GRO datagrams taken apart
// into their segments, every packet's ICRC checked (docs/decisions/transport.md,
// gso-gro.md). No allocation per packet.
#include <netinet/udp.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/udp/udp_rx.h"
#include "transport/udp/udp_socket.h"
#include "wire/icrc.h"

namespace softrdma::transport {

namespace {

constexpr size_t kMinRoceBytes = wire::kBthBytes + wire::kIcrcBytes;
// A longer wait than this is a clock step, not a wait.
constexpr int64_t kMostWaitedNs = 10'000'000'000;

int64_t clock_ns(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// From the control messages: the local address a datagram was sent to
// (IP_PKTINFO / IPV6_PKTINFO), the segment size of a coalesced one (UDP_GRO) and
// whether it arrived marked CE (IP_TOS / IPV6_TCLASS), when it arrived
// (SCM_TIMESTAMPNS, CLOCK_REALTIME; 0 when absent).
void read_control(msghdr& header, wire::Gid& dst, size_t& segment, bool& ce,
                  int64_t& arrived_ns) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&header); c != nullptr; c = CMSG_NXTHDR(&header, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo info;
      std::memcpy(&info, CMSG_DATA(c), sizeof info);
      dst = wire::gid_from_ipv4(ntohl(info.ipi_addr.s_addr));
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo info;
      std::memcpy(&info, CMSG_DATA(c), sizeof info);
      std::memcpy(dst.data(), info.ipi6_addr.s6_addr, dst.size());
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
      uint8_t tos = 0;  // one byte (ip_cmsg_recv_tos)
      std::memcpy(&tos, CMSG_DATA(c), sizeof tos);
      ce = (tos & wire::kEcnMask) == wire::kEcnCe;
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      int tclass = 0;
      std::memcpy(&tclass, CMSG_DATA(c), sizeof tclass);
      ce = (unsigned(tclass) & wire::kEcnMask) == wire::kEcnCe;
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
      timespec at;
      std::memcpy(&at, CMSG_DATA(c), sizeof at);
      arrived_ns = int64_t(at.tv_sec) * 1'000'000'000 + at.tv_nsec;
    } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
      int size = 0;
      std::memcpy(&size, CMSG_DATA(c), sizeof size);
      if (size > 0) segment = size_t(size);
    }
  }
}

}  // namespace

UdpTransport::RxRing::RxRing(size_t datagrams)
    : buffers(new uint8_t[datagrams * kRxDatagramBytes]), msgs(datagrams), iovs(datagrams),
      names(datagrams), controls(datagrams) {
  for (size_t i = 0; i < datagrams; ++i) {
    iovs[i] = {datagram(i), kRxDatagramBytes};
    msghdr& h = msgs[i].msg_hdr;
    h = msghdr{};
    h.msg_iov = &iovs[i];
    h.msg_iovlen = 1;
    h.msg_name = &names[i];
    h.msg_control = controls[i].bytes;
  }
}

void UdpTransport::RxRing::prepare(size_t count) {
  for (size_t i = 0; i < count; ++i) {
    msghdr& h = msgs[i].msg_hdr;
    h.msg_namelen = sizeof(sockaddr_storage);
    h.msg_controllen = sizeof(ControlBuffer);
    h.msg_flags = 0;
  }
}

size_t UdpTransport::rx_burst(std::span<RxPacket> packets) {
  RxRing& ring = *rx_;
  if (packets.empty()) return 0;
  if (ring.next == ring.received) {
    // Several sockets when the link-local address is served (gid-table.md) or
    // groups are joined (multicast.md): each refill fills the ring from one of
    // them, the first tried moving on each time so that none starves the others.
    // A shared address: what other members handed over, when the sockets are
    // empty and every 16th time before them (so that neither starves).
    const bool shared = config_.shared != nullptr && config_.shared->handover != nullptr;
    if (shared && (++handover_turn_ & 15) == 0)
      if (const size_t n = collect_handed_over(packets); n != 0) return n;
    bool got = false;
    const size_t count = rx_fds_.size();
    if (count <= 1) {
      got = refill(rx_fd_, packets.size());
    } else {
      rx_next_ = (rx_next_ + 1) % count;
      for (size_t i = 0; i < count && !got; ++i)
        got = refill(rx_fds_[(rx_next_ + i) % count], packets.size());
    }
    if (!got) return shared ? collect_handed_over(packets) : 0;
  }
  return collect_received(packets);
}

// One recvmmsg from `fd` into the whole ring; false when nothing was there.
bool UdpTransport::refill(int fd, size_t wanted) {
  RxRing& ring = *rx_;
  const size_t want = std::min(wanted, ring.msgs.size());
  ring.prepare(want);
  int received;
  do {
    received = recvmmsg(fd, ring.msgs.data(), unsigned(want), MSG_DONTWAIT, nullptr);
  } while (received < 0 && errno == EINTR);
  ring.received = received > 0 ? size_t(received) : 0;
  if (ring.received > 0) {
    ring.called_ns = clock_ns(CLOCK_MONOTONIC);
    ring.realtime_offset_ns = clock_ns(CLOCK_REALTIME) - ring.called_ns;
  }
  ring.next = 0;
  ring.offset = 0;
  return ring.received > 0;
}

// Starts taking datagram ring.next apart; false (and counted) when it is unusable.
bool UdpTransport::open_datagram() {
  RxRing& ring = *rx_;
  msghdr& h = ring.msgs[ring.next].msg_hdr;
  const size_t length = ring.msgs[ring.next].msg_len;
  if ((h.msg_flags & MSG_TRUNC) != 0 ||
      !udp::from_socket_address(ring.names[ring.next], ring.src, ring.src_port)) {
    counters_.rx_truncated.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ring.dst = local_gid_;
  ring.segment = length;
  ring.congestion_experienced = false;
  int64_t arrived_ns = 0;
  read_control(h, ring.dst, ring.segment, ring.congestion_experienced, arrived_ns);
  // Unknown, or a clock stepped meanwhile: no arrival rather than a wrong one.
  const int64_t arrival = arrived_ns - ring.realtime_offset_ns;
  const int64_t waited = ring.called_ns - arrival;
  ring.arrival_ns = arrived_ns != 0 && waited >= 0 && waited < kMostWaitedNs ? arrival : 0;
  if (ring.segment < length) {
    counters_.rx_gro_datagrams.fetch_add(1, std::memory_order_relaxed);
    counters_.rx_gro_segments.fetch_add((length + ring.segment - 1) / ring.segment,
                                        std::memory_order_relaxed);
  }
  return true;
}

// Fills `packets` from where the last call stopped: each segment of each datagram
// becomes a packet, dropped (and counted) when truncated or its ICRC fails.
size_t UdpTransport::collect_received(std::span<RxPacket> packets) {
  RxRing& ring = *rx_;
  size_t n = 0;
  uint64_t bytes = 0, truncated = 0, bad_icrc = 0, solved = 0, marked = 0;
  while (n < packets.size() && ring.next < ring.received) {
    const size_t length = ring.msgs[ring.next].msg_len;
    if (ring.offset == 0 && !open_datagram()) {
      ++ring.next;
      continue;
    }
    const size_t take = std::min(ring.segment, length - ring.offset);
    // Segment i of a datagram that one GSO send made whole (loopback, or GRO
    // joining it again) carries IPv4 ID i: the ICRC's first guess.
    const uint16_t likely_id = uint16_t(ring.offset / std::max<size_t>(ring.segment, 1));
    RxPacket& out = packets[n];
    out = RxPacket{};
    out.bytes = std::span<uint8_t>(ring.datagram(ring.next) + ring.offset, take);
    out.src = ring.src;
    out.dst = ring.dst;
    out.src_port = ring.src_port;
    out.congestion_experienced = ring.congestion_experienced;
    out.arrival_ns = ring.arrival_ns;
    ring.offset += take;
    if (ring.offset >= length || take == 0) {
      ++ring.next;
      ring.offset = 0;
    }
    if (take < kMinRoceBytes) {
      ++truncated;
      continue;
    }
    if (config_.shared != nullptr) {
      if (out.bytes[0] == udp::kProbeOpcode) {
        take_probe(out);
        continue;
      }
      if (hand_over_if_not_mine(out)) continue;
    }
    if (!check_received_icrc(out, likely_id)) {
      ++bad_icrc;
      continue;
    }
    solved += out.ipv4_id != 0 || !out.ipv4_df;
    marked += out.congestion_experienced;
    bytes += take;
    ++n;
  }
  if (handovers_queued_) flush_handovers();
  counters_.rx_packets.fetch_add(n, std::memory_order_relaxed);
  counters_.rx_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (truncated) counters_.rx_truncated.fetch_add(truncated, std::memory_order_relaxed);
  if (bad_icrc) counters_.rx_bad_icrc.fetch_add(bad_icrc, std::memory_order_relaxed);
  if (solved) counters_.rx_ipv4_id_solved.fetch_add(solved, std::memory_order_relaxed);
  if (marked) counters_.rx_ce_marked.fetch_add(marked, std::memory_order_relaxed);
  return n;
}

// DESIGN.md §3 trap 2: the socket hides the sender's IPv4 ID and DF, which the ICRC
// covers; solve for them (16 + 1 unknown bits, so 15 bits of the CRC still check,
// docs/decisions/icrc.md). softrdma's own senders use ID 0 + DF for a single
// datagram, and 0, 1, 2 ... for the segments of a GSO send: one CRC pass when
// `likely_id` is right, and a multiplication more when not.
bool UdpTransport::check_received_icrc(RxPacket& packet, uint16_t likely_id) {
  const wire::IpUdpInfo info{.src = packet.src, .dst = packet.dst, .src_port = packet.src_port,
                             .dst_port = port_};
  if (!wire::gid_is_ipv4(packet.src)) return wire::check_icrc(info, packet.bytes);
  const std::optional<wire::SolvedIpv4> solved =
      wire::solve_icrc_ipv4(info, packet.bytes, likely_id);
  if (!solved) return false;
  packet.ipv4_id = solved->id;
  packet.ipv4_df = solved->df;
  return true;
}

}  // namespace softrdma::transport
