// Counters of the software RNIC, by reason (DESIGN.md §7: every dropped or refused
// packet is counted). Relaxed atomics: they are statistics, not synchronisation.
// They live in the process's status segment (runtime/status_segment.h) when the
// runtime opened the device, so `softrdma status` reads them live.
#pragma once

#include <atomic>
#include <cstdint>

namespace softrdma::engine {

#define SOFTRDMA_ENGINE_COUNTERS(X)                                          \
  X(rx_packets)             /* packets handed to a QP */                     \
  X(rx_malformed)           /* failed wire::parse_packet */                 \
  X(rx_unknown_qp)          /* BTH DestQP names no QP */                     \
  X(rx_wrong_transport)     /* opcode of another transport than the QP's */  \
  X(rx_bad_pkey)            /* BTH P_Key does not match (IBA 9.6.1.1) */     \
  X(rx_wrong_source)        /* not from the QP's connected peer */           \
  X(rx_qp_not_ready)        /* QP in RESET/INIT/ERR (IBA 9.6.1.1: drop) */    \
  X(tx_packets)                                                              \
  X(tx_dropped)             /* transport refused: counted as loss */         \
  X(retransmit_timeouts)                                                     \
  X(retries)                /* go-back-N restarts charged to retry_cnt */    \
  X(retry_streak_max)       /* most consecutive retries without progress */  \
  X(retransmitted_packets)                                                   \
  X(idle_probes_sent)       /* RC liveness probes, retries included */       \
  X(idle_probes_failed)     /* probes unanswered: the QP went to Error */    \
  X(uc_packets_dropped)     /* UC: outside a message begun in sequence */    \
  X(uc_messages_dropped)    /* UC: a message lost part-way or refused */     \
  X(ud_bad_qkey)            /* UD: DETH Q_Key is not the QP's (IBA 10.2.5) */ \
  X(ud_no_receive_wqe)      /* UD: no receive WQE (no RNR in UD) */          \
  X(ud_too_long)            /* UD: GRH + payload longer than the WQE */      \
  X(seq_naks_sent)                                                           \
  X(seq_naks_received)                                                       \
  X(rnr_naks_sent)                                                           \
  X(rnr_naks_received)                                                       \
  X(error_naks_sent)                                                         \
  X(error_naks_received)                                                     \
  X(duplicate_requests)                                                      \
  X(duplicate_reads)                                                         \
  X(reads_split)                                                             \
  X(duplicate_atomics_replayed)                                              \
  X(responses_refused)                                                       \
  X(bad_read_responses)                                                      \
  X(out_of_sequence_responses)                                               \
  X(cq_overruns)                                                             \
  X(peer_access_unmapped)   /* a peer's request met munmap'ed registered memory */ \
  X(local_access_unmapped)  /* this side's own buffers were munmap'ed */ \
  X(memory_operations_refused) /* a bind or local invalidation refused */ \
  X(remote_invalidations_refused) /* a SEND with Invalidate's R_Key refused */ \
  X(rx_mcast_no_group)      /* DestQP 0xFFFFFF to a group no QP is attached to */ \
  X(rx_mcast_self_blocked)  /* a copy kept from the QP that sent it (BLOCK_SELF_MCAST_LB) */ \
  X(host_writes)            /* RDMA WRITEs executed into a same-host peer */ \
  X(host_reads)             /* RDMA READs executed from a same-host peer */ \
  X(host_atomics)           /* ATOMICs executed on a same-host peer's memory */ \
  X(host_bytes)             /* bytes those moved */ \
  X(host_calls)             /* cross-memory-attach system calls that moved them */ \
  X(host_mapped)            /* those that moved by loads and stores through shared pages */ \
  X(host_refused)           /* refused by the peer's published rights (NAK's status) */ \
  X(host_peer_not_ready)    /* the peer's QP could not receive: retried as a loss */ \
  X(host_sends)             /* SENDs and WRITEs with immediate placed in a peer's receive */ \
  X(host_rnr_waits)         /* no receive posted at the peer: waited its min_rnr_timer */ \
  X(host_receives)          /* receives of this device's QPs that peers placed */ \
  X(host_receives_dropped)  /* SRQ WQEs a peer consumed for a QP gone or reset, or left empty */ \
  X(host_datagrams_dropped) /* UD messages to a same-host peer that its QP would drop */ \
  X(host_doorbells)         /* a peer's progress loop woken: it slept when told of work */ \
  X(peer_faults_taken)      /* same-host peers ended one of this device's QPs */ \
  X(iwarp_bad_fpdus)        /* iWARP: an FPDU with a bad CRC or length (a Terminate) */ \
  X(iwarp_terminates_sent)  /* iWARP: errors reported to the peer (RFC 5040 §7) */ \
  X(iwarp_terminates_received) /* iWARP: the peer reported an error */ \
  X(iwarp_streams_lost)     /* iWARP: a QP's TCP connection ended under it */ \
  X(iwarp_nudges)           /* iWARP: zero-length WRITEs to a silent peer (siw's accept race) */ \
  X(cm_mads_resent)         /* rdma_cm: CM MADs sent again, unanswered in time (IBA 12.9.7) */ \
  X(sacks_sent)             /* selective repeat: SACKs naming what is held beyond a gap */ \
  X(sacks_received)                                                          \
  X(sack_resends)           /* resends begun because a SACK showed packets lost */ \
  X(tail_probes)            /* selective repeat: a PSN resent alone after a quiet probe interval */ \
  X(read_gaps_asked)        /* READ responses missing behind held ones: asked for again, alone */ \
  X(reorder_held)           /* requests held beyond a gap until it filled */ \
  X(responses_held)         /* READ responses held beyond a gap until it filled */ \
  X(reorder_dropped)        /* beyond what one SACK describes: dropped */ \
  X(sacks_refused)          /* a SACK on a connection without selective repeat, or malformed */ \
  X(ce_marked_received)     /* packets that arrived marked ECN CE (a queue on the way was full) */ \
  X(cnps_sent)              /* CNPs answering them (at most one per QP per 50 us) */ \
  X(cnps_received)          /* CNPs from peers: the QP's rate was cut (DCQCN) */

struct EngineCounters {
#define SOFTRDMA_DECLARE_COUNTER(name) std::atomic<uint64_t> name{0};
  SOFTRDMA_ENGINE_COUNTERS(SOFTRDMA_DECLARE_COUNTER)
#undef SOFTRDMA_DECLARE_COUNTER

