// The same-host path of a SEND, SEND with immediate or RDMA WRITE with immediate
// (docs/decisions/same-host.md, "SENDs"): the requester consumes the peer QP's
// next receive WQE itself, as the peer's RNIC would on receiving the message
// (engine/peer_recv.h: claim, scatter list, L_Key checks, payload and result) —
// at most one system call, none for a latency test's SEND; the peer completes the
// WQE at its next engine turn, woken by a notice. Outcomes are the wire's:
//   - no WQE posted: RNR (IBA 9.7.5.1.4), retried after the peer's min_rnr_timer,
//     rnr_retry times (7: for ever), then IBV_WC_RNR_RETRY_EXC_ERR;
//   - a message longer than the WQE: IBV_WC_LOC_LEN_ERR there, IBV_WC_REM_INV_REQ_ERR
//     here (IBA 9.7.5.1.5), both QPs to Error;
//   - a scatter entry refused or unmapped: IBV_WC_LOC_PROT_ERR there,
//     IBV_WC_REM_OP_ERR here;
//   - WRITE with immediate: the R_Key is checked as a WRITE's first.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

#include "engine/device.h"
#include "engine/guarded_memory.h"
#include "engine/host/peer_recv.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/host_execution.h"
#include "samehost/host.h"
#include "wire/fields.h"

