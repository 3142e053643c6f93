// The UDP transport's receive ring (udp_rx.cc), shared with the constructor.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <memory>
#include <vector>

#include "transport/udp/udp_transport.h"

namespace softrdma::transport {

// Room for the control messages a datagram may carry.
struct alignas(cmsghdr) ControlBuffer {
  // IP_PKTINFO/IPV6_PKTINFO, UDP_GRO, IP_TOS/IPV6_TCLASS, SCM_TIMESTAMPNS.
  uint8_t bytes[CMSG_SPACE(sizeof(in6_pktinfo)) + 2 * CMSG_SPACE(sizeof(int)) +
                CMSG_SPACE(sizeof(timespec))];
};

// A datagram may be up to this long: with UDP_GRO the kernel hands over a run of
// segments of one flow as one datagram (at most what a UDP datagram can hold).
inline constexpr size_t kRxDatagramBytes = 65536;

// recvmmsg's buffers, and how far the datagrams of its last call were taken: a
// coalesced datagram may hold more packets than one rx_burst may return.
struct UdpTransport::RxRing {
  explicit RxRing(size_t datagrams);
  void prepare(size_t count);  // recvmmsg overwrites lengths and flags: reset them
  uint8_t* datagram(size_t i) { return buffers.get() + i * kRxDatagramBytes; }

  // Not value-initialised: pages are touched only when a datagram lands there.
  std::unique_ptr<uint8_t[]> buffers;
  std::vector<mmsghdr> msgs;
  std::vector<iovec> iovs;
  std::vector<sockaddr_storage> names;
  std::vector<ControlBuffer> controls;

  size_t received = 0;  // datagrams the last recvmmsg returned
  size_t next = 0;      // the datagram being taken apart
  size_t offset = 0;    // where its next segment starts
  // CLOCK_MONOTONIC just after that recvmmsg returned, and CLOCK_REALTIME (the
  // receive timestamps' clock) less CLOCK_MONOTONIC then.
  int64_t called_ns = 0;
  int64_t realtime_offset_ns = 0;
  // What the datagram being taken apart says of all its segments.
  Gid src{}, dst{};
  uint16_t src_port = 0;
  size_t segment = 0;  // bytes per segment (UDP_GRO), or the whole datagram
  // ECN CE: GRO coalesces only datagrams whose IP headers match but for length and
  // checksum (the kernel's inet_gro_receive flushes on a TOS change), so one mark
  // holds for every segment.
  bool congestion_experienced = false;
  int64_t arrival_ns = 0;  // CLOCK_MONOTONIC (one timestamp for all its segments)
};

}  // namespace softrdma::transport
