// The address a device serves when SOFTRDMA_ADDR is not set: the host's own, as a
// NIC or Linux Soft-RoCE serves the address of its interface, so that other hosts
// reach it (DESIGN.md §6; docs/decisions/host-rnic.md, "Defaults").
#pragma once

#include <cstdint>
#include <string>

namespace softrdma::transport::udp {

// The IPv4 address, as text, that this network namespace's default route leaves
// from (the kernel's own choice of source, asked by connecting a UDP socket: no
// packet is sent); else the first IPv4 address of an interface that is up and not
// loopback; else "127.0.0.1" (a namespace with loopback only: its one host).
std::string host_address();

// The same choice from what was found, so that it can be tested without a network:
// `route_source` the default route's source (0: no default route), `interface_addresses`
// the IPv4 addresses of up, non-loopback interfaces in the kernel's order. Host order.
uint32_t choose_host_address(uint32_t route_source, const uint32_t* interface_addresses,
                             size_t count);

}  // namespace softrdma::transport::udp
