// A receive queue of this process as the processes of its host consume it
// (docs/decisions/same-host.md, "SENDs", "SRQs", "UD"): the one type a QP's own
// queue and a shared receive queue both keep. It holds the queue's place in the
// node segment (samehost::RecvState), where its scatter lists are mirrored (when
// they fit) and where peers write its results; the owner's ring (Qp's or Srq's)
// stays the owner's, and so do the rules of completing (host/qp_recv.cc,
// host/srq_recv.cc).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/wqe.h"
#include "samehost/recv_queue.h"

namespace softrdma::samehost {
class Host;
}

namespace softrdma::engine::host {

class HostRecvQueue {
 public:
  // Reserves a queue in the host's node segment and publishes its shape: `kind`
  // (a QP's own, an SRQ's, a UD QP's), the PD of its scatter entries' L_Keys,
  // `slots` WQEs of `max_sge` entries at `sges`. A queue of many senders (an
  // SRQ's, a UD QP's) and a small one keep their results in the segment, a large
  // QP queue in this process (written by cross-memory attach). False when the
  // segment has no queue left: SENDs to it take the wire.
  bool reserve(samehost::Host& host, uint32_t kind, uint32_t pd, uint32_t slots, uint32_t max_sge,
               const Sge* sges);
  // Destroyed: no peer is inside the queue once this returns.
  void release();
  // Peers may claim (`qpn`: the QP, or the SRQ's number); closed: no more claims,
  // and what peers placed is final.
  void open(uint32_t qpn) { state_->qpn.store(qpn, std::memory_order_release); }
  void close();

  bool reserved() const { return state_ != nullptr; }
  samehost::RecvState* state() const { return state_; }
  // Its number as peers name it (index + 1), 0 when not published.
  uint32_t number() const { return state_ != nullptr ? index_ + 1 : 0; }
  uint32_t index() const { return index_; }
  samehost::RecvResult& result(uint32_t slot) { return results_[slot]; }
  void clear_results(uint32_t slots);

  // A WQE posted in `slot` with `max_sge` entries (unused ones empty): mirrored
  // into the segment, before `posted` moves past it (publish_posted).
  // Inline: once per ibv_post_recv on a queue peers may fill.
  void mirror(uint32_t slot, const Sge* sges, uint32_t max_sge) {
    if (sges_ != nullptr) std::memcpy(sges_ + size_t(slot) * max_sge, sges, sizeof(Sge) * max_sge);
  }
  void publish_posted(uint32_t tail) { state_->posted.store(tail, std::memory_order_release); }

  // A queue of many senders, in claim order: false while WQE `index` (in `slot`)
  // is still being placed; else its result (samehost::StuckClaim).
  bool take_result(uint32_t index, uint32_t slot, samehost::RecvResult& out);

 private:
  samehost::Host* host_ = nullptr;
  samehost::RecvState* state_ = nullptr;
  uint32_t index_ = 0;
  samehost::RecvSge* sges_ = nullptr;              // the segment's copy of the lists, if it fits
  samehost::RecvResult* results_ = nullptr;        // in the segment, or own_results_
  std::vector<samehost::RecvResult> own_results_;  // a large QP queue's
  samehost::StuckClaim stuck_;
};

}  // namespace softrdma::engine::host
