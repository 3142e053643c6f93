#include "engine/qp.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/ah.h"
#include "engine/cq.h"
#include "engine/device.h"
#include "engine/guarded_memory.h"
#include "engine/pd.h"
#include "engine/sgl.h"
#include "samehost/host.h"
#include "wire/psn.h"

namespace softrdma::engine {

namespace {
std::pmr::memory_resource* memory_of(const QpInit& init) {
  return init.memory != nullptr ? init.memory : std::pmr::get_default_resource();
}
bool attached_to_tm_srq(const QpInit& init) {
  return init.srq != nullptr && init.srq->type() == IBV_SRQT_TM;
}
}  // namespace

Qp::Qp(Device& device, uint32_t qpn, Pd* pd, const QpInit& init)
    : device_(device),
      ctx_{device.counters(), device.mrs(), device.clock(), device.config(), device.host(),
           device.host_executor()},
      qpn_(qpn),
      type_(init.type),
      block_self_multicast_loopback_(init.block_self_multicast_loopback),
      pd_(pd),
      send_cq_(init.send_cq),
      recv_cq_(init.recv_cq),
      srq_(init.srq),
      xrcd_(init.xrcd),
      sq_sig_all_(init.sq_sig_all),
      cap_(init.cap),
      sq_(init.cap.max_send_wr + (attached_to_tm_srq(init) ? kTmSendSlots : 0), memory_of(init)),
      rq_(init.cap.max_recv_wr, memory_of(init)),
      sq_sges_(size_t(sq_.slot_count()) * init.cap.max_send_sge, memory_of(init)),
      rq_sges_(size_t(rq_.slot_count()) * init.cap.max_recv_sge, memory_of(init)),
      inline_arena_(size_t(sq_.slot_count()) * init.cap.max_inline_data, memory_of(init)) {
  attr_.qp_state = IBV_QPS_RESET;
  attr_.cur_qp_state = IBV_QPS_RESET;
  // UD has no path: its messages may be as long as the port's MTU (IBA 9.8.4).
  attr_.path_mtu = type_ == IBV_QPT_UD ? IBV_MTU_4096 : IBV_MTU_1024;
  attr_.cap = cap_;
  // The device's family decides (family.h), not the QP's type alone.
  protocol_ = device_.family().make_protocol(*this);
  family_traits_ = &device_.family().traits();
  // An RNIC's QP is born in INIT (siw's starts idle, which ibv_query_qp reports as
  // INIT; rdma-core's tests expect it of an RNIC), on port 1 with the remote rights
  // the CM would give it (iw_cm's INIT attributes).
  if (family_traits_->connection_managed_qps) {
    attr_.qp_state = attr_.cur_qp_state = IBV_QPS_INIT;
    attr_.port_num = 1;
    attr_.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  }
  // An XRC receive QP has no PD, CQs or SRQ of its own; an XRC send QP no receive CQ.
  if (pd_ != nullptr) pd_->users.fetch_add(1);
  if (send_cq_ != nullptr) send_cq_->users.fetch_add(1);
  if (recv_cq_ != nullptr) recv_cq_->users.fetch_add(1);
  if (srq_ != nullptr) srq_->users.fetch_add(1);
  if (xrcd_ != nullptr) xrcd_->users.fetch_add(1);
  if (srq_ != nullptr) held_.sges.reserve(srq_->max_sge());
  if (tm_srq()) {
    tm_sges_.resize(size_t(sq_.slot_count()) * device_.limits().max_tm_sge);
    tm_fin_.resize(size_t(sq_.slot_count()) * sizeof(FinBytes));
  }
  reserve_host_receives();
}

Qp::~Qp() {
  release_host_receives();
  if (pd_ != nullptr) pd_->users.fetch_sub(1);
  if (send_cq_ != nullptr) send_cq_->users.fetch_sub(1);
  if (recv_cq_ != nullptr) recv_cq_->users.fetch_sub(1);
  if (srq_ != nullptr && xrcd_ == nullptr) srq_->users.fetch_sub(1);
  if (xrcd_ != nullptr) xrcd_->users.fetch_sub(1);
}

void Qp::arm_timer(Nanos when) { device_.arm_timer(*this, when); }
void Qp::want_tx() { device_.want_tx(*this); }
void Qp::post_event(ibv_event_type type) { device_.post_async_event({type, qpn_}); }

uint32_t Qp::path_mtu_bytes() const {
  return 128u << std::clamp<int>(attr_.path_mtu, IBV_MTU_256, IBV_MTU_4096);
}

ibv_wc Qp::make_send_wc(const SendWqe& wqe, ibv_wc_status status) const {
  ibv_wc wc{};
  wc.wr_id = wqe.wr_id;
  wc.status = status;
  wc.qp_num = qpn_;
  switch (wqe.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: wc.opcode = IBV_WC_RDMA_WRITE; break;
    case IBV_WR_RDMA_READ: wc.opcode = IBV_WC_RDMA_READ; break;
    case IBV_WR_ATOMIC_CMP_AND_SWP: wc.opcode = IBV_WC_COMP_SWAP; break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: wc.opcode = IBV_WC_FETCH_ADD; break;
    case IBV_WR_ATOMIC_WRITE: wc.opcode = IBV_WC_ATOMIC_WRITE; break;
    case IBV_WR_BIND_MW: wc.opcode = IBV_WC_BIND_MW; break;
    case IBV_WR_LOCAL_INV: wc.opcode = IBV_WC_LOCAL_INV; break;
    default: wc.opcode = IBV_WC_SEND; break;
  }
  wc.byte_len = wqe.is_atomic() ? 8 : wqe.length;
  return wc;
}

void Qp::push_completion(Cq& cq, const ibv_wc& wc, bool solicited) {
  device_.complete(cq, wc, solicited);
}

// The slot is handed back before the completion becomes visible: a poller that
// sees the completion may post again at once, and must find room (the queues are
// lock-free between poster and engine).
// IBA 10.8.3.2: only signaled successes complete visibly; errors always do.
void Qp::complete_send_head(ibv_wc_status status) {
  const SendWqe& wqe = sq_.front();
  if (wqe.tm != TmSend::kNone) return complete_tm_send(status);
  const bool visible =
      status != IBV_WC_SUCCESS || sq_sig_all_ || (wqe.flags & IBV_SEND_SIGNALED);
  const ibv_wc wc = make_send_wc(wqe, status);
  sq_.pop();
  if (visible) push_completion(*send_cq_, wc, false);
  maybe_report_drained();
}

RecvWqe* Qp::current_recv() {
  if (srq_ == nullptr) return rq_.empty() ? nullptr : &rq_.front();
  return held_.held ? &held_.wqe : nullptr;
}

RecvWqe* Qp::take_recv() {
  if (srq_ == nullptr && host_rq_.reserved()) return take_shared_recv();
  if (srq_ == nullptr || held_.held) return current_recv();
  if (!srq_->take(held_)) return nullptr;
  held_from_ = srq_;
  return &held_.wqe;
}

bool Qp::select_xrc_srq(uint32_t srqn) {
  if (srq_ != nullptr && srq_->srqn() == srqn) return true;
  Srq* srq = device_.find_srq(srqn);
  if (srq == nullptr || srq->type() != IBV_SRQT_XRC || srq->xrcd() != xrcd_) return false;
  srq_ = srq;
  return true;
}

void Qp::forget_recv_from(const Srq& srq) {
  if (held_from_ == &srq) {
    held_.held = false;
    held_from_ = nullptr;
  }
  if (xrcd_ != nullptr && srq_ == &srq) srq_ = nullptr;
}

// IBA A14: an XRC SRQ completes its receives on its own CQ.
void Qp::complete_recv_head(const ibv_wc& wc, bool solicited) {
  if (srq_ == nullptr) {
    rq_.pop();
    wire_holds_recv_ = false;
    push_completion(*recv_cq_, wc, solicited);
    return;
  }
  Cq* cq = held_from_->cq() != nullptr ? held_from_->cq() : recv_cq_;
  if (tm_.kind != TmKind::kNone) complete_tm_recv(wc, solicited, *cq);  // reads held_
  else push_completion(*cq, wc, solicited);
  held_.held = false;
  held_from_ = nullptr;
}

// IBA 10.3.1: in Error every outstanding and newly posted WQE completes with a
// flush error, except one that failed for a reason of its own.
void Qp::flush_queues() {
  while (!sq_.empty()) {
    const SendWqe& w = sq_.front();
    const ibv_wc_status status = w.status != IBV_WC_SUCCESS ? w.status : IBV_WC_WR_FLUSH_ERR;
    if (w.tm != TmSend::kNone) {
      complete_tm_send(status);
      continue;
    }
    const ibv_wc wc = make_send_wc(w, status);
    sq_.pop();
    push_completion(*send_cq_, wc, false);
  }
  flush_receives();
}

// The SRQ's WQEs stay for its other QPs (IBA 10.2.9.4): only a WQE this QP took
// is flushed. The receive queue of a QP without SRQ is flushed whole.
void Qp::flush_receives() {
  // What peers placed for an XRC receive QP before it closed completes as placed.
  if (type_ == IBV_QPT_XRC_RECV) device_.drain_xrc_srqs(*xrcd_, device_.clock().now());
  if (srq_ != nullptr) {
    // What peers placed for this QP before it closed completes as it was placed.
    if (host_recv_queue() != 0) srq_->drain_host_receives(device_.clock().now());
    if (!held_.held) return;
    ibv_wc wc{};
    wc.wr_id = held_.wqe.wr_id;
    wc.status = held_.wqe.status != IBV_WC_SUCCESS ? held_.wqe.status : IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qpn_;
    complete_recv_head(wc, false);
    return;
  }
  // What peers placed before the QP closed completes as it was placed.
  drain_host_receives(device_.clock().now());
  wire_holds_recv_ = false;
  while (!rq_.empty()) {
    const RecvWqe& w = rq_.front();
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = w.status != IBV_WC_SUCCESS ? w.status : IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qpn_;
    rq_.pop();
    push_completion(*recv_cq_, wc, false);
  }
}

void Qp::enter_error(Nanos now) {
  const ibv_qp_state from = attr_.qp_state;
  if (from == IBV_QPS_ERR) return;
  {
    std::lock_guard lock(mutex_);
    set_state(IBV_QPS_ERR);
  }
  flush_and_notify(from, now);
}

void Qp::set_state(ibv_qp_state to) {
  attr_.qp_state = to;
  attr_.cur_qp_state = to;
  // IBA 10.3.1: no message is received in Error or Reset; peers stop claiming.
  if (to == IBV_QPS_ERR || to == IBV_QPS_RESET) close_host_receives();
  device_.note_qp(*this);
  // An SRQ stays open for its other QPs: a peer that saw this QP take requests
  // before may still be placing for it; after this, none (IBA 10.2.9.4: the last
  // WQE this QP consumes is known when it reports IBV_EVENT_QP_LAST_WQE_REACHED).
  // An XRC receive QP takes messages into any XRC SRQ of its domain (IBA A14).
  const bool shares_queues = (host_recv_queue() != 0 && srq_ != nullptr) ||
                             (type_ == IBV_QPT_XRC_RECV && device_.host() != nullptr);
  if ((to == IBV_QPS_ERR || to == IBV_QPS_RESET) && shares_queues)
    device_.host()->node().wait_for_accesses();
}

void Qp::flush_and_notify(ibv_qp_state from, Nanos now) {
  flush_queues();
  // IBA 10.2.9.4 / 11.6.3.1: a QP attached to an SRQ reports, once in Error with its
  // taken WQE flushed, that it will consume no more of the SRQ's WQEs; the
  // application may then destroy it without losing any.
  if (srq_ != nullptr || xrcd_ != nullptr)
    device_.post_async_event(AsyncEvent{IBV_EVENT_QP_LAST_WQE_REACHED, qpn_, nullptr});
  protocol_->on_state_change(from, IBV_QPS_ERR, now);
}

void Qp::reset_queues() {
  sq_.clear();
  rq_.clear();
  tm_sends_.store(0, std::memory_order_release);
  tm_ = TmMessage{};
  reopen_host_receives();
}

}  // namespace softrdma::engine
