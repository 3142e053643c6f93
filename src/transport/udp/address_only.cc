#include "transport/udp/address_only.h"

#include <unistd.h>

#include <cstring>

#include "transport/udp/udp_socket.h"

namespace softrdma::transport {

std::unique_ptr<AddressOnlyTransport> AddressOnlyTransport::open(const UdpConfig& config,
                                                                 std::string& error) {
  Gid gid = wire::gid_from_ipv4(default_loopback_address(0));
  if (!config.address.empty()) {
    const std::optional<Gid> parsed = udp::parse_device_address(config.address, error);
    if (!parsed) return nullptr;
    gid = *parsed;
    // The address must be this host's: a bind to an ephemeral port says so.
    const int fd = udp::open_udp_socket(!wire::gid_is_ipv4(gid));
    const int rc = fd < 0 ? -fd : udp::bind_socket(fd, gid, 0);
    if (fd >= 0) close(fd);
    if (rc != 0) {
      error = "softrdma: SOFTRDMA_ADDR " + config.address + " cannot be used: " +
              std::strerror(rc) +
              (rc == EADDRNOTAVAIL ? " (the address is on no interface of this host)" : "");
      return nullptr;
    }
  }
  std::unique_ptr<AddressOnlyTransport> transport(new AddressOnlyTransport(gid));
  transport->refresh_addresses();
  return transport;
}

size_t AddressOnlyTransport::tx_burst(std::span<TxPacket> packets) {
  tx_refused_.fetch_add(packets.size(), std::memory_order_relaxed);
  return packets.size();  // taken and dropped: retrying could not help
}

bool AddressOnlyTransport::find_link_local(Gid& link_local) const {
  if (!wire::gid_is_ipv4(gid_) || (wire::gid_to_ipv4(gid_) >> 24) == 127) return false;
  uint32_t ifindex = 0;
  return udp::find_link_local(wire::gid_to_ipv4(gid_), link_local, ifindex);
}

// As UdpTransport::refresh_addresses: the interface's link-local address may come
// after the device opened, and go.
bool AddressOnlyTransport::refresh_addresses() {
  Gid found{};
  const bool present = find_link_local(found);
  if (present == has_link_local_ && (!present || found == link_local_)) return false;
  has_link_local_ = present;
  link_local_ = present ? found : Gid{};
  return true;
}

std::vector<Gid> AddressOnlyTransport::local_gids() const {
  if (!has_link_local_) return {gid_};
  return {gid_, link_local_};
}

TransportCounters AddressOnlyTransport::counters() const {
  TransportCounters c;
  c.tx_errors = tx_refused_.load(std::memory_order_relaxed);
  return c;
}

std::string AddressOnlyTransport::describe() const {
  const std::string address = udp::address_to_string(gid_);
  return (wire::gid_is_ipv4(gid_) ? address : "[" + address + "]") + " (no UDP port)";
}

}  // namespace softrdma::transport
