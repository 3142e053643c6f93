// What the UDP transport counts, as cells it counts into (issue 14 defect 5): in
// the transport itself, or where its owner asks (UdpConfig::counters): the
// runtime puts them in the process's status segment (runtime/status_segment.h),
// so that `softrdma status` shows every packet the transport dropped (bad ICRC,
// truncated datagram, refused send) beside the engine's counters, live.
// Relaxed atomics: statistics, not synchronisation; several threads send.
#pragma once

#include <atomic>
#include <cstdint>

namespace softrdma::transport {

#define SOFTRDMA_UDP_COUNTERS(X)                                                       \
  X(tx_packets)                                                                        \
  X(tx_bytes)                                                                          \
  X(tx_errors)        /* dropped: the kernel refused the packet, or unsendable */      \
  X(tx_port_fallback) /* sent from the transport's port, not 0xC000|hash(QPN) */       \
  X(tx_gso_sends)     /* sends of several segments (UDP_SEGMENT) */                    \
  X(tx_gso_segments)  /* packets those carried */                                      \
  X(tx_gso_refused)   /* the kernel refused UDP_SEGMENT: sent one by one */            \
  X(rx_packets)                                                                        \
  X(rx_bytes)                                                                          \
  X(rx_bad_icrc)       /* dropped: ICRC mismatch */                                    \
  X(rx_truncated)      /* dropped: shorter than BTH + ICRC, or larger than a buffer */ \
  X(rx_ipv4_id_solved) /* ICRC matched after solving for the sender's IPv4 ID */       \
  X(rx_gro_datagrams)  /* datagrams that held several packets (UDP_GRO) */             \
  X(rx_gro_segments)   /* packets those held */                                        \
  X(rx_buffer_bytes)   /* gauge: the effective socket receive buffer */                \
  X(rx_ce_marked)      /* ECN Congestion Experienced in the IP header (RFC 3168) */    \
  /* A shared address (docs/decisions/host-rnic.md): */                                \
  X(rx_handed_over)    /* another process's QPN block: handed over to it */            \
  X(rx_no_owner)       /* dropped: no member takes it, or its queue is full */         \
  X(rx_probes)         /* probes read: this socket's index learned */                  \
  X(rx_probes_ignored) /* dropped: a probe of another round, or not from here */

struct UdpCounters {
#define SOFTRDMA_DECLARE_UDP_COUNTER(name) std::atomic<uint64_t> name{0};
  SOFTRDMA_UDP_COUNTERS(SOFTRDMA_DECLARE_UDP_COUNTER)
#undef SOFTRDMA_DECLARE_UDP_COUNTER

  template <typename Fn>
  void for_each(Fn&& fn) const {
#define SOFTRDMA_VISIT_UDP_COUNTER(name) fn(#name, name.load(std::memory_order_relaxed));
    SOFTRDMA_UDP_COUNTERS(SOFTRDMA_VISIT_UDP_COUNTER)
#undef SOFTRDMA_VISIT_UDP_COUNTER
  }
};

}  // namespace softrdma::transport
