// A shared receive queue as processes of this host consume it (docs/decisions/
// same-host.md, "SRQs"). As for a QP's own queue (host/qp_recv.cc), a peer that
// sends to a QP attached to this SRQ claims the next WQE in the node segment,
// reads its scatter list, writes the payload and a RecvResult, and leaves a
// notice; this side completes the WQE on the QP the result names. Unlike a QP's
// queue, several senders (one per QP) fill WQEs at once, so results are written
// in any order, each marked complete by its own `seq`; this side completes them
// in claim order (IBA 10.2.9: an SRQ's WQEs are consumed in order), so that a
// completed WQE's slot is free for the application's next post at once. A wire
// message claims its WQE the same way, so none is consumed twice.
// Per QP the order holds: one sender serves it, in order, and a wire message
// first completes what that sender placed before it.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/cq.h"
#include "samehost/peer_node.h"
#include "engine/device.h"
#include "engine/pd.h"
#include "engine/qp.h"
#include "engine/srq.h"
#include "samehost/host.h"

namespace softrdma::engine {

// At creation: a basic or XRC SRQ whose results fit in the segment, on a device
// that publishes to its host. Tag-matching SRQs take the wire. A peer finds a
// basic SRQ through its QPs' grants, an XRC SRQ by the number its XRCETH names
// (IBA A14), published with the PD and domain the requester checks.
void Srq::reserve_host_receives() {
  samehost::Host* host = device_.host();
  if (host == nullptr || type_ == IBV_SRQT_TM || ring_.slot_count() > samehost::kSharedSges)
    return;
  if (!host_rq_.reserve(*host, samehost::RecvState::kSrq, pd_->handle(), ring_.slot_count(),
                        max_sge_, sges_.data()))
    return;
  consumed_.assign(ring_.slot_count(), 0);
  device_.note_host_recv(host_rq_.index(), nullptr, this);
  host_rq_.open(srqn_);
  if (type_ == IBV_SRQT_XRC)
    host->node().publish_xrc_srq(srqn_, {pd_->handle(), xrcd_->handle, host_rq_.number()});
}

// Destroyed (no QP is attached): no peer is inside the queue once this returns.
void Srq::release_host_receives() {
  if (!host_rq_.reserved()) return;
  if (type_ == IBV_SRQT_XRC) device_.host()->node().remove_xrc_srq(srqn_);
  device_.note_host_recv(host_rq_.index(), nullptr);
  host_rq_.release();
}

// A wire message's WQE: the next one not claimed, claimed as a peer claims.
bool Srq::take_claimed(HeldRecv& into) {
  // What a peer placed before this message arrived completes first: for the QP
  // this message is for, that is the order it was sent in.
  samehost::RecvState& state = *host_rq_.state();
  if (state.claimed.load(std::memory_order_acquire) != ring_.head())
    drain_host_receives(device_.clock().now());
  uint32_t index = state.claimed.load(std::memory_order_acquire);
  do {
    if (int32_t(ring_.tail() - index) <= 0) return false;
  } while (!state.claimed.compare_exchange_weak(index, index + 1, std::memory_order_acq_rel));
  const RecvWqe& wqe = ring_.at(index);
  into.wqe = wqe;
  into.sges.assign(wqe.sgl.sges, wqe.sgl.sges + wqe.sgl.count);
  into.wqe.sgl = SgeList{into.sges.data(), wqe.sgl.count};
  into.held = true;
  consumed_[ring_.slot(index)] = 1;
  retire_consumed();
  fire_limit_if_low(ring_.tail() - index - 1);
  return true;
}

// The head moves past every WQE consumed, so that its slot can be posted again.
void Srq::retire_consumed() {
  while (!ring_.empty() && consumed_[ring_.slot(ring_.head())] != 0) {
    consumed_[ring_.slot(ring_.head())] = 0;
    ring_.pop();
  }
}

bool Srq::drain_host_receives(Nanos now) {
  // A failed result ends its QP, whose flush drains again: the outer drain goes on.
  if (!host_rq_.reserved() || draining_) return false;
  draining_ = true;
  samehost::RecvState& state = *host_rq_.state();
  // Dekker with samehost::PeerNode::notice: cleared before the results are read.
  state.noticed.store(0, std::memory_order_seq_cst);
  // Untrusted: a peer may move `claimed` anywhere. Past what was posted there is
  // no WQE, and a result there must complete none (nor make this loop long).
  uint32_t claimed = state.claimed.load(std::memory_order_acquire);
  if (int32_t(claimed - ring_.tail()) > 0) claimed = ring_.tail();
  bool drained = false;
  for (uint32_t index = ring_.head(); int32_t(claimed - index) > 0; ++index) {
    const uint32_t slot = ring_.slot(index);
    if (consumed_[slot] != 0) continue;
    // Completed in claim order: one still being placed holds those after it. Out
    // of order, a completed WQE would keep its slot until the head passed it, and
    // the application's repost of it could find the SRQ full (ENOMEM) with fewer
    // than max_wr WQEs outstanding (seen with two senders on a loaded machine).
    // A claimer killed in the middle never marks it: given up, the WQE is
    // consumed without a completion (samehost::StuckClaim).
    samehost::RecvResult result;
    if (!host_rq_.take_result(index, slot, result)) break;
    consumed_[slot] = 1;
    drained = true;
    // Read as untrusted: a QPN that is not one of this SRQ's QPs gets nothing.
    Qp* qp = (result.flags & samehost::RecvResult::kVoid) == 0 ? device_.find_qp(result.qpn)
                                                                : nullptr;
    if (qp == nullptr || !qp->receives_from(*this) ||
        !qp->complete_host_srq_recv(*this, ring_.at(index), result, now))
      bump(device_.counters().host_receives_dropped);
  }
  retire_consumed();
  if (drained) fire_limit_if_low(ring_.tail() - claimed);
  draining_ = false;
  return drained;
}

}  // namespace softrdma::engine
