// RC requester (IBA 9.7.4 "requester side"): assigns PSNs to send WQEs, segments
// them to the path MTU and sends request packets within the window; rewinds for
// go-back-N retransmission when the completer asks.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <span>

#include "engine/access_check.h"
#include "engine/clock.h"
#include "engine/peer_recv.h"
#include "engine/wqe.h"
#include "samehost/recv_queue.h"
#include "samehost/shared_pages.h"
#include "wire/packet.h"

namespace softrdma::samehost {
struct Peer;
}

namespace softrdma::engine::rc {

class RcConnection;
struct HostBatch;

// Work queue indices grow forever mod 2^32: compare them as a ring.
inline bool psn_index_before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }

class Requester {
 public:
  explicit Requester(RcConnection& conn) : conn_(conn) {}

  // Sends as much queued work as the window, fences and max_rd_atomic allow.
  // UC has no window: a burst per engine turn; true while more waits for the next.
  bool run(Nanos now);
  // What a rewind is for: a retry (IBA 9.7.6.1.3, charged to retry_cnt) after a NAK
  // or a response gap, one after a timeout, or the resend an RNR NAK asked for.
  enum class Rewind : uint8_t { kRnr, kRetry, kRetryAfterTimeout };
  // Go back N (IBA 9.7.4.1.3): resend from `psn`, which lies in an outstanding WQE.
  // After a timeout: resume with kResumeWindow packets, the window growing by what
  // each ACK acknowledges, as TCP restarts after an RTO. A retry sends its first
  // packet twice (docs/decisions/retransmission.md "Resuming").
  void rewind(uint32_t psn, Rewind why);
  // The completer saw everything before `una` acknowledged.
  void on_progress(uint32_t una);
  // Packets a gentle restart resends before the first ACK comes back: two, each
  // asking for an ACK, so that one lost packet or ACK does not waste the retry.
  static constexpr uint32_t kResumeWindow = 2;
  // Hold all sending until `until` (after an RNR NAK, IBA 9.7.5.2.8).
  void pause_until(Nanos until) { paused_until_ = until; }
  Nanos paused_until() const { return paused_until_; }

  void reset(uint32_t sq_psn);
  uint32_t next_psn() const { return next_psn_; }
  // First PSN never sent: a response beyond it answers nothing (IBA 9.7.5.2.1).
  uint32_t high_psn() const { return high_psn_; }
  uint32_t send_index() const { return send_index_; }
  // READ/ATOMIC WQEs sent and not yet completed (IBA 9.7.4.1.5: max_rd_atomic).
  uint32_t rd_atomic_outstanding() const;

