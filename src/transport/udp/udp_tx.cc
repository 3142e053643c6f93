// Sending: runs of packets that leave from one socket go out in one sendmmsg; a
// run of equal-size packets to one peer is one message with UDP_SEGMENT (GSO),
// which the kernel cuts into datagrams (docs/decisions/gso-gro.md). Everything
// lives on the caller's stack, so concurrent tx_burst calls share only counters.
#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"
#include "wire/icrc.h"

namespace softrdma::transport {

namespace {

constexpr uint16_t kFirstSourcePort = 0xC000;
constexpr size_t kMinRoceBytes = wire::kBthBytes + wire::kIcrcBytes;
// The kernel's limit on segments per GSO send (UDP_MAX_SEGMENTS, 64 before 6.1).
constexpr size_t kMaxGsoSegments = 64;
// The most payload one UDP datagram (and so one GSO send) may carry over IPv4.
constexpr size_t kMaxUdpPayload = 65507;

struct alignas(cmsghdr) GsoControl {
  uint8_t bytes[CMSG_SPACE(sizeof(uint16_t))];
};

}  // namespace

// One sendmmsg worth of messages, on the sender's stack.
struct UdpTransport::TxBatch {
  static constexpr size_t kMaxMessages = 32;
  static constexpr size_t kMaxPackets = 64;
  mmsghdr msgs[kMaxMessages];  // left uninitialised: prepare_run fills what it uses
  iovec iovs[kMaxPackets];
  sockaddr_in6 addresses[kMaxMessages];  // holds a sockaddr_in for IPv4
  GsoControl controls[kMaxMessages];
  size_t packets_in[kMaxMessages];
  size_t messages = 0;
};

bool UdpTransport::sendable(const TxPacket& p) const {
  return p.bytes.size() >= kMinRoceBytes && sendable(p.dst);
}

// How many packets from `first` on can go as one GSO send: the same peer and
// source port, all as long as the first except that the last may be shorter.
size_t UdpTransport::gso_group(std::span<TxPacket> packets, size_t first, size_t room) const {
  const TxPacket& lead = packets[first];
  if (!gso_.load(std::memory_order_relaxed)) return 1;
  const size_t limit = std::min({room, kMaxGsoSegments, kMaxUdpPayload / lead.bytes.size(),
                                 packets.size() - first});
  size_t g = 1;
  while (g < limit) {
    const TxPacket& p = packets[first + g];
    if (p.dst != lead.dst || p.src_port != lead.src_port || !sendable(p) ||
        p.bytes.size() > lead.bytes.size())
      break;
    ++g;
    if (p.bytes.size() < lead.bytes.size()) break;  // a shorter one ends the send
  }
  return g;
}

// Stamps the packets of one message and points its iovecs at them. DESIGN.md §3
// trap 1: the kernel writes each datagram's IPv4 ID, which the ICRC covers. An
// unconnected DF socket gets ID 0 (ip_select_ident), and the segments of a GSO
// send get that ID plus their index (inet_gso_segment): the ICRC of packet i of
// the message is computed with ID i. Proved on real segments by
// KernelFacts.GsoSegmentsCarryConsecutiveIpv4Ids.
void UdpTransport::stamp(std::span<TxPacket> group, const Gid& src, uint16_t used_port,
                         iovec* iovs) {
  for (size_t i = 0; i < group.size(); ++i) {
    TxPacket& p = group[i];
    p.src = src;
    p.src_port = used_port;
    p.ipv4_id = wire::gid_is_ipv4(p.dst) ? uint16_t(i) : 0;
    const wire::IpUdpInfo info{.src = src, .dst = p.dst, .src_port = used_port,
                               .dst_port = port_, .ipv4_id = p.ipv4_id, .ipv4_df = true};
    wire::write_icrc(info, p.bytes);
    iovs[i] = {p.bytes.data(), p.bytes.size()};
  }
}

// Fills `batch` with the leading packets that go out of socket `fd`, grouped into
// messages; returns how many packets (at least one).
size_t UdpTransport::prepare_run(std::span<TxPacket> packets, int fd, TxBatch& batch) {
  size_t n = 0;
  uint64_t fallbacks = 0;
  batch.messages = 0;
  while (n < packets.size() && batch.messages < TxBatch::kMaxMessages &&
         n < TxBatch::kMaxPackets) {
    TxPacket& lead = packets[n];
    if (n > 0 && (!sendable(lead) || socket_for(lead) != fd)) break;
    const size_t g = gso_group(packets, n, TxBatch::kMaxPackets - n);
    // The link-local socket (gid-table.md) sends from 4791: no per-QP source port.
    const bool link_local = fd == link_local_fd_;
    const uint16_t used_port = fd == rx_fd_ || link_local ? port_ : lead.src_port;
    fallbacks += (used_port != lead.src_port && lead.src_port >= kFirstSourcePort &&
                  !link_local) ? g : 0;
    stamp(packets.subspan(n, g), link_local ? link_local_gid_ : local_gid_, used_port,
          &batch.iovs[n]);
    const size_t m = batch.messages++;
    msghdr& h = batch.msgs[m].msg_hdr;
    h = msghdr{};
    h.msg_name = &batch.addresses[m];
    h.msg_namelen = udp::write_socket_address(lead.dst, port_, batch.addresses[m]);
    if (link_local) batch.addresses[m].sin6_scope_id = link_local_ifindex_;
    h.msg_iov = &batch.iovs[n];
    h.msg_iovlen = g;
    if (g > 1) {
      h.msg_control = batch.controls[m].bytes;
      h.msg_controllen = sizeof batch.controls[m].bytes;
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t segment = uint16_t(lead.bytes.size());
      std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
    }
    batch.packets_in[m] = g;
    n += g;
  }
  if (fallbacks != 0) counters_.tx_port_fallback.fetch_add(fallbacks, std::memory_order_relaxed);
  return n;
}

// Sends the batch's messages on `fd`; returns how many packets were consumed (sent,
// or refused for good and counted). Stops early when the send buffer is full.
size_t UdpTransport::send_run(int fd, TxBatch& batch) {
  size_t done = 0, packets = 0;
  uint64_t bytes = 0, sent = 0, errors = 0, gso_sends = 0, gso_segments = 0;
  while (done < batch.messages) {
    const int r = sendmmsg(fd, &batch.msgs[done], unsigned(batch.messages - done), MSG_DONTWAIT);
    if (r > 0) {
      for (size_t i = done; i < done + size_t(r); ++i) {
        bytes += batch.msgs[i].msg_len;
        sent += batch.packets_in[i];
        packets += batch.packets_in[i];
        if (batch.packets_in[i] > 1) {
          ++gso_sends;
          gso_segments += batch.packets_in[i];
        }
      }
      done += size_t(r);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
    // Refused for good (EMSGSIZE above the path MTU, no route ...): lost, as on a
    // network; RC retransmits, UD/UC lose it. A kernel that refuses GSO itself
    // (EIO: no checksum offload on the route; EINVAL) is not asked again.
    if (batch.packets_in[done] > 1 && (errno == EIO || errno == EINVAL)) {
      gso_.store(false, std::memory_order_relaxed);
      counters_.tx_gso_refused.fetch_add(1, std::memory_order_relaxed);
    }
    errors += batch.packets_in[done];
    packets += batch.packets_in[done];
    ++done;
  }
  counters_.tx_packets.fetch_add(sent, std::memory_order_relaxed);
  counters_.tx_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (errors != 0) counters_.tx_errors.fetch_add(errors, std::memory_order_relaxed);
  if (gso_sends != 0) {
    counters_.tx_gso_sends.fetch_add(gso_sends, std::memory_order_relaxed);
    counters_.tx_gso_segments.fetch_add(gso_segments, std::memory_order_relaxed);
  }
  return packets;
}

size_t UdpTransport::tx_burst(std::span<TxPacket> packets) { return send_burst(packets, {}); }

size_t UdpTransport::tx_burst_with_errors(std::span<TxPacket> packets,
                                          std::span<const BitError> errors) {
  return send_burst(packets, errors);
}

size_t UdpTransport::send_burst(std::span<TxPacket> packets, std::span<const BitError> errors) {
  TxBatch batch;
  size_t taken = 0;
  while (taken < packets.size()) {
    TxPacket& first = packets[taken];
    if (!sendable(first)) {
      counters_.tx_errors.fetch_add(1, std::memory_order_relaxed);  // unsendable: dropped
      ++taken;
      continue;
    }
    const int fd = socket_for(first);
    const std::span<TxPacket> run_packets = packets.subspan(taken);
    const size_t run = prepare_run(run_packets, fd, batch);  // ICRCs written
    flip_bit_errors(packets, errors, taken, taken + run);    // they leave with the run
    const size_t sent = send_run(fd, batch);
    // The kernel has copied what it sent: take the bit errors back out.
    flip_bit_errors(packets, errors, taken, taken + run);
    taken += sent;
    if (sent < run) break;
  }
  return taken;
}

}  // namespace softrdma::transport
