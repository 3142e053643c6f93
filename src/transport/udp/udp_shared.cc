// A shared address (docs/decisions/host-rnic.md): this process's socket is one of
// the address's SO_REUSEPORT group. Probes tell each member its index in the
// group; the steering program sends each packet to its QPN block's member.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"

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
    probes_read_.fetch_add(1, std::memory_order_relaxed);
    shared.learned_index(index);
    return;
  }
  probes_ignored_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace softrdma::transport
