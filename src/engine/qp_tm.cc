// A QP attached to a tag-matching SRQ (rdma-core Documentation/tag_matching.md):
// how its received SEND messages complete on the TM SRQ's CQ, and the rendezvous
// READ and FIN the TM SRQ sends through the QP's send queue;
// docs/decisions/tag-matching.md.
#include <cstring>

#include "engine/cq.h"
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/sgl.h"

namespace softrdma::engine {

RecvWqe* Qp::take_tm_recv(std::span<const uint8_t> start, bool last) {
  if (held_.held) return &held_.wqe;
  // A rendezvous needs a send queue slot for its READ (then its FIN); without one
  // the request waits, as one without a receive WQE does (RNR).
  const bool room = tm_sends_.load(std::memory_order_acquire) < kTmSendSlots;
  if (!srq_->take_tm(start, room, held_, tm_)) return nullptr;
  held_from_ = srq_;
  if (tm_.kind == TmKind::kEager && !last) {
    // tag_matching.md: matching is reported at once, serialised with the other
    // matches; data validity when the last packet is placed.
    ibv_wc wc{};
    wc.wr_id = held_.wqe.wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_TM_RECV;
    wc.wc_flags = IBV_WC_TM_MATCH;
    wc.qp_num = qpn_;
    wc.src_qp = attr_.dest_qp_num;
    device_.complete(*srq_->cq(), wc, false, TmInfo{tm_.header.tag, tm_.header.app_ctx});
    tm_.match_reported = true;
  }
  return &held_.wqe;
}

// The SEND ended (or failed): its completion on the TM SRQ's CQ, shaped by what
// the message was. Unexpected messages complete as IBV_WC_TM_RECV without
// TM_MATCH or TM_DATA_VALID, as mlx5 reports them (rdma-core's tag matching tests
// tell them so); NO_TAG ones as IBV_WC_TM_NO_TAG.
void Qp::complete_tm_recv(ibv_wc wc, bool solicited, Cq& cq) {
  const TmMessage msg = tm_;
  tm_ = TmMessage{};
  wc.opcode = msg.kind == TmKind::kNoTag ? IBV_WC_TM_NO_TAG : IBV_WC_TM_RECV;
  TmInfo info{};
  const bool ok = wc.status == IBV_WC_SUCCESS;
  if (msg.kind == TmKind::kEager || msg.kind == TmKind::kRendezvous) {
    if (!msg.match_reported) {
      wc.wc_flags |= IBV_WC_TM_MATCH;
      info = TmInfo{msg.header.tag, msg.header.app_ctx};
    }
    if (ok && msg.kind == TmKind::kRendezvous)
      return start_rendezvous(wc, solicited, cq, msg.header);
    if (ok) wc.wc_flags |= IBV_WC_TM_DATA_VALID;
  }
  device_.complete(cq, wc, solicited, info);
}

// A matched rendezvous request: the match completes now; the READ of the
// sender's buffer into the tagged buffer goes on the send queue, and its end
// completes the data (complete_tm_send). A tagged buffer too small for the data
// receives the TMH and RVH instead and completes with IBV_WC_TM_RNDV_INCOMPLETE,
// leaving the transfer to software (tag_matching.md).
void Qp::start_rendezvous(ibv_wc wc, bool solicited, Cq& cq, const TmHeader& header) {
  const TmInfo info{header.tag, header.app_ctx};
  wc.byte_len = 0;
  if (header.len > held_.wqe.length) {
    const size_t bytes = std::min<uint64_t>(header.raw.size(), held_.wqe.length);
    AccessError why = AccessError::kNone;
    const bool placed = scatter(device_.mrs().access(), pd(), held_.wqe.sgl, 0,
                                std::span<const uint8_t>(header.raw.data(), bytes), &why);
    wc.status = placed ? IBV_WC_TM_RNDV_INCOMPLETE : IBV_WC_LOC_PROT_ERR;
    wc.byte_len = uint32_t(bytes);
    device_.complete(cq, wc, solicited, info);
    return;
  }
  device_.complete(cq, wc, solicited, info);
  const std::span<const Sge> sges(held_.sges.data(), held_.wqe.sgl.count);
  if (!queue_tm_send(TmSend::kRendezvousRead, wc.wr_id, make_fin(header), &header, sges)) {
    wc.status = IBV_WC_GENERAL_ERR;  // cannot be: take_tm_recv saw a slot free
    wc.wc_flags = 0;
    device_.complete(cq, wc, false);
  }
}

// Engine owner: a WQE of the TM SRQ's onto the send queue (producer side, so
// under mutex_ as posters are), served before the engine's owner lets go.
bool Qp::queue_tm_send(TmSend kind, uint64_t wr_id, const FinBytes& fin, const TmHeader* read,
                       std::span<const Sge> sges) {
  {
    std::lock_guard lock(mutex_);
    if (sq_.full()) return false;
    const uint32_t slot = sq_.slot(sq_.tail());
    SendWqe& wqe = sq_.push_slot();
    wqe = SendWqe{};
    wqe.wr_id = wr_id;
    wqe.tm = kind;
    // The READ keeps its FIN's bytes until it completes; the FIN sends them.
    uint8_t* fin_bytes = &tm_fin_[size_t(slot) * fin.size()];
    std::memcpy(fin_bytes, fin.data(), fin.size());
    if (read != nullptr) {
      wqe.opcode = IBV_WR_RDMA_READ;
      wqe.remote_addr = read->va;
      wqe.rkey = read->rkey;
      wqe.length = read->len;
      Sge* dst = &tm_sges_[size_t(slot) * device_.limits().max_tm_sge];
      std::copy(sges.begin(), sges.end(), dst);
      wqe.sgl = SgeList{dst, uint32_t(sges.size())};
    } else {
      wqe.opcode = IBV_WR_SEND;
      wqe.flags = IBV_SEND_INLINE;
      wqe.inline_data = fin_bytes;
      wqe.length = uint32_t(fin.size());
    }
    tm_sends_.fetch_add(1, std::memory_order_acq_rel);
    sq_.publish();
  }
  device_.ring_doorbell_from_engine(*this);
  return true;
}

// The send queue's head is the TM SRQ's. A READ done completes the tagged
// buffer's data (IBV_WC_TM_RECV with TM_DATA_VALID, on the TM SRQ's CQ) and sends
// the FIN; a READ that failed or was flushed completes it with its error; a FIN
// completes nothing (the sender's receive of it is its completion).
void Qp::complete_tm_send(ibv_wc_status status) {
  const SendWqe& wqe = sq_.front();
  const TmSend kind = wqe.tm;
  ibv_wc wc{};
  wc.wr_id = wqe.wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_TM_RECV;
  wc.qp_num = qpn_;
  wc.src_qp = attr_.dest_qp_num;
  wc.byte_len = wqe.length;
  FinBytes fin;
  std::memcpy(fin.data(), &tm_fin_[size_t(sq_.slot(sq_.head())) * fin.size()], fin.size());
  // Before the pop: a poster never counts more room than there is.
  tm_sends_.fetch_sub(1, std::memory_order_acq_rel);
  sq_.pop();
  if (kind == TmSend::kRendezvousRead) {
    if (status == IBV_WC_SUCCESS) wc.wc_flags = IBV_WC_TM_DATA_VALID;
    device_.complete(*srq_->cq(), wc, false);
    if (status == IBV_WC_SUCCESS) queue_tm_send(TmSend::kFin, 0, fin, nullptr, {});
  }
  maybe_report_drained();
}

bool Qp::sq_full() const {
  if (!tm_srq()) return sq_.full();
  // The TM SRQ's slots are beyond the application's max_send_wr.
  return sq_.full() || sq_.size() - tm_sends_.load(std::memory_order_acquire) >= cap_.max_send_wr;
}

}  // namespace softrdma::engine
