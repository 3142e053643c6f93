// The network interface behind the device's address: what a kernel RoCE device
// reports from its netdev (port MTU, the GID's ndev_ifindex).
#pragma once

#include <infiniband/verbs.h>

#include "transport/transport.h"

namespace softrdma::verbs {

struct Netdev {
  unsigned ifindex = 0;  // 0: no interface holds the address
  int mtu = 0;           // bytes; 0 when unknown
  bool loopback = false;
};

// Looks the address up among the host's interfaces (getifaddrs).
Netdev netdev_of(const transport::Gid& gid);

// The largest IB MTU whose RoCEv2 packets fit the interface MTU, as Linux computes
// it for RoCE devices (iboe_get_mtu: GRH/IP + UDP + BTH + XRC ETH + AtomicETH +
// ICRC = 96 bytes of headroom), capped to what the engine supports (4096).
ibv_mtu active_mtu_for(const Netdev& netdev);

}  // namespace softrdma::verbs
