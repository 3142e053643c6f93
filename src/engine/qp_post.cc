// Posting to a QP (ibv_post_send(3), ibv_post_recv(3)): the checks the man pages
// and IBA Table 39 make, the copy into the work queues, the doorbell. Part of Qp,
// split from qp.cc by concern.
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

int Qp::check_send_wr(const ibv_send_wr& wr, bool by_bind_verb) const {
  // A C caller may pass any int as the opcode: read it as an int, not as the enum.
  const int opcode = raw_enum(wr.opcode);
  if (opcode == IBV_WR_BIND_MW || opcode == IBV_WR_LOCAL_INV)
    return check_memory_wr(wr, by_bind_verb);
  if (uint32_t(wr.num_sge) > cap_.max_send_sge || wr.num_sge < 0) return EINVAL;
  uint64_t length = 0;
  for (int i = 0; i < wr.num_sge; ++i) length += wr.sg_list[i].length;
  // IBA Table 39: UD has SEND (with immediate) only, of one packet, to an AH.
  if (type_ == IBV_QPT_UD && ((opcode != IBV_WR_SEND && opcode != IBV_WR_SEND_WITH_IMM) ||
                              wr.wr.ud.ah == nullptr || length > path_mtu_bytes()))
    return EINVAL;
  // The family's wire may carry fewer operations (iWARP: RFC 5040 §4).
  if (!family_traits_->carries_opcode(opcode)) return EINVAL;
  // IBA Table 39: UC has SEND and RDMA WRITE (with immediate) only.
  if (type_ == IBV_QPT_UC && opcode != IBV_WR_SEND && opcode != IBV_WR_SEND_WITH_IMM &&
      opcode != IBV_WR_RDMA_WRITE && opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
    return EINVAL;
  switch (opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      if ((wr.send_flags & IBV_SEND_INLINE) && length > cap_.max_inline_data) return EINVAL;
      break;
    case IBV_WR_RDMA_READ:
      if (wr.send_flags & IBV_SEND_INLINE) return EINVAL;
      break;
    case IBV_WR_ATOMIC_WRITE:
      // IBA 1.5 9.4.6: RC (and XRC) only; 8 bytes to an 8-aligned address, read
      // from the one SGE at post time (ibv_wr_atomic_write(3) passes a pointer).
      if ((type_ != IBV_QPT_RC && type_ != IBV_QPT_XRC_SEND) || wr.num_sge != 1 ||
          wr.sg_list[0].length != 8 || wr.wr.rdma.remote_addr % 8 != 0)
        return EINVAL;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      // IBA 10.8.3.1: one 8-byte local buffer; verbs: remote address 8-aligned.
      if (wr.num_sge != 1 || wr.sg_list[0].length != 8 || (wr.send_flags & IBV_SEND_INLINE))
        return EINVAL;
      break;
    default:
      return EINVAL;  // TSO, ATOMIC_WRITE, DRIVER1: not served here
  }
  if (length > device_.limits().max_msg_size) return EINVAL;
  return 0;
}

void Qp::copy_send_wr(const ibv_send_wr& wr, SendWqe& wqe, uint32_t slot, bool by_bind_verb) {
  wqe = SendWqe{};
  wqe.wr_id = wr.wr_id;
  wqe.opcode = wr.opcode;
  wqe.flags = wr.send_flags;
  wqe.imm_data = wr.imm_data;
  if (wr.opcode == IBV_WR_SEND_WITH_INV) wqe.invalidate_rkey = wr.invalidate_rkey;
  if (type_ == IBV_QPT_XRC_SEND) wqe.xrc_srqn = wr.qp_type.xrc.remote_srqn & wire::kPsnMask;
  // A bind or local invalidation carries no data: its SGEs mean nothing.
  if (wqe.is_local()) return copy_memory_wr(wr, wqe, by_bind_verb);
  if (type_ == IBV_QPT_UD) {
    const Ah& ah = *Ah::from(wr.wr.ud.ah);
    wqe.ud = UdAddress{ah.dgid, wr.wr.ud.remote_qpn & wire::kPsnMask, wr.wr.ud.remote_qkey,
                       ah.sgid_index};
  }
  if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wqe.remote_addr = wr.wr.atomic.remote_addr;
    wqe.rkey = wr.wr.atomic.rkey;
    wqe.compare_add = wr.wr.atomic.compare_add;
    wqe.swap = wr.wr.atomic.swap;
  } else {
    wqe.remote_addr = wr.wr.rdma.remote_addr;
    wqe.rkey = wr.wr.rdma.rkey;
  }
  Sge* sges = &sq_sges_[size_t(slot) * cap_.max_send_sge];
  for (int i = 0; i < wr.num_sge; ++i) {
    sges[i] = Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    wqe.length += wr.sg_list[i].length;
  }
  wqe.sgl = SgeList{sges, uint32_t(wr.num_sge)};
  if (wr.opcode == IBV_WR_ATOMIC_WRITE) {
    // The 8 bytes live in the WQE itself (as inline data), whatever max_inline_data.
    if (!guarded_copy(&wqe.swap, reinterpret_cast<const void*>(wr.sg_list[0].addr), 8)) {
      bump(device_.counters().local_access_unmapped);
      wqe.status = IBV_WC_LOC_PROT_ERR;
    }
    wqe.inline_data = reinterpret_cast<uint8_t*>(&wqe.swap);
  } else if (wr.send_flags & IBV_SEND_INLINE) {
    // ibv_post_send(3): inline data is read at post time; no lkey is checked.
    uint8_t* dst = &inline_arena_[size_t(slot) * cap_.max_inline_data];
    size_t at = 0;
    // An unreadable buffer is a local protection error completion, not a crash
    // (the requester checks the status when it starts the WQE).
    for (int i = 0; i < wr.num_sge && wqe.status == IBV_WC_SUCCESS; ++i) {
      if (!guarded_copy(dst + at, reinterpret_cast<const void*>(wr.sg_list[i].addr),
                        wr.sg_list[i].length)) {
        bump(device_.counters().local_access_unmapped);
        wqe.status = IBV_WC_LOC_PROT_ERR;
      }
      at += wr.sg_list[i].length;
    }
    wqe.inline_data = dst;
  }
}