 private:
  bool may_start(const SendWqe& wqe) const;
  bool start(SendWqe& wqe, Nanos now);
  // Assigns the WQE its PSNs: it goes on the wire.
  bool start_on_wire(SendWqe& wqe);
  // The same-host path (requester_host.cc): what the peer's responder would
  // answer, in access_check.h's Verdict.
  // IBA 9.6.1.1: a QP takes requests in RTR, RTS, SQD and SQE.
  static bool takes_requests_on_host(uint32_t state);
  bool executes_on_host(const SendWqe& wqe) const;
  // The type the peer's QP has: the same, or XRC receive for an XRC send QP.
  uint32_t peer_qp_type() const;
  // The peer QP's grant with an XRC request's SRQ in it (its PD and queue).
  Verdict as_request_sees_it(const SendWqe& wqe, samehost::Peer& peer,
                                 samehost::QpGrant& target) const;
  bool execute_on_host(SendWqe& wqe, Nanos now);
  bool execute_alone_on_host(SendWqe& wqe, Nanos now);
  void mark_executed_on_host(SendWqe& wqe);
  // requester_host_batch.cc: true when the WQE joined the batch of WRITEs.
  bool batch_on_host(SendWqe& wqe);
  // Executes the batch; false when the QP must stop (a retry, an error).
  bool flush_host_batch(Nanos now);
  // Where a WRITE, READ or atomic lands in the peer: its address there, and the
  // shared pages (samehost/shared_pages.h) of the key that granted it.
  struct HostRange {
    uint64_t addr = 0;
    samehost::SharedSpan span;
  };
  // `cache`: an open batch's lookups (host_batch.h), or null.
  Verdict check_on_host(const SendWqe& wqe, samehost::Peer& peer, HostRange& range,
                            HostBatch* cache = nullptr) const;
  uint32_t local_iovecs(const SendWqe& wqe, std::span<iovec> out) const;
  int transfer_on_host(SendWqe& wqe, samehost::Peer& peer, const HostRange& range);
  // The same through the peer's shared pages, by loads and stores: 0, EFAULT, or
  // ENOENT when the range is not on pages mapped here (cross-memory attach then).
  int transfer_mapped(SendWqe& wqe, samehost::Peer& peer, const HostRange& range);
  bool deliver_atomic_result(const SendWqe& wqe, uint64_t original);
  bool retry_on_host(SendWqe& wqe, Nanos now);
  void refuse_on_host(SendWqe& wqe, Verdict verdict, Nanos now);
  void fail_on_host(SendWqe& wqe, ibv_wc_status status, Nanos now);
  // A SEND or WRITE with immediate placed in the peer's receive WQE
  // (requester_host_send.cc, over peer_recv.h).
  static bool consumes_receive(const SendWqe& wqe);
  bool send_on_host(SendWqe& wqe, Nanos now);
  Verdict find_receiver_on_host(const SendWqe& wqe, PeerRecvTarget& target) const;
  Verdict scatter_on_host(const PeerRecvTarget& target, uint32_t index, uint64_t length,
                              PeerIovecs& out) const;
  int place_on_host(const SendWqe& wqe, const PeerRecvTarget& target, uint32_t index,
                    PeerIovecs& remote, ibv_wc_status status);
  Verdict finish_on_host(const SendWqe& wqe, const PeerRecvTarget& target, uint32_t index,
                             PeerIovecs& remote, ibv_wc_status there);
  Verdict give_back_on_host(const PeerRecvTarget& target, uint32_t index);
  bool may_invalidate_on_host(const SendWqe& wqe, const PeerRecvTarget& target) const;
  bool conclude_send_on_host(SendWqe& wqe, Verdict verdict, const PeerRecvTarget& target,
                             Nanos now);
  bool wait_rnr_on_host(SendWqe& wqe, const PeerRecvTarget& target, Nanos now);
  bool local_buffers_readable(const SendWqe& wqe) const;
  // Binds and local invalidations (requester_local.cc): executed here, in queue order.
  bool execute_local(SendWqe& wqe, Nanos now);
  bool check_local_sges(const SendWqe& wqe) const;
  void count_send(uint32_t psn, uint32_t psns);
  bool send_packets(SendWqe& wqe);
  wire::PacketView emit_request(const SendWqe& wqe, uint8_t opcode, size_t len, uint32_t psn);
  uint32_t window_space(uint32_t psn) const;
  // The window in force: the configured one, or a gentle restart's smaller one.
  uint32_t window_limit() const;
  // The first packet of a retry: its second copy (IBA 9.7.5.1.2: a duplicate).
  void repeat_if_first_of_retry(wire::PacketView packet);
  bool send_data_packet(SendWqe& wqe);
  bool send_read_request(SendWqe& wqe);
  void send_atomic(SendWqe& wqe);
  uint8_t data_opcode(const SendWqe& wqe, uint32_t index) const;
  bool gather(const SendWqe& wqe, uint64_t offset, std::span<uint8_t> out);

  RcConnection& conn_;
  uint32_t next_psn_ = 0;     // PSN for the next new WQE
  uint32_t send_index_ = 0;   // SQ index of the WQE being sent
  uint32_t high_psn_ = 0;     // first PSN never sent: below it, a send is a resend
  Nanos paused_until_ = 0;
  uint32_t resume_window_ = 0;  // after a timeout: the window while it grows; 0: none
  uint32_t resume_una_ = 0;     // the oldest unacknowledged PSN it last grew at
  bool repeat_first_ = false;   // a retry's first packet is yet to go: send it twice
  uint32_t burst_left_ = 0;  // UC: packets this run may still send
  uint32_t host_retries_ = 0;  // same-host: consecutive tries the peer's QP refused
  uint32_t host_rnr_retries_ = 0;  // same-host: consecutive waits for a receive WQE
};

}  // namespace softrdma::engine::rc
