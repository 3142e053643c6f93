// Placing a message into a receive WQE of another softrdma process of this host,
// as that process's RNIC would on receiving it (docs/decisions/same-host.md,
// "SENDs"): what an RC or UC requester (rc/host_send.cc) and a UD
// sender (ud/datagram_host.cc) share. The sender claims the WQE in the peer's node
// segment (samehost::RecvState), reads its scatter list (from the segment for a
// small queue, else from the peer's memory), checks each L_Key against what the
// peer published (IBA 10.6.3.1: PD, local write, range), writes the payload (by
// stores when it lands on shared pages, else by cross-memory attach) and the
// WQE's result, and leaves a notice. Nothing read from the segment is trusted.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <span>

#include "engine/wqe.h"
#include "samehost/host.h"
#include "samehost/recv_queue.h"

namespace softrdma::engine {

struct EngineCounters;
class MrTable;
class Pd;

// Scatter entries of a peer's receive WQE this side places into, at most.
inline constexpr uint32_t kMaxPeerSges = 64;

// The peer's receive queue a message goes to (its QP's own, or its SRQ's).
struct PeerRecvTarget {
  samehost::Peer* peer = nullptr;
  uint32_t pd = 0;  // the PD its scatter entries' L_Keys must be of
  uint32_t recv_queue = 0;
  samehost::RecvState* rq = nullptr;
  // Several senders fill it at once (an SRQ's, a UD QP's): results are marked by
  // `seq` and always in the segment.
  bool many_senders = false;
  uint32_t min_rnr_timer = 0;
};

// Where a message lands in the peer's memory, and the shared pages of the keys
// that granted each part (samehost/shared_pages.h).
struct PeerIovecs {
  std::array<iovec, kMaxPeerSges + 1> remote;
  std::array<samehost::SharedSpan, kMaxPeerSges + 1> spans;
  uint32_t count = 0;
};

// What this side gathers from: the WQE's buffers (and a UD message's GRH), and
// room for the result.
inline constexpr uint32_t kMaxLocalIovecs = kMaxPeerSges + 2;

// The WQE's gather list as addresses of this process: its inline data, or each
// non-empty entry resolved through `mrs` (null where the L_Key does not resolve:
// IBA 10.6.3.1, the local protection error the wire's gather finds). How many.
uint32_t gather_iovecs(const SendWqe& wqe, const MrTable& mrs, const Pd* pd, std::span<iovec> out);

// Whether every byte of `local` can be read here: one byte of each page, through
// the fault-guarded copy (guarded_memory.h). After a failed placement, to tell
// whose memory was missing.
bool readable_here(std::span<const iovec> local);

// Opens the target for the peer's published queue `recv_queue` of a QP granted
// with `grant`: false when the queue is closed or garbage.
bool open_peer_recv(samehost::Peer& peer, const samehost::QpGrant& grant, uint32_t dest_qpn,
                    PeerRecvTarget& target);

// The next WQE of the peer's queue, if one is posted and not yet claimed.
bool claim_peer_recv(samehost::RecvState& rq, uint32_t& index);

enum class PeerScatter : uint8_t {
  kGo,
  kTooLong,     // the message is longer than the WQE (LOC_LEN_ERR there)
  kRefused,     // an L_Key the peer's responder would refuse (LOC_PROT_ERR there)
  kUnreadable,  // the queue's shape is garbage or its memory cannot be read
};

// Where WQE `index` of the target's queue scatters a message of `length` bytes,
// clipped to the message.
PeerScatter scatter_into_peer(const PeerRecvTarget& target, uint32_t index, uint64_t length,
                              PeerIovecs& out, EngineCounters& counters);

// The message and its result: `local` holds the payload (empty when the message
// failed there, `result.status`) and one spare entry. `result.seq` is set here
// for a queue of many senders, after everything else. 0 or an errno: EFAULT when
// a buffer was missing (this side's or the peer's).
int place_into_peer(const PeerRecvTarget& target, uint32_t index, std::span<iovec> local,
                    uint32_t local_count, PeerIovecs& remote, samehost::RecvResult result,
                    EngineCounters& counters);

// A WQE claimed and then not placed, in a queue of many senders: marked so, the
// owner consumes it without a completion. Others may have claimed after it.
void void_peer_claim(const PeerRecvTarget& target, uint32_t index, uint32_t qpn);

// Tells the owner the queue has placed WQEs, waking its progress loop if it sleeps.
void notify_peer_recv(const PeerRecvTarget& target, EngineCounters& counters);

}  // namespace softrdma::engine