namespace softrdma::engine::host {

// Where the WQE `index` of the peer's queue scatters a message of `length` bytes
// (peer_recv.h): kGo, kInvalidRequest (too long: LOC_LEN_ERR there) or
// kRemoteOperational (an L_Key refused: LOC_PROT_ERR there); kNotReady when the
// peer's memory cannot be read.
Verdict RcExecution::scatter(const PeerRecvTarget& target, uint32_t index, uint64_t length,
                             PeerIovecs& out) const {
  switch (scatter_into_peer(target, index, length, out, conn_.qp().ctx().counters)) {
    case PeerScatter::kGo:
      return Verdict::kDone;
    case PeerScatter::kTooLong:
      return Verdict::kInvalidRequest;
    case PeerScatter::kRefused:
      return Verdict::kRemoteOperational;
    default:
      return Verdict::kNotReady;
  }
}

bool RcExecution::consumes_receive(const SendWqe& wqe) {
  return wqe.opcode == IBV_WR_SEND || wqe.opcode == IBV_WR_SEND_WITH_IMM ||
         wqe.opcode == IBV_WR_SEND_WITH_INV || wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// IBA 10.6.7.2.3: a peer may invalidate only a type 2 window bound through the QP
// it sends to (MrTable::invalidate, which the owner runs as it completes the WQE;
// a window the owner frees meanwhile fails there). Its published grant names that
// QP; an MR's and a type 1 window's name none.
bool RcExecution::may_invalidate(const SendWqe& wqe, const PeerRecvTarget& target) const {
  const auto grant = target.peer->node->key(wqe.invalidate_rkey);
  const auto qp = target.peer->node->qp(conn_.path().dest_qpn);
  // An XRC receive QP's PD is its SRQ's (IBA A14), the queue's own.
  const uint32_t pd = conn_.qp().type() == IBV_QPT_XRC_SEND ? target.pd : qp ? qp->pd : 0;
  return grant && qp && grant->qpn == conn_.path().dest_qpn && grant->pd == pd;
}

// The message and its result (the WQE's result alone when the message failed
// there: `status`).
int RcExecution::place(const SendWqe& wqe, const PeerRecvTarget& target, uint32_t index,
                       PeerIovecs& remote, ibv_wc_status status) {
  samehost::RecvResult result{};
  result.qpn = conn_.path().dest_qpn;
  result.status = uint32_t(status);
  result.byte_len = status == IBV_WC_SUCCESS ? wqe.length : 0;
  result.imm_data = wqe.imm_data;
  if (wqe.opcode == IBV_WR_SEND_WITH_IMM || wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
    result.flags |= samehost::RecvResult::kWithImm;
  if (wqe.opcode == IBV_WR_SEND_WITH_INV) {
    result.flags |= samehost::RecvResult::kInvalidate;
    result.imm_data = wqe.invalidate_rkey;
  }
  if (wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) result.flags |= samehost::RecvResult::kRdmaWithImm;
  if (wqe.flags & IBV_SEND_SOLICITED) result.flags |= samehost::RecvResult::kSolicited;
  std::array<iovec, kMaxLocalIovecs> local;
  const bool payload = status == IBV_WC_SUCCESS && wqe.length != 0 && remote.count != 0;
  const uint32_t n = payload ? local_iovecs(wqe, {local.data(), kMaxPeerSges}) : 0;
  return place_into_peer(target, index, local, n, remote, result,
                         conn_.qp().ctx().counters);
}

// A WQE claimed here that the message will not use after all goes back (nobody
// can have claimed after it in a QP's own queue: one sender per QP); in an SRQ
// another sender may have, and the WQE is then voided. kInvalidRequest.
Verdict RcExecution::give_back(const PeerRecvTarget& target, uint32_t index) {
  uint32_t next = index + 1;
  if (!target.rq->claimed.compare_exchange_strong(next, index, std::memory_order_acq_rel))
    void_peer_claim(target, index, conn_.path().dest_qpn);
  return Verdict::kInvalidRequest;
}

// Executes the WQE into the peer's next receive; false when the requester must
// stop for now (an RNR wait, a retry, an error).
bool RcExecution::send(SendWqe& wqe, Nanos now) {
  samehost::Peer& peer = *conn_.path().peer;
  PeerRecvTarget target;
  uint32_t index = 0;
  ibv_wc_status there = IBV_WC_SUCCESS;
  peer.node->begin_access();
  Verdict verdict = find_receiver(wqe, target);
  PeerIovecs remote;
  HostRange range;
  if (verdict == Verdict::kDone && wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
    verdict = check(wqe, peer, range);
  if (verdict == Verdict::kDone && !claim_peer_recv(*target.rq, index)) verdict = Verdict::kRnr;
  const bool claimed = verdict == Verdict::kDone;
  if (verdict == Verdict::kDone) {
    if (wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      if (wqe.length != 0) {
        remote.spans[remote.count] = range.span;
        remote.remote[remote.count++] = {reinterpret_cast<void*>(range.addr), wqe.length};
      }
    } else {
      const Verdict scattered = scatter(target, index, wqe.length, remote);
      // UC drops a message longer than its WQE and keeps the WQE (responder_uc.cc).
      if (scattered == Verdict::kInvalidRequest && conn_.qp().type() == IBV_QPT_UC)
        verdict = give_back(target, index);
      if (scattered == Verdict::kInvalidRequest) there = IBV_WC_LOC_LEN_ERR;
      if (scattered == Verdict::kRemoteOperational) there = IBV_WC_LOC_PROT_ERR;
      if (scattered == Verdict::kNotReady) verdict = scattered;
      if (there == IBV_WC_SUCCESS && wqe.opcode == IBV_WR_SEND_WITH_INV &&
          !may_invalidate(wqe, target)) {
        bump(conn_.qp().ctx().counters.host_refused);
        there = IBV_WC_REM_INV_REQ_ERR;
      }
    }
  }
  if (verdict == Verdict::kDone)
    verdict = finish(wqe, target, index, remote, there);
  if (claimed && (verdict == Verdict::kNotReady || verdict == Verdict::kRemoteAccess))
    void_peer_claim(target, index, conn_.path().dest_qpn);
  peer.node->end_access();
  return conclude_send(wqe, verdict, target, now);
}

// The peer's QP, and its receive queue if SENDs to it may be placed from here.
Verdict RcExecution::find_receiver(const SendWqe& wqe, PeerRecvTarget& target) const {
  samehost::Peer& peer = *conn_.path().peer;
  const uint32_t dest_qpn = conn_.path().dest_qpn;
  auto grant = peer.node->qp(dest_qpn);
  if (!grant || !takes_requests(grant->state) || grant->type != peer_qp_type())
    return Verdict::kNotReady;
  if (const Verdict v = as_request_sees_it(wqe, peer, *grant); v != Verdict::kDone)
    return v;
  if (wqe.length > conn_.qp().ctx().config.limits.max_msg_size) return Verdict::kInvalidRequest;
  // Not published (an XRC or tag-matching SRQ's, or one too large): the wire.
  if (grant->recv_queue == 0) return Verdict::kWire;
  // Closed (the QP is entering Error or Reset, the SRQ is destroyed): as a QP that
  // takes no request.
  if (!open_peer_recv(peer, *grant, dest_qpn, target)) return Verdict::kNotReady;
  return Verdict::kDone;
}

// Writes, then tells the peer: its `placed` moves past the WQE and a notice wakes
// its engine. A failed write of the payload leaves a protection error there.
Verdict RcExecution::finish(const SendWqe& wqe, const PeerRecvTarget& target, uint32_t index,
                            PeerIovecs& remote, ibv_wc_status there) {
  int err = place(wqe, target, index, remote, there);
  // The sender's own buffer went (munmap without ibv_dereg_mr): its local
  // protection error, as the wire's gather finds it, and the WQE claimed there is
  // given back (nobody can have claimed after it in a QP's own queue: one sender
  // per RC QP; in an SRQ another sender may have, and the WQE is then voided).
  if (err == EFAULT && !local_buffers_readable(wqe)) {
    give_back(target, index);
    return Verdict::kLocalProtection;
  }
  if (err == EFAULT && there == IBV_WC_SUCCESS) {
    there = wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR;
    if (there == IBV_WC_SUCCESS) return Verdict::kRemoteAccess;  // the R_Key's memory went
    PeerIovecs none;
    err = place(wqe, target, index, none, there);
  }
  if (err != 0) return Verdict::kNotReady;
  if (!target.many_senders) target.rq->placed.store(index + 1, std::memory_order_release);
  notify_peer_recv(target, conn_.qp().ctx().counters);
  if (there == IBV_WC_LOC_LEN_ERR || there == IBV_WC_REM_INV_REQ_ERR)
    return Verdict::kInvalidRequest;
  if (there == IBV_WC_LOC_PROT_ERR) return Verdict::kRemoteOperational;
  return Verdict::kDone;
}

bool RcExecution::conclude_send(SendWqe& wqe, Verdict verdict, const PeerRecvTarget& target,
                                Nanos now) {
  Qp& qp = conn_.qp();
  // IBA 9.8.3.1: what a UC responder cannot take (no WQE, too long, a bad R_Key,
  // a QP not ready) it drops silently; the requester completes the WQE as sent.
  // An error of the peer's own WQE (LOC_PROT_ERR there) was placed and ends its QP.
  if (qp.type() == IBV_QPT_UC && verdict != Verdict::kDone && verdict != Verdict::kWire &&
      verdict != Verdict::kLocalProtection) {
    bump(qp.ctx().counters.host_refused);
    mark_executed(wqe);
    return true;
  }
  switch (verdict) {
    case Verdict::kDone:
      retries_.not_ready = retries_.rnr = 0;
      bump(qp.ctx().counters.host_sends);
      bump(qp.ctx().counters.host_bytes, wqe.length);
      bump(qp.counters().host_operations);
      mark_executed(wqe);
      return true;
    case Verdict::kWire:
      return conn_.requester().start_on_wire(wqe);
    case Verdict::kNotReady:
      return retry(wqe, now);
    case Verdict::kRnr:
      // A dead peer posts nothing more: as over the wire, it stops answering.
      if (!conn_.path().peer->memory->alive_lately()) return retry(wqe, now);
      return wait_rnr(wqe, target, now);
    case Verdict::kRemoteAccess:
      refuse(wqe, verdict, now);
      return false;
    case Verdict::kLocalProtection:
      bump(qp.ctx().counters.local_access_unmapped);
      fail(wqe, IBV_WC_LOC_PROT_ERR, now);
      return false;
    default:
      // The peer's WQE carries the error and ends its QP when completed.
      retries_.not_ready = retries_.rnr = 0;
      fail(wqe, verdict == Verdict::kInvalidRequest ? IBV_WC_REM_INV_REQ_ERR
                                                                : IBV_WC_REM_OP_ERR,
                   now);
      return false;
  }
}

// Whether every byte of the WQE's gather list can be read here. Only after a
// failed placement, to tell whose memory was missing.
bool RcExecution::local_buffers_readable(const SendWqe& wqe) const {
  std::array<iovec, kMaxPeerSges> local;
  const uint32_t n = local_iovecs(wqe, local);
  return readable_here({local.data(), n});
}

// IBA 9.7.5.2.8: as after an RNR NAK, wait the peer's min_rnr_timer; rnr_retry 7
// waits for ever.
bool RcExecution::wait_rnr(SendWqe& wqe, const PeerRecvTarget& target, Nanos now) {
  Qp& qp = conn_.qp();
  bump(qp.ctx().counters.host_rnr_waits);
  if (qp.attr().rnr_retry != 7 && retries_.rnr++ >= qp.attr().rnr_retry) {
    retries_.rnr = 0;
    fail(wqe, IBV_WC_RNR_RETRY_EXC_ERR, now);
    return false;
  }
  const uint32_t timer = target.min_rnr_timer & 31;
  const Nanos until = now + Nanos(wire::kRnrTimerMicros[timer]) * 1000;
  conn_.requester().pause_until(until);
  qp.arm_timer(until);
  return false;
}

}  // namespace softrdma::engine::host
