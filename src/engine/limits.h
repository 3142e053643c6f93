// What the software RNIC can do, reported truthfully by queries and enforced by
// every create/post call (issue 3). One place for all limits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace softrdma::samehost {
class Host;
}

namespace softrdma::engine {

struct EngineCounters;

// Largest requester window a setting may ask for (SOFTRDMA_WINDOW).
inline constexpr uint32_t kMaxWindowPackets = 4096;
// QP1, the General Services Interface (IBA 13.5.1), and its well-known Q_Key
// (IBA 13.5: the GSI's is 0x80010000): where Communication Manager MADs go.
inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;
// 1 GiB, as RoCE NICs report (IBA allows up to 2^31).
inline constexpr uint32_t kMaxMessageBytes = 1u << 30;
// IBA 9.7.1: PSNs compare within half their space, so a requester's unacknowledged
// PSNs must stay fewer than 2^23. They are at most a window's worth of sent packets
// plus the PSNs of the message starting now (at the smallest path MTU, 256 B).
static_assert(kMaxWindowPackets + kMaxMessageBytes / 256 < (1u << 23));

struct DeviceLimits {
  uint32_t max_qp = 131072;  // issue 6: 65 536 RC QPs in one process, with room
  uint32_t max_qp_wr = 16384;        // per work queue
  uint32_t max_sge = 32;             // per work request
  uint32_t max_inline_data = 512;    // bytes copied at post time
  uint32_t max_srq = 16384;
  uint32_t max_srq_wr = 16384;
  uint32_t max_srq_sge = 32;
  uint32_t max_xrcd = 1024;
  uint32_t max_ah = 1 << 20;
  uint32_t max_cq = 16384;
  uint32_t max_cqe = 1 << 20;
  uint32_t max_pd = 16384;
  uint32_t max_mr = 1 << 20;
  uint64_t max_mr_size = uint64_t(1) << 40;
  // Memory windows: each takes a 24-bit index of the key space (engine/mw.h).
  uint32_t max_mw = 1 << 16;
  // Device memory (ibv_alloc_dm(3)): host memory the device owns, as much as a
  // RoCE NIC's on-chip memory offers (256 KiB), so programs sized for one run here.
  uint64_t max_dm_size = 256 * 1024;
  // Tag matching SRQs (docs/decisions/tag-matching.md): tags a TM SRQ may hold,
  // list operations one ibv_post_srq_ops call may carry (they execute before it
  // returns, so none stays outstanding after), SGEs of a tagged buffer, and the
  // rendezvous request a sender may send (TMH, RVH and meta-data): the smallest
  // path MTU, so a request is one packet and its READ starts as it arrives.
  uint32_t max_tm_tags = 1024;
  uint32_t max_tm_ops = 1024;
  uint32_t max_tm_sge = 16;
  uint32_t max_rndv_hdr_size = 256;
  uint32_t max_qp_rd_atom = 128;       // responder: max_dest_rd_atomic
  uint32_t max_qp_init_rd_atom = 128;  // requester: max_rd_atomic
  uint32_t max_msg_size = kMaxMessageBytes;
  uint32_t max_path_mtu_bytes = 4096;
  // Multicast (docs/decisions/multicast.md): each group a device joins costs a
  // socket of the UDP transport (one fd), so groups are counted; QPs per group as
  // rxe's default (RXE_MAX_MCAST_QP_ATTACH).
  uint32_t max_mcast_grp = 64;
  uint32_t max_mcast_qp_attach = 56;
  uint32_t max_total_mcast_qp_attach = 64 * 56;
};

// ECE options softrdma understands (the low bits; docs/decisions/selective-repeat.md).
inline constexpr uint32_t kEceSelectiveRepeat = 1u << 0;
// With selective repeat: SACKs of 512 PSNs (wire/sack.h kWideSackSpan), not 128.
inline constexpr uint32_t kEceWideSack = 1u << 1;
// With selective repeat: ACKs and SACKs say how long the responder held what they
// answer (op::kRcTimedAck, wire/ack_hold.h), which the requester's delay control
// takes off its round trip (docs/decisions/congestion-control.md, "Host delay").
inline constexpr uint32_t kEceAckHold = 1u << 2;

// When an RC connection runs selective repeat (selective_repeat.h) instead of
// IBA's go-back-N: when both ends agreed through ECE (the rdma_cm's REQ/REP, or
// ibv_query_ece/ibv_set_ece exchanged by the application), on every RC QP (both
// ends must be softrdma: SOFTRDMA_SELECTIVE_REPEAT=always), or never.
enum class SelectiveRepeatMode : uint8_t { kNegotiated, kAlways, kOff };

struct DeviceConfig {
  std::string name = "softrdma0";
  SelectiveRepeatMode selective_repeat = SelectiveRepeatMode::kNegotiated;
  // Congestion control of RoCEv2 connections (docs/decisions/congestion-control.md).
  // DCQCN: CE-marked packets are answered with CNPs, and CNPs cut the QP's rate,
  // which a pacer holds it to. Off: neither (the transport then sends Not-ECT).
  bool dcqcn = true;
  // Swift: the round trip an RC requester measures bounds its window.
  bool delay_control = true;
  // Swift's queueing delay allowed above the base round trip.
  int64_t target_queueing_ns = 750'000;
  // DCQCN's line rate, where a connection starts and recovers to, bytes per ns.
  double line_rate_bytes_per_ns = 5.0;  // 40 Gbit/s
  DeviceLimits limits;
  // Requester window: at most this many unacknowledged packets per QP. IBA leaves
  // pacing to the implementation; a socket buffer is finite, and go-back-N pays for
  // every packet in flight when one is lost.
  uint32_t max_unacked_packets = 64;
  // The window of an RC connection that runs selective repeat (agreed with a
  // softrdma peer): a loss there costs a resend of what was lost, not of the
  // window, and on a software path 64 packets per round trip was the limit (256
  // moves 1.2-1.5x what 64 does on the loss bed; with the delay control's slow
  // start, an incast through a 128 KiB buffer drops no more than with 64:
  // docs/decisions/selective-repeat.md, "The window"). At most the SACK's span.
  uint32_t selective_window = 256;
  // Where the delay control's window starts, in packets: it doubles per round trip
  // from there to the window above while the round trip stays low (slow start;
  // rc/delay_control.h). At or above the window: a connection starts at it.
  uint32_t initial_window = 32;
  // AckReq (IBA 9.7.5.1.4) is set on the last packet of each message and at least
  // every this many packets of a long one, so ACKs stay timely and coalesced.
  uint32_t ack_request_interval = 16;
  // The longest wait between two consecutive retransmission timeouts of an RC QP
  // whose Local ACK Timeout is shorter (docs/decisions/retransmission.md): waits
  // double from the measured round trip up to this, so a peer that stalls for
  // seconds survives while a dead one is still reported within
  // (retry_cnt + 1) x this.
  int64_t max_retry_interval_ns = 1'000'000'000;
  // An RC QP in RTS with nothing outstanding that has heard nothing from its peer
  // for this long sends it a probe (a duplicate request every responder answers,
  // docs/decisions/retransmission.md "Idle connections"); 0: never.
  int64_t idle_probe_interval_ns = 1'000'000'000;
  // Where the engine's counters live (the runtime puts them in the process's status
  // segment, runtime/status_segment.h); null: in the device itself.
  EngineCounters* counters = nullptr;
  // The same-host path (docs/decisions/same-host.md): this process's node segment
  // and its peers; null: every QP uses the wire.
  samehost::Host* host = nullptr;
  // MRs of at most this many bytes share their whole pages with same-host peers
  // (engine/mr.cc MrTable::share_pages); 0: none.
  uint64_t shared_pages_max_bytes = uint64_t(64) << 20;
  // The address is shared with the host's other processes (docs/decisions/
  // host-rnic.md): QPNs come from blocks of this process's (wire/qpn_blocks.h),
  // each taken from the host's registry by this call (0: none left). Empty: the
  // address is this process's alone and QPNs may be any.
  std::function<uint32_t()> take_qpn_block;
};

}  // namespace softrdma::engine
