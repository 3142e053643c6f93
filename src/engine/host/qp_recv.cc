// The receive queue of an RC QP as processes of this host consume it
// (docs/decisions/same-host.md, "SENDs"): a peer that sends to this QP claims the
// next receive WQE in the node segment (samehost::RecvState), reads its scatter
// list (from the segment for a small queue, else from this process's memory),
// writes the payload (by stores on shared pages, else by cross-memory attach) and
// a RecvResult (into the segment for a small queue), and leaves a notice; this
// side completes the WQE when it takes the notice (its next engine turn: a poll,
// or the progress thread woken by the peer). A SEND that comes by the wire claims
// the same way, so the two never consume one WQE twice, and WQEs complete in the
// order posted (IBA 10.2.9).
#include <atomic>
#include <cstddef>
#include <cstring>

#include "engine/device.h"
#include "samehost/peer_node.h"
#include "engine/qp.h"
#include "wire/ip_udp.h"
#include "samehost/host.h"

namespace softrdma::engine {

// At creation: an RC, UC or UD QP with a receive queue of its own, on a device
// that publishes to its host (an SRQ publishes its own: host/srq_recv.cc). A UD
// QP's queue is filled by many senders at once, as an SRQ's, and so needs its
// results in the segment: a larger one takes the wire.
void Qp::reserve_host_receives() {
  samehost::Host* host = device_.host();
  const bool datagram = type_ == IBV_QPT_UD;
  if (host == nullptr || (type_ != IBV_QPT_RC && type_ != IBV_QPT_UC && !datagram) ||
      srq_ != nullptr || xrcd_ != nullptr || (datagram && rq_.slot_count() > samehost::kSharedSges))
    return;
  const uint32_t kind = datagram ? samehost::RecvState::kDatagram : samehost::RecvState::kQueue;
  if (!host_rq_.reserve(*host, kind, pd_ != nullptr ? pd_->handle() : 0, rq_.slot_count(),
                        cap_.max_recv_sge, rq_sges_.data()))
    return;
  device_.note_host_recv(host_rq_.index(), this);
  reopen_host_receives();
}

// Destroyed: no peer is inside the queue once this returns.
void Qp::release_host_receives() {
  if (!host_rq_.reserved()) return;
  device_.note_host_recv(host_rq_.index(), nullptr);
  host_rq_.release();
}

// Empty again (Reset), and open: peers claim once the QP takes requests.
void Qp::reopen_host_receives() {
  if (!host_rq_.reserved()) return;
  close_host_receives();
  samehost::RecvState& state = *host_rq_.state();
  state.posted.store(0, std::memory_order_relaxed);
  state.claimed.store(0, std::memory_order_relaxed);
  state.placed.store(0, std::memory_order_relaxed);
  state.noticed.store(0, std::memory_order_relaxed);
  // Results of many senders mark themselves complete (`seq`): none left from
  // before may look complete now.
  if (state.kind.load(std::memory_order_relaxed) == samehost::RecvState::kDatagram)
    host_rq_.clear_results(rq_.slot_count());
  wire_holds_recv_ = false;
  host_rq_.open(qpn_);
}

// Error, Reset or destruction: no more claims, and what peers placed is final.
void Qp::close_host_receives() {
  host_rq_.close();
}

// The wire's SEND or WRITE with immediate takes the head as a peer would: after
// the receives peers placed before it, and never one a peer holds (that is no
// receive for this message: RNR, IBA 9.7.5.1.4).
RecvWqe* Qp::take_shared_recv() {
  if (wire_holds_recv_) return current_recv();
  // Only when a peer placed something since (one load): a wire message, to a peer
  // on another host above all, pays no fence or clock read for the shared queue.
  samehost::RecvState& state = *host_rq_.state();
  if (state.placed.load(std::memory_order_acquire) != rq_.head())
    drain_host_receives(device_.clock().now(), /*stop_at_failure=*/true);
  if (rq_.empty()) return nullptr;
  uint32_t head = rq_.head();
  if (!state.claimed.compare_exchange_strong(head, head + 1, std::memory_order_acq_rel))
    return nullptr;
  wire_holds_recv_ = true;
  return &rq_.front();
}

// IBA 10.6.7.2.3: the R_Key a SEND with Invalidate names goes before its receive
// completes; one this QP's peer may not invalidate fails it as on the wire
// (rc/responder_invalidate.cc).
void Qp::invalidate_for_host_send(uint32_t rkey, const Pd* pd, ibv_wc& wc) {
  if (device_.mrs().invalidate(rkey, pd, qpn_, /*remote=*/true)) {
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = rkey;
    return;
  }
  bump(device_.counters().remote_invalidations_refused);
  wc.status = IBV_WC_REM_INV_REQ_ERR;
}

// A peer's result, read as untrusted: a status other than those a placement can
// end with is a local QP operation error; a SEND with Invalidate's R_Key is
// invalidated here.
ibv_wc Qp::host_recv_wc(const RecvWqe& wqe, const samehost::RecvResult& result,
                        const Srq* from) {
  ibv_wc wc{};
  wc.wr_id = wqe.wr_id;
  wc.qp_num = qpn_;
  wc.src_qp = attr_.dest_qp_num;
  const bool rdma = (result.flags & samehost::RecvResult::kRdmaWithImm) != 0;
  wc.opcode = rdma ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  wc.byte_len = result.byte_len;
  switch (result.status) {
    case IBV_WC_SUCCESS:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
      wc.status = ibv_wc_status(result.status);
      break;
    default:
      wc.status = IBV_WC_LOC_QP_OP_ERR;
  }
  // IBA 9.7.5.1.5: a SEND is never longer than its buffer.
  if (wc.status == IBV_WC_SUCCESS && !rdma && wc.byte_len > wqe.length)
    wc.status = IBV_WC_LOC_QP_OP_ERR;
  if (wc.status == IBV_WC_SUCCESS && (result.flags & samehost::RecvResult::kInvalidate) != 0 &&
      !rdma && (type_ == IBV_QPT_RC || type_ == IBV_QPT_XRC_RECV))
    invalidate_for_host_send(result.imm_data,
                             xrcd_ != nullptr && from != nullptr ? from->pd() : pd_, wc);
  if (wc.status != IBV_WC_SUCCESS) wc.byte_len = 0;
  if ((result.flags & samehost::RecvResult::kWithImm) != 0 || rdma) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = result.imm_data;
  }
  // IBA 11.4.1.2: a UD receive has a GRH (the sender wrote it into the buffer).
  if (type_ == IBV_QPT_UD) {
    wc.src_qp = result.src_qp & 0xffffff;
    wc.wc_flags |= IBV_WC_GRH;
    wc.sl = wire::roce_packet_type((result.flags & samehost::RecvResult::kIpv4) != 0);
  }
  return wc;
}

