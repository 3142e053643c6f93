// Socket plumbing for the UDP transport: addresses as GIDs, and sockets with the
// options RoCEv2 needs. Internal to src/transport/udp.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

#include "wire/ip_udp.h"

namespace softrdma::transport::udp {

using wire::Gid;

// "a.b.c.d" -> ::ffff:a.b.c.d; an IPv6 literal -> itself. nullopt when neither.
std::optional<Gid> parse_address(const std::string& text);
// "a.b.c.d" for an IPv4-mapped GID, the IPv6 text otherwise.
std::string address_to_string(const Gid& gid);
// Why `gid` cannot be a device's address (the wildcard, multicast, the limited
// broadcast address); null when it can.
const char* unusable_address(const Gid& gid);
// SOFTRDMA_ADDR's text as a device's address: nullopt, and what to tell the user,
// when it is not an address or one a device cannot be (unusable_address).
std::optional<Gid> parse_device_address(const std::string& text, std::string& error);

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};
// The socket address of `gid`, IPv4 for IPv4-mapped GIDs, IPv6 otherwise.
SocketAddress to_socket_address(const Gid& gid, uint16_t port);
// The same, written into `out` (large enough for either family) without clearing
// more than the address needs: the send path fills one per packet. Returns its length.
socklen_t write_socket_address(const Gid& gid, uint16_t port, sockaddr_in6& out);
// Writes `gid`/`port` from an AF_INET or AF_INET6 address; false for other families.
bool from_socket_address(const sockaddr_storage& address, Gid& gid, uint16_t& port);

// A nonblocking UDP socket of the family, never fragmenting (IP_PMTUDISC_DO): with
// DF set and the socket left unconnected, Linux sends IPv4 Identification 0
// (ip_select_ident), a value the ICRC covers. Returns the fd or -errno.
int open_udp_socket(bool ipv6);

// bind() to gid:port; returns 0 or the errno. `scope_id`: the interface of an IPv6
// link-local address.
int bind_socket(int fd, const Gid& gid, uint16_t port, uint32_t scope_id = 0);

// Whether some socket holds `gid`:`port` (a bind without SO_REUSEPORT is refused),
// whatever its user or group; false when the bind succeeds (released at once) or
// fails for another reason.
bool port_held(const Gid& gid, uint16_t port);

// The IPv6 link-local address (fe80::/10) of the interface that holds the IPv4
// address `ipv4` (host order), and that interface's index; false when it has none.
bool find_link_local(uint32_t ipv4, Gid& link_local, uint32_t& ifindex);

inline bool is_link_local(const Gid& gid) { return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80; }

// The index of the interface that holds `gid` (a 127/8 address or ::1: the
// loopback interface, which holds all of 127/8); 0 when none does.
uint32_t interface_of(const Gid& gid);

// Multicast sent from `fd` leaves through interface `ifindex` and is looped back to
// this host's own members (IP_MULTICAST_IF / IPV6_MULTICAST_IF, *_MULTICAST_LOOP).
void set_multicast_interface(int fd, bool ipv6, uint32_t ifindex);

// A socket that receives what is sent to multicast `group`:`port` on interface
// `ifindex` (docs/decisions/multicast.md): bound to the group address with
// SO_REUSEADDR, so that every process of the host that joined gets its own copy,
// and a member of the group on that interface. Returns the fd or -errno.
int open_group_socket(const Gid& group, uint16_t port, uint32_t ifindex);

// Sets the receive buffer, SO_RCVBUFFORCE first (needs CAP_NET_ADMIN, ignores
// net.core.rmem_max), then SO_RCVBUF. Returns the size the kernel reports (Linux
// doubles the request to account for its bookkeeping).
int set_receive_buffer(int fd, int bytes);
void set_send_buffer(int fd, int bytes);

// ECN (RFC 3168; RoCEv2 Annex A17.9): packets leave ECN-capable, ECT(0), so that a
// congested queue marks them CE instead of dropping them; and each datagram's ECN
// field is read on receipt (IP_RECVTOS / IPV6_RECVTCLASS). The ICRC does not cover
// the field (A17.8: the IP TOS / traffic class is masked), so marks never break it.
void set_ecn_capable(int fd, bool ipv6);
void report_ecn(int fd, bool ipv6);

// Asks for the local address of each datagram (IP_PKTINFO / IPV6_RECVPKTINFO).
void enable_packet_info(int fd, bool ipv6);

// IPv6 only: accept datagrams with UDP checksum 0 (UDP_NO_CHECK6_RX, RFC 6936).
// RFC 8200 forbids them and Linux drops them by default, but RoCEv2 senders (Linux
// Soft-RoCE among them) send 0 and let the ICRC protect the packet (DESIGN.md §3).
void accept_zero_udp_checksum(int fd);
// UDP_GRO on a receive socket (Linux 5.0): a run of segments of one flow is read as
// one datagram with its segment size. False when the kernel refuses.
bool enable_gro(int fd);
// Each datagram carries the kernel's receive timestamp (SO_TIMESTAMPNS).
void enable_receive_timestamps(int fd);

}  // namespace softrdma::transport::udp
