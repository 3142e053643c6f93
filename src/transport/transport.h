// Packet I/O for the software RNIC (DESIGN.md §2, after eRPC): a handful of calls,
// one virtual call per burst, not per packet. The engine hands a transport
// complete RoCEv2 UDP payloads (BTH .. ICRC, ICRC bytes reserved); the transport
// owns everything below: addresses, sockets, IP/UDP headers and the ICRC, which
// covers those headers (wire/icrc.h) and so is computed and checked here.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wire/ip_udp.h"

namespace softrdma::transport {

using wire::Gid;

// The UDP source port of a QP's packets (RoCEv2, IBA Annex A17; DESIGN.md §3): the
// top two bits set (0xC000..0xFFFF, the range Linux Soft-RoCE uses) and 14 bits of
// a hash of the QPN, so that routers spreading flows by 5-tuple (ECMP) keep a QP's
// packets on one path (no reordering) while spreading different QPs.
constexpr uint16_t roce_source_port(uint32_t qpn) {
  uint32_t h = (qpn & 0xffffffu) * 0x9e3779b1u;  // Fibonacci hashing: mixes low bits up
  h ^= h >> 15;
  return uint16_t(0xC000u | ((h >> 8) & 0x3fffu));
}

// A packet to send. Each packet of a burst has a buffer of its own (the transport
// writes each one's ICRC, and the datagrams of one GSO send carry different IPv4
// IDs). On return from tx_burst, for every packet taken: the ICRC is written into
// `bytes`, and `src` / `src_port` hold the address and port actually
// used (a transport may fall back to its own port), so a decorator (capture) can
// rebuild the exact IP/UDP headers.
struct TxPacket {
  std::span<uint8_t> bytes;  // whole UDP payload; the transport writes the ICRC
  Gid src;                   // source GID (selects the local address)
  Gid dst;                   // destination GID
  uint16_t src_port;         // wanted UDP source port (0xC000 | hash(QPN)): entropy
  // Set by tx_burst: the IPv4 Identification the packet leaves with (the ICRC
  // covers it; a capture writes it), 0 for a single datagram.
  uint16_t ipv4_id = 0;
};

// A bit error on the wire, for fault injection only (FaultInjector keeps them,
// docs/decisions/transport.md): packet `packet` of a burst leaves with `mask`
// XORed into bytes[at] *after* the ICRC was written, so the receiver's ICRC check
// must catch it. The transport XORs it back out before returning: the caller's
// buffer (which it may retransmit from) is left as it was, ICRC apart.
struct BitError {
  size_t packet = 0;  // index in the burst
  uint16_t at = 0;
  uint8_t mask = 0;
};

// Flips the bit errors of packets [first, end) of `packets`; a second call undoes
// the first. `packets` is the whole burst the errors index.
inline void flip_bit_errors(std::span<TxPacket> packets, std::span<const BitError> errors,
                            size_t first, size_t end) {
  for (const BitError& e : errors) {
    if (e.packet < first || e.packet >= end || e.packet >= packets.size()) continue;
    std::span<uint8_t> bytes = packets[e.packet].bytes;
    if (e.at < bytes.size()) bytes[e.at] ^= e.mask;
  }
}

struct RxPacket {
  std::span<uint8_t> bytes;  // whole UDP payload, ICRC checked; valid until next rx_burst
  Gid src;                   // sender's address as a GID
  Gid dst;                   // the local address it arrived on
  uint16_t src_port = 0;
  // IPv4 only: the sender's Identification and DF as solved from the ICRC (icrc.h),
  // so a capture can write a header the ICRC checks against.
  uint16_t ipv4_id = 0;
  bool ipv4_df = true;
  // The IP header's ECN field said Congestion Experienced (RFC 3168: CE, 0b11): a
  // queue on the way marked it instead of dropping it (RoCEv2 Annex A17.9.1: the
  // receiver answers with a CNP; docs/decisions/congestion-control.md).
  bool congestion_experienced = false;
  // When the packet reached this host: the kernel's receive timestamp
  // (SO_TIMESTAMPNS), on CLOCK_MONOTONIC (the engine's clock), in nanoseconds; 0
  // when not known. The congestion control's round trip ends there, not when this
  // process got round to the packet: a descheduled process is not a congested
  // network (docs/decisions/congestion-control.md, "Host delay").
  int64_t arrival_ns = 0;
};

// Why the transport discarded something, counted (DESIGN.md §7).
struct TransportCounters {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_errors = 0;         // the kernel refused a packet
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t rx_bad_icrc = 0;       // dropped: ICRC mismatch
  uint64_t rx_truncated = 0;      // dropped: shorter than BTH + ICRC, or larger than a buffer
  uint64_t rx_ipv4_id_solved = 0; // ICRC matched only after solving for the IPv4 ID
  uint64_t rx_ce_marked = 0;      // arrived with ECN Congestion Experienced
  uint64_t tx_port_fallback = 0;  // sent from the transport's own port, not src_port
  uint64_t rx_buffer_bytes = 0;   // effective socket receive buffer (a gauge)
  uint64_t tx_gso_sends = 0;      // sends of several segments (UDP_SEGMENT)
  uint64_t tx_gso_segments = 0;   // packets those carried
  uint64_t rx_gro_datagrams = 0;  // datagrams that held several packets (UDP_GRO)
  uint64_t rx_gro_segments = 0;   // packets those held
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Sends what it can of `packets` now; returns how many were taken (the rest may be
  // retried later). Thread-safe: posting threads and the progress thread both send.
  virtual size_t tx_burst(std::span<TxPacket> packets) = 0;
  // tx_burst with bit errors on the wire (BitError; fault injection only). A
  // transport that cannot show them sends the packets intact.
  virtual size_t tx_burst_with_errors(std::span<TxPacket> packets,
                                      std::span<const BitError> /*errors*/) {
    return tx_burst(packets);
  }

  // Receives up to packets.size() packets without blocking; returns the count. The
  // bytes stay valid until the next rx_burst. Called by one thread at a time.
  virtual size_t rx_burst(std::span<RxPacket> packets) = 0;

  // A file descriptor that becomes readable when rx_burst has work (-1: none, poll).
  virtual int rx_fd() const = 0;

  // The GID this transport receives on (the device's GID table is built from it).
  virtual Gid local_gid() const = 0;

  // Every address this transport receives on and sends from, local_gid() first; a
  // further one is the interface's IPv6 link-local address (docs/decisions/gid-table.md).
  virtual std::vector<Gid> local_gids() const { return {local_gid()}; }
  // The host's addresses changed (docs/decisions/gid-table.md): serve what is new,
  // stop serving what went. True when local_gids() changed. With the engine held.
  virtual bool refresh_addresses() { return false; }

  virtual TransportCounters counters() const = 0;

  // Human-readable address, e.g. "127.0.27.3:4791".
  virtual std::string describe() const = 0;

  // The IP TOS / traffic class its packets leave with: the ECN field's ECT(0) when
  // the transport sends ECN-capable (docs/decisions/congestion-control.md); a
  // capture writes it into the headers it rebuilds.
  virtual uint8_t tx_tos() const { return 0; }

  // The UDP port RoCEv2 packets are sent to and received on (IANA 4791; a test or a
  // user may configure another). The ICRC covers it.
  virtual uint16_t udp_port() const { return wire::kRoceUdpPort; }

  // Multicast (docs/decisions/multicast.md): from join_group until leave_group,
  // packets sent to the multicast address `group` (wire::gid_is_multicast) by
  // anyone on the network, this host's own transports included, arrive in
  // rx_burst with RxPacket::dst == group. Sending to a group needs no join: a
  // TxPacket's dst may be a group. Joining a group joined already is a no-op; 0 or
  // an errno (EOPNOTSUPP: this transport cannot reach that kind of group). Cold
  // path: called with the engine held, never concurrently with rx_burst.
  virtual int join_group(const Gid& /*group*/) { return EOPNOTSUPP; }
  // Stops receiving `group`; 0, or ENOENT when it was not joined.
  virtual int leave_group(const Gid& /*group*/) { return ENOENT; }
};

}  // namespace softrdma::transport