bool Qp::drain_host_receives(Nanos now, bool stop_at_failure) {
  if (!host_rq_.reserved()) return false;
  if (type_ == IBV_QPT_UD) return drain_datagram_receives(now);
  samehost::RecvState& state = *host_rq_.state();
  // Dekker with samehost::PeerNode::notice: cleared before `placed` is read.
  state.noticed.store(0, std::memory_order_seq_cst);
  const uint32_t placed = state.placed.load(std::memory_order_acquire);
  const uint32_t claimed = state.claimed.load(std::memory_order_acquire);
  bool drained = false;
  // Only WQEs a peer claimed and placed: [head, min(placed, claimed)).
  while (!rq_.empty() && !wire_holds_recv_ && int32_t(placed - rq_.head()) > 0 &&
         int32_t(claimed - rq_.head()) > 0) {
    samehost::RecvResult result;
    std::memcpy(&result, &host_rq_.result(rq_.slot(rq_.head())), sizeof result);
    const ibv_wc wc = host_recv_wc(rq_.front(), result);
    const bool failed = wc.status != IBV_WC_SUCCESS;
    if (failed && stop_at_failure) break;
    bump(device_.counters().host_receives);
    complete_recv_head(wc, (result.flags & samehost::RecvResult::kSolicited) != 0);
    drained = true;
    // IBA 9.7.5.1.5 / 9.9.3.1.2: the responder's QP ends with the message.
    if (failed) {
      fail_on_receive(now);
      break;
    }
  }
  return drained;
}

// A QP in Error completes it as placed too: no peer claims for it once it closed
// (Qp::set_state), so this message came before.
bool Qp::receives_from(const Srq& srq) const {
  if (xrcd_ != nullptr) return type_ == IBV_QPT_XRC_RECV && srq.xrcd() == xrcd_;
  return srq_ == &srq;
}

