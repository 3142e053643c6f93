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
#include <cstddef>
#include <cstring>

#include "engine/device.h"
#include "engine/qp.h"
#include "samehost/host.h"

namespace softrdma::engine {

static_assert(sizeof(Sge) == sizeof(samehost::RecvSge) &&
                  offsetof(Sge, addr) == offsetof(samehost::RecvSge, addr) &&
                  offsetof(Sge, length) == offsetof(samehost::RecvSge, length) &&
                  offsetof(Sge, lkey) == offsetof(samehost::RecvSge, lkey),
              "peers read the receive SGEs in this layout");

// At creation: an RC or UC QP with a receive queue of its own, on a device that
// publishes to its host (an SRQ publishes its own: srq_host_recv.cc). UD takes
// the wire for now.
void Qp::reserve_host_receives() {
  samehost::Host* host = device_.host();
  if (host == nullptr || (type_ != IBV_QPT_RC && type_ != IBV_QPT_UC) || srq_ != nullptr ||
      xrcd_ != nullptr)
    return;
  uint32_t index = 0;
  samehost::RecvState* state = host->node().reserve_recv(index);
  if (state == nullptr) return;
  host_recv_ = state;
  host_recv_index_ = index;
  host_results_.assign(rq_.slot_count(), samehost::RecvResult{});
  // A small queue keeps its scatter lists in the segment too: a peer then reads
  // them with a load, not a process_vm_readv (1.9 µs here; docs/performance.md).
  // Its results too, which peers then write with stores.
  const size_t entries = size_t(rq_.slot_count()) * cap_.max_recv_sge;
  const bool shared = entries <= samehost::kSharedSges;
  host_sges_ = shared ? host->node().recv_sges(index) : nullptr;
  host_results_at_ = shared ? host->node().recv_results(index) : host_results_.data();
  samehost::describe(*state, {samehost::RecvState::kQueue, 0, rq_.slot_count(),
                              cap_.max_recv_sge, reinterpret_cast<uintptr_t>(rq_sges_.data()),
                              reinterpret_cast<uintptr_t>(host_results_.data()), shared});
  device_.note_host_recv(index, this);
  reopen_host_receives();
}

// Destroyed: no peer is inside the queue once this returns.
void Qp::release_host_receives() {
  if (host_recv_ == nullptr) return;
  device_.note_host_recv(host_recv_index_, nullptr);
  device_.host()->node().release_recv(host_recv_index_);
  host_recv_->shared_sges.store(0, std::memory_order_relaxed);
  host_recv_ = nullptr;
  host_sges_ = nullptr;
  host_results_at_ = nullptr;
}

// Empty again (Reset), and open: peers claim once the QP takes requests.
void Qp::reopen_host_receives() {
  if (host_recv_ == nullptr) return;
  close_host_receives();
  host_recv_->posted.store(0, std::memory_order_relaxed);
  host_recv_->claimed.store(0, std::memory_order_relaxed);
  host_recv_->placed.store(0, std::memory_order_relaxed);
  host_recv_->noticed.store(0, std::memory_order_relaxed);
  wire_holds_recv_ = false;
  host_recv_->qpn.store(qpn_, std::memory_order_release);
}

// Error, Reset or destruction: no more claims, and what peers placed is final.
void Qp::close_host_receives() {
  if (host_recv_ == nullptr) return;
  device_.host()->node().close_recv(*host_recv_);
}

// The wire's SEND or WRITE with immediate takes the head as a peer would: after
// the receives peers placed before it, and never one a peer holds (that is no
// receive for this message: RNR, IBA 9.7.5.1.4).
RecvWqe* Qp::take_shared_recv() {
  if (wire_holds_recv_) return current_recv();
  // Only when a peer placed something since (one load): a wire message, to a peer
  // on another host above all, pays no fence or clock read for the shared queue.
  if (host_recv_->placed.load(std::memory_order_acquire) != rq_.head())
    drain_host_receives(device_.clock().now(), /*stop_at_failure=*/true);
  if (rq_.empty()) return nullptr;
  uint32_t head = rq_.head();
  if (!host_recv_->claimed.compare_exchange_strong(head, head + 1, std::memory_order_acq_rel))
    return nullptr;
  wire_holds_recv_ = true;
  return &rq_.front();
}

// A peer's result, read as untrusted: a status other than those a placement can
// end with is a local QP operation error.
ibv_wc Qp::host_recv_wc(const RecvWqe& wqe, const samehost::RecvResult& result) const {
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
      wc.status = ibv_wc_status(result.status);
      break;
    default:
      wc.status = IBV_WC_LOC_QP_OP_ERR;
  }
  // IBA 9.7.5.1.5: a SEND is never longer than its buffer.
  if (wc.status == IBV_WC_SUCCESS && !rdma && wc.byte_len > wqe.length)
    wc.status = IBV_WC_LOC_QP_OP_ERR;
  if (wc.status != IBV_WC_SUCCESS) wc.byte_len = 0;
  if ((result.flags & samehost::RecvResult::kWithImm) != 0 || rdma) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = result.imm_data;
  }
  return wc;
}

bool Qp::drain_host_receives(Nanos now, bool stop_at_failure) {
  if (host_recv_ == nullptr) return false;
  // Dekker with samehost::PeerNode::notice: cleared before `placed` is read.
  host_recv_->noticed.store(0, std::memory_order_seq_cst);
  const uint32_t placed = host_recv_->placed.load(std::memory_order_acquire);
  const uint32_t claimed = host_recv_->claimed.load(std::memory_order_acquire);
  bool drained = false;
  // Only WQEs a peer claimed and placed: [head, min(placed, claimed)).
  while (!rq_.empty() && !wire_holds_recv_ && int32_t(placed - rq_.head()) > 0 &&
         int32_t(claimed - rq_.head()) > 0) {
    samehost::RecvResult result;
    std::memcpy(&result, &host_results_at_[rq_.slot(rq_.head())], sizeof result);
    const ibv_wc wc = host_recv_wc(rq_.front(), result);
    const bool failed = wc.status != IBV_WC_SUCCESS;
    if (failed && stop_at_failure) break;
    bump(device_.counters().host_receives);
    complete_recv_head(wc, (result.flags & samehost::RecvResult::kSolicited) != 0);
    drained = true;
    // IBA 9.7.5.1.5 / 9.9.3.1.2: the responder's QP ends with the message.
    if (failed) {
      enter_error(now);
      break;
    }
  }
  return drained;
}

// A QP in Error completes it as placed too: no peer claims for it once it closed
// (Qp::set_state), so this message came before.
bool Qp::complete_host_srq_recv(const RecvWqe& wqe, const samehost::RecvResult& result,
                                Nanos now) {
  if (attr_.qp_state == IBV_QPS_RESET) return false;
  const ibv_wc wc = host_recv_wc(wqe, result);
  bump(device_.counters().host_receives);
  push_completion(*recv_cq_, wc, (result.flags & samehost::RecvResult::kSolicited) != 0);
  // IBA 9.7.5.1.5 / 9.9.3.1.2: the responder's QP ends with the message.
  if (wc.status != IBV_WC_SUCCESS) enter_error(now);
  return true;
}

}  // namespace softrdma::engine
