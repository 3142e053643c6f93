// The address of an iWARP device (docs/decisions/host-rnic.md, "iWARP"): its GID
// table and its address for TCP, with no UDP port. iWARP's QPs speak over TCP
// connections (transport/tcp); an iWARP device that bound UDP 4791 as RoCE's does
// kept every other process of the host off its address for a port it never used.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::transport {

class AddressOnlyTransport final : public Transport {
 public:
  // `config.address` (checked to be this host's by a bind to port 0, released at
  // once), or the process's default loopback address. Null, and why, when it cannot.
  static std::unique_ptr<AddressOnlyTransport> open(const UdpConfig& config, std::string& error);

  // Nothing is sent: counted as tx_errors (the iWARP family never sends here).
  size_t tx_burst(std::span<TxPacket> packets) override;
  size_t rx_burst(std::span<RxPacket>) override { return 0; }
  int rx_fd() const override { return -1; }
  Gid local_gid() const override { return gid_; }
  // With the IPv6 link-local address of the interface that holds an IPv4 address,
  // as the RoCE device lists it (decisions/gid-table.md), so both tables agree.
  std::vector<Gid> local_gids() const override;
  bool refresh_addresses() override;
  TransportCounters counters() const override;
  std::string describe() const override;
  uint16_t udp_port() const override { return 0; }

 private:
  explicit AddressOnlyTransport(const Gid& gid) : gid_(gid) {}
  bool find_link_local(Gid& link_local) const;

  Gid gid_;
  Gid link_local_{};
  bool has_link_local_ = false;
  std::atomic<uint64_t> tx_refused_{0};
};

}  // namespace softrdma::transport