// Producer side only: no system call and no engine work under mutex_ (DESIGN.md
// §5); the doorbell runs the requester now if the engine is free.
int Qp::post_send(const ibv_send_wr* wr, const ibv_send_wr** bad, bool by_bind_verb) {
  int err = 0;
  {
    std::lock_guard lock(mutex_);
    const ibv_qp_state s = attr_.qp_state;
    // Send work may be posted from RTS on (and in Error, where it is flushed).
    if (s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_RTR) err = EINVAL;
    if (type_ == IBV_QPT_XRC_RECV) err = EINVAL;  // IBA A14: no send queue
    for (; wr != nullptr && err == 0; wr = wr->next) {
      if ((err = check_send_wr(*wr, by_bind_verb)) != 0) break;
      if (sq_full()) {
        err = ENOMEM;
        break;
      }
      copy_send_wr(*wr, sq_.push_slot(), sq_.slot(sq_.tail()), by_bind_verb);
      sq_.publish();
    }
    if (err != 0 && bad != nullptr) *bad = wr;
  }
  device_.ring_doorbell(*this);
  return err;
}

void Qp::serve_doorbell(Nanos now) {
  if (attr_.qp_state == IBV_QPS_ERR) {
    flush_queues();
  } else {
    protocol_->on_send_posted(now);
  }
}

int Qp::check_recv_wr(const ibv_recv_wr& wr) const {
  if (wr.num_sge < 0 || uint32_t(wr.num_sge) > cap_.max_recv_sge) return EINVAL;
  return 0;
}

int Qp::post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad) {
  std::unique_lock lock(mutex_);
  // ibv_post_recv(3): a QP attached to an SRQ (or an XRC QP) has no receive queue.
  const bool no_rq = srq_ != nullptr || xrcd_ != nullptr || type_ == IBV_QPT_XRC_SEND;
  int err = attr_.qp_state == IBV_QPS_RESET || no_rq ? EINVAL : 0;
  for (; wr != nullptr && err == 0; wr = wr->next) {
    if ((err = check_recv_wr(*wr)) != 0) break;
    if (rq_.full()) {
      err = ENOMEM;
      break;
    }
    const uint32_t slot = rq_.slot(rq_.tail());
    Sge* sges = &rq_sges_[size_t(slot) * cap_.max_recv_sge];
    copy_recv_wr(*wr, rq_.push_slot(), sges);
    // A same-host peer reads the slot's max_recv_sge entries: the unused are empty.
    if (host_rq_.reserved()) {
      std::fill(sges + wr->num_sge, sges + cap_.max_recv_sge, Sge{});
      // Before `posted` moves past the slot (release, below): a peer that claims
      // it sees these.
      host_rq_.mirror(slot, sges, cap_.max_recv_sge);
    }
    rq_.publish();
  }
  // Peers of this host may claim them now (host/qp_recv.cc).
  if (host_rq_.reserved()) host_rq_.publish_posted(rq_.tail());
  if (err != 0 && bad != nullptr) *bad = wr;
  // IBA 10.3.1: in Error a posted receive completes at once, flushed.
  const bool flush = attr_.qp_state == IBV_QPS_ERR;
  lock.unlock();
  if (flush) device_.ring_doorbell(*this);
  return err;
}

}  // namespace softrdma::engine