// IBA A14: an XRC SRQ completes on its own CQ.
bool Qp::complete_host_srq_recv(const Srq& srq, const RecvWqe& wqe,
                                const samehost::RecvResult& result, Nanos now) {
  if (attr_.qp_state == IBV_QPS_RESET) return false;
  const ibv_wc wc = host_recv_wc(wqe, result, &srq);
  bump(device_.counters().host_receives);
  Cq& cq = srq.cq() != nullptr ? *srq.cq() : *recv_cq_;
  push_completion(cq, wc, (result.flags & samehost::RecvResult::kSolicited) != 0);
  // IBA 9.7.5.1.5 / 9.9.3.1.2: the responder's QP ends with the message.
  if (wc.status != IBV_WC_SUCCESS) fail_on_receive(now);
  return true;
}

}  // namespace softrdma::engine

namespace softrdma::engine {

// A receive WQE that failed ends the QP; a UD QP's with the event the wire's
// receive raises (ud/datagram.cc).
void Qp::fail_on_receive(Nanos now) {
  if (type_ == IBV_QPT_UD)
    device_.post_async_event(AsyncEvent{IBV_EVENT_QP_FATAL, qpn_, nullptr});
  enter_error(now);
}

// A UD QP's queue, which any process of the host fills (RecvState::kDatagram):
// results mark themselves complete and complete in claim order, as an SRQ's
// (host/srq_recv.cc); a WQE a sender claimed and left empty is consumed without a
// completion. UD's WQEs are consumed in order (IBA 10.2.9), and from one sender
// its messages arrive in order.
bool Qp::drain_datagram_receives(Nanos now) {
  samehost::RecvState& state = *host_rq_.state();
  // Dekker with samehost::PeerNode::notice: cleared before the results are read.
  state.noticed.store(0, std::memory_order_seq_cst);
  // Untrusted: past what was posted there is no WQE.
  uint32_t claimed = state.claimed.load(std::memory_order_acquire);
  if (int32_t(claimed - rq_.tail()) > 0) claimed = rq_.tail();
  bool drained = false;
  while (!rq_.empty() && int32_t(claimed - rq_.head()) > 0) {
    const uint32_t head = rq_.head();
    samehost::RecvResult result;
    if (!host_rq_.take_result(head, rq_.slot(head), result)) break;
    drained = true;
    if ((result.flags & samehost::RecvResult::kVoid) != 0) {
      rq_.pop();
      bump(device_.counters().host_receives_dropped);
      continue;
    }
    const ibv_wc wc = host_recv_wc(rq_.front(), result);
    bump(device_.counters().host_receives);
    complete_recv_head(wc, (result.flags & samehost::RecvResult::kSolicited) != 0);
    if (wc.status != IBV_WC_SUCCESS) {
      fail_on_receive(now);
      break;
    }
  }
  return drained;
}

// The wire's UD message of `length` bytes (its GRH included) takes the next WQE
// as a peer takes it (peer_recv.h): after what peers placed before it, and only
// when it fits, else it stays for the next message (ud/datagram.cc).
RecvWqe* Qp::claim_datagram_recv(uint64_t length, uint32_t& index, bool& too_long, Nanos now) {
  too_long = false;
  drain_datagram_receives(now);
  samehost::RecvState& state = *host_rq_.state();
  uint32_t claimed = state.claimed.load(std::memory_order_acquire);
  do {
    if (int32_t(rq_.tail() - claimed) <= 0) return nullptr;
    if (rq_.at(claimed).length < length) {
      too_long = true;
      return nullptr;
    }
  } while (!state.claimed.compare_exchange_weak(claimed, claimed + 1, std::memory_order_acq_rel));
  index = claimed;
  return &rq_.at(index);
}

// Completes WQE `index` (claim_datagram_recv) with `result`, in claim order.
void Qp::complete_datagram_recv(uint32_t index, samehost::RecvResult result, Nanos now) {
  samehost::RecvResult& shared = host_rq_.result(rq_.slot(index));
  result.seq = 0;
  std::memcpy(&shared, &result, sizeof result);
  std::atomic_ref<uint32_t>(shared.seq).store(index + 1, std::memory_order_release);
  drain_datagram_receives(now);
}

}  // namespace softrdma::engine
