// A shared address (docs/decisions/host-rnic.md): this process's socket is one of
// the address's SO_REUSEPORT group. Probes tell each member its index in the
// group; the steering program sends each packet to its QPN block's member.
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"
#include "wire/cm_gsi.h"
#include "wire/icrc.h"
#include "wire/opcodes.h"
#include "wire/qpn_blocks.h"

namespace softrdma::transport {

int UdpTransport::send_probes(uint32_t count, uint64_t nonce) {
  if (config_.shared == nullptr) return -EINVAL;
  const udp::SocketAddress to = udp::to_socket_address(local_gid_, port_);
  for (uint32_t index = 0; index < count; ++index) {
    const auto probe = udp::make_probe(index, nonce);
    if (sendto(rx_fd_, probe.data(), probe.size(), 0, to.get(), to.length) < 0) return -errno;
  }
  return 0;
}

int UdpTransport::steer(std::span<const udp::SlotIndex> members) {
  if (config_.shared == nullptr) return -EINVAL;
  return udp::attach_steering(rx_fd_, udp::steering_program(members));
}

// Only a member of the group sends probes, from the group's port on this address;
// one of another round (or anyone else's look-alike) changes nothing.
void UdpTransport::take_probe(const RxPacket& packet) {
  uint32_t index = 0;
  const SharedAddress& shared = *config_.shared;
  if (packet.src == local_gid_ && packet.src_port == port_ &&
      udp::read_probe(packet.bytes, shared.probe_nonce(), index)) {
    counters_.rx_probes.fetch_add(1, std::memory_order_relaxed);
    shared.learned_index(index);
    return;
  }
  counters_.rx_probes_ignored.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace softrdma::transport

namespace softrdma::transport {

namespace {

uint32_t dest_qp(std::span<const uint8_t> bth) {
  return uint32_t(bth[5]) << 16 | uint32_t(bth[6]) << 8 | bth[7];  // IBA 9.2
}

}  // namespace

void UdpTransport::own_block(uint32_t block) {
  if (block / 64 < kBlockWords)
    own_blocks_[block / 64].fetch_or(uint64_t(1) << (block % 64), std::memory_order_release);
}

// Block 0 holds QP0 and QP1: a CM MAD to QP1 goes to the process the MAD names
// (mad_slot; wire/cm_route.h), anything else there stays. Multicast stays with
// whoever received it (every member of a group receives its own copy).
bool UdpTransport::hand_over_if_not_mine(const RxPacket& packet) {
  if (wire::gid_is_multicast(packet.dst)) return false;
  const uint32_t qpn = dest_qp(packet.bytes);
  const uint32_t block = wire::qpn_block(qpn);
  const SharedAddress& shared = *config_.shared;
  uint32_t to = 0;
  if (block == 0) {
    if (qpn != wire::kGsiQpn || !shared.mad_slot) return false;
    to = shared.mad_slot(packet.bytes);
    if (to == 0) return false;  // this process's, or nobody's: its CM answers
  } else {
    if ((own_blocks_[block / 64].load(std::memory_order_acquire) >> (block % 64) & 1) != 0)
      return false;
    to = shared.handover_slot ? shared.handover_slot(block) : 0;
  }
  // Queued: the burst's packets for one owner leave in one datagram when
  // collect_received is done with the burst (flush_handovers).
  if (to != 0 && shared.handover != nullptr &&
      shared.handover->queue(to, packet.src, packet.src_port, packet.dst, packet.bytes,
                             packet.congestion_experienced)) {
    handovers_queued_ = true;
  } else {
    counters_.rx_no_owner.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

// Before the ring's buffers, which the queued packets point into, are read again.
void UdpTransport::flush_handovers() {
  handovers_queued_ = false;
  const udp::Handover::Flushed flushed = config_.shared->handover->flush();
  if (flushed.sent) counters_.rx_handed_over.fetch_add(flushed.sent, std::memory_order_relaxed);
  if (flushed.failed) counters_.rx_no_owner.fetch_add(flushed.failed, std::memory_order_relaxed);
}

size_t UdpTransport::collect_handed_over(std::span<RxPacket> packets) {
  std::array<udp::Handover::Received, udp::Handover::kRing> got;
  const size_t k = config_.shared->handover->receive({got.data(), std::min(got.size(), packets.size())});
  size_t n = 0;
  uint64_t bytes = 0, bad = 0;
  for (size_t i = 0; i < k; ++i) {
    RxPacket& out = packets[n];
    out = RxPacket{};
    out.bytes = got[i].packet;
    out.src = got[i].source;
    out.dst = got[i].destination;
    out.src_port = got[i].source_port;
    out.congestion_experienced = got[i].congestion_experienced;
    // As if from the socket (udp_rx.cc): the sender checked nothing.
    if (out.bytes.size() < wire::kBthBytes + wire::kIcrcBytes || !check_received_icrc(out)) {
      ++bad;
      continue;
    }
    bytes += out.bytes.size();
    ++n;
  }
  counters_.rx_packets.fetch_add(n, std::memory_order_relaxed);
  counters_.rx_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (bad) counters_.rx_bad_icrc.fetch_add(bad, std::memory_order_relaxed);
  return n;
}

}  // namespace softrdma::transport
