// RC requester (IBA 9.7.4 "requester side"): assigns PSNs to send WQEs, segments
// them to the path MTU and sends request packets within the window; resends what
// the connection's loss recovery (loss_recovery.h) asks for when the completer
// reports a loss.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <span>

#include "engine/clock.h"
#include "engine/rc/loss_recovery.h"
#include "engine/wqe.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

class RcConnection;

// Work queue indices grow forever mod 2^32: compare them as a ring.
inline bool psn_index_before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }

class Requester {
 public:
  explicit Requester(RcConnection& conn) : conn_(conn) {}

  // Sends as much queued work as the window, fences and max_rd_atomic allow.
  // UC has no window: a burst per engine turn; true while more waits for the next.
  bool run(Nanos now);
  // A loss at `psn`, which lies in an outstanding WQE: resend what the loss
  // recovery answers (go-back-N: everything from `psn`, IBA 9.7.4.1.3).
  void on_loss(uint32_t psn, LossCause cause, Nanos now);
  // Selective repeat decided what is lost (a SACK): walk again from `psn`, sending
  // what the loss recovery marked and stepping over the rest.
  void resend_from(uint32_t psn);
  // Selective repeat: asks again for responses [from, from + count) of the READ
  // `wqe` (its packet indices), all within what it asked for already.
  void rerequest_read(const SendWqe& wqe, uint32_t from, uint32_t count);
  // The completer saw everything before `una` acknowledged.
  void on_progress(uint32_t una, Nanos now);
  // Hold all sending until `until` (after an RNR NAK, IBA 9.7.5.2.8).
  void pause_until(Nanos until) { paused_until_ = until; }
  Nanos paused_until() const { return paused_until_; }

  // Assigns the WQE its PSNs: it goes on the wire (also for the same-host
  // executor, when the peer does not publish what the WQE needs).
  bool start_on_wire(SendWqe& wqe);

  void reset(uint32_t sq_psn);
  uint32_t next_psn() const { return next_psn_; }
  // First PSN never sent: a response beyond it answers nothing (IBA 9.7.5.2.1).
  uint32_t high_psn() const { return high_psn_; }
  // READ/ATOMIC WQEs sent and not yet completed (IBA 9.7.4.1.5: max_rd_atomic).
  uint32_t rd_atomic_outstanding() const;
  // The local buffers start() resolved when it checked `wqe` (its non-empty SGEs,
  // in order), while they still hold: the same WQE, no MR deregistered since
  // (MrTable::generation; Device::dereg_mr waits for the engine). The same-host
  // executor gathers from them in that turn instead of resolving each L_Key again.
  bool checked_locals(const SendWqe& wqe, std::span<const iovec>& out) const;

 private:
  bool may_start(const SendWqe& wqe) const;
  // Where the WQE goes, in queue order: local, the same-host executor, or the wire.
  bool start(SendWqe& wqe, Nanos now);
  // What the same-host executor batched goes first (IBA 9.5); false when the
  // requester must stop (send_index_ then where it resumes).
  bool flush_host(Nanos now);
  // Binds and local invalidations (requester_local.cc): executed here, in queue order.
  bool execute_local(SendWqe& wqe, Nanos now);
  bool check_local_sges(const SendWqe& wqe);
  void count_send(uint32_t psn, uint32_t psns);
  bool send_packets(SendWqe& wqe);
  wire::PacketView emit_request(const SendWqe& wqe, uint8_t opcode, size_t len, uint32_t psn);
  wire::PacketView emit_read_request(const SendWqe& wqe, uint32_t psn, uint64_t offset,
                                     uint64_t len);
  uint32_t window_space(uint32_t psn) const;
  uint32_t window_room(uint32_t psn) const;
  uint32_t window() const;
  // `psn` was sent before and the loss recovery does not resend it (under
  // go-back-N: what was sent after the last loss; under selective repeat: all
  // but what was lost): it is stepped over.
  bool stays_sent(uint32_t psn) const {
    return wire::psn_before(psn, high_psn_) && recovery_keeps(psn);
  }
  bool recovery_keeps(uint32_t psn) const;
  // Moves the WQE holding `psn` back to it, and every later one sent to its start;
  // false when no WQE holds it.
  bool rewind(uint32_t psn);
  // The first packet of a retry: its second copy (IBA 9.7.5.1.2: a duplicate).
  void repeat_if_first_of_retry(wire::PacketView packet);
  bool send_data_packet(SendWqe& wqe);
  bool send_read_request(SendWqe& wqe);
  void send_atomic(SendWqe& wqe);
  uint8_t data_opcode(const SendWqe& wqe, uint32_t index) const;
  bool gather(const SendWqe& wqe, uint64_t offset, std::span<uint8_t> out);

  RcConnection& conn_;
  struct CheckedLocals {
    static constexpr uint32_t kCapacity = 32;  // the default max_sge; more: not kept
    const SendWqe* wqe = nullptr;
    uint64_t generation = 0;
    uint32_t count = 0;
    std::array<iovec, kCapacity> iov;
  };
  CheckedLocals checked_;
  uint32_t next_psn_ = 0;     // PSN for the next new WQE
  uint32_t send_index_ = 0;   // SQ index of the WQE being sent
  uint32_t high_psn_ = 0;     // first PSN never sent: below it, a send is a resend
  Nanos paused_until_ = 0;
  bool repeat_first_ = false;   // a retry's first packet is yet to go: send it twice
  uint32_t burst_left_ = 0;  // UC: packets this run may still send
  // Data packets the pacer lets this run send (rate_control.h); UINT32_MAX: unpaced.
  uint32_t pace_left_ = UINT32_MAX;
  Nanos run_now_ = 0;  // the time of this run: when its first sends left
};

}  // namespace softrdma::engine::rc