  template <typename Fn>
  void for_each(Fn&& fn) const {
#define SOFTRDMA_VISIT_COUNTER(name) fn(#name, name.load(std::memory_order_relaxed));
    SOFTRDMA_ENGINE_COUNTERS(SOFTRDMA_VISIT_COUNTER)
#undef SOFTRDMA_VISIT_COUNTER
  }
};

// The engine's owner is the only writer (docs/decisions/threading.md): a relaxed
// load and store, no locked read-modify-write, no cache line taken from another
// core; a reader (`softrdma status`) sees a value at most one update old.
// One QP's traffic (issue 6: counters per QP). They live in the QP's row of the
// status segment when there is one (runtime/status_segment.h), else in the QP.
struct QpCounters {
  std::atomic<uint64_t> tx_packets{0};
  std::atomic<uint64_t> rx_packets{0};
  std::atomic<uint64_t> retransmitted_packets{0};
  // WRITE/READ/ATOMICs executed on a same-host peer's memory (no packet).
  std::atomic<uint64_t> host_operations{0};
  // Congestion control (rc/rate_control.h): CNPs that cut this QP's rate, and the
  // rate its pacer holds it to, in Mbit/s (a gauge; 0: unpaced, the line rate).
  std::atomic<uint64_t> cnps_received{0};
  std::atomic<uint64_t> rate_mbps{0};
  // The delay control's window (rc/delay_control.h) in hundredths of a packet (a
  // gauge; 0: not measured yet, or the control is off).
  std::atomic<uint64_t> window_hundredths{0};
  // What that window answers, in microseconds (gauges; 0 likewise): the least
  // round trip measured (the base), the latest, and the target the window aims
  // for (the base + the queueing target + flow scaling).
  std::atomic<uint64_t> base_rtt_us{0};
  std::atomic<uint64_t> rtt_us{0};
  std::atomic<uint64_t> target_us{0};
};

inline void bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// For the gauges among the counters (`retry_streak_max`): keeps the largest value.
inline void raise_to(std::atomic<uint64_t>& c, uint64_t value) {
  uint64_t cur = c.load(std::memory_order_relaxed);
  while (cur < value && !c.compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
  }
}

}  // namespace softrdma::engine
