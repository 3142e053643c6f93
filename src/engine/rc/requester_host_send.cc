// The same-host path of a SEND, SEND with immediate or RDMA WRITE with immediate
// (docs/decisions/same-host.md, "SENDs"): the requester consumes the peer QP's
// next receive WQE itself, as the peer's RNIC would on receiving the message. It
// claims the WQE in the peer's node segment (samehost::RecvState), reads the WQE's
// scatter list (from the segment for a small queue, else from the peer's memory),
// checks each L_Key against what the peer published (IBA 10.6.3.1: PD, local
// write, range), and writes the payload (by stores when it lands on shared pages,
// samehost/shared_pages.h) and the WQE's result (by a store into the segment for a
// small queue) — at most one system call, none for a latency test's SEND; the
// peer completes the WQE at its next engine turn, woken by a notice. Outcomes are
// the wire's:
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
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/requester.h"
#include "samehost/host.h"
#include "wire/fields.h"

namespace softrdma::engine::rc {

namespace {

// The next WQE of the peer's queue, if one is posted and not yet claimed.
bool claim_receive(samehost::RecvState& rq, uint32_t& index) {
  uint32_t claimed = rq.claimed.load(std::memory_order_acquire);
  const uint32_t posted = rq.posted.load(std::memory_order_acquire);
  if (int32_t(posted - claimed) <= 0) return false;
  if (!rq.claimed.compare_exchange_strong(claimed, claimed + 1, std::memory_order_acq_rel))
    return false;
  index = claimed;
  return true;
}

}  // namespace

bool Requester::consumes_receive(const SendWqe& wqe) {
  return wqe.opcode == IBV_WR_SEND || wqe.opcode == IBV_WR_SEND_WITH_IMM ||
         wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// Where the WQE `index` of the peer's queue scatters a message of `length` bytes:
// its SGEs read from the peer and checked as its responder would (IBA 10.6.3.1),
// clipped to the message. kGo, kInvalidRequest (too long: LOC_LEN_ERR there) or
// kRemoteOperational (an L_Key refused: LOC_PROT_ERR there); kNotReady when the
// peer's memory cannot be read.
Requester::HostVerdict Requester::scatter_on_host(const HostTarget& target, uint32_t index,
                                                  uint64_t length, HostIovecs& out) const {
  samehost::Peer& peer = *conn_.path().peer;
  samehost::RecvState& rq = *target.rq;
  const uint32_t slots = rq.slot_count.load(std::memory_order_relaxed);
  const uint32_t max_sge = rq.max_sge.load(std::memory_order_relaxed);
  if (slots == 0 || (slots & (slots - 1)) != 0 || max_sge == 0 || max_sge > kMaxPeerSges)
    return HostVerdict::kNotReady;
  std::array<samehost::RecvSge, kMaxPeerSges> sges;
  if (!read_scatter_list(target, index, slots, max_sge, sges)) return HostVerdict::kNotReady;
  uint64_t left = length;
  uint64_t capacity = 0;
  for (uint32_t i = 0; i < max_sge; ++i) {
    const samehost::RecvSge& sge = sges[i];
    capacity += sge.length;
    if (sge.length == 0 || left == 0) continue;
    const auto grant = peer.node->key(sge.lkey);
    if (!grant || grant->pd != target.pd || (grant->access & IBV_ACCESS_LOCAL_WRITE) == 0 ||
        sge.addr < grant->iova || sge.length > grant->length ||
        sge.addr - grant->iova > grant->length - sge.length)
      return HostVerdict::kRemoteOperational;
    const uint64_t take = std::min<uint64_t>(left, sge.length);
    out.spans[out.count] = grant->shared;
    out.remote[out.count++] = {reinterpret_cast<void*>(grant->host_addr + (sge.addr - grant->iova)),
                               size_t(take)};
    left -= take;
  }
  return length > capacity ? HostVerdict::kInvalidRequest : HostVerdict::kGo;
}

// The scatter list of the peer's WQE `index` (`max_sge` entries, of a queue of
// `slots`, both checked by the caller): from the segment when the peer keeps a
// copy there (RecvState::shared_sges: a load), else from its memory (a system
// call). What a peer wrote is bounded here, never trusted: the checks that follow
// refuse what does not fit its published keys.
bool Requester::read_scatter_list(const HostTarget& target, uint32_t index, uint32_t slots,
                                  uint32_t max_sge,
                                  std::span<samehost::RecvSge, kMaxPeerSges> out) const {
  samehost::Peer& peer = *conn_.path().peer;
  samehost::RecvState& rq = *target.rq;
  const size_t first = size_t(index & (slots - 1)) * max_sge;
  if (rq.shared_sges.load(std::memory_order_relaxed) == 1 &&
      size_t(slots) * max_sge <= samehost::kSharedSges) {
    const samehost::RecvSge* shared = peer.node->recv_sges(target.recv_queue);
    if (shared == nullptr) return false;
    std::memcpy(out.data(), shared + first, max_sge * sizeof(samehost::RecvSge));
    return true;
  }
  iovec local{out.data(), max_sge * sizeof(samehost::RecvSge)};
  iovec remote{reinterpret_cast<void*>(rq.sges.load(std::memory_order_relaxed) +
                                       first * sizeof(samehost::RecvSge)),
               local.iov_len};
  bump(conn_.qp().device().counters().host_calls);
  return peer.memory->read({&local, 1}, {&remote, 1}) == 0;
}

// The message and its result (the WQE's result alone when the message failed
// there: `status`). The payload by stores when it is all on shared pages, else by
// cross-memory attach; the result by a store into the segment for a small queue,
// else in the same system call as the payload.
int Requester::place_on_host(const SendWqe& wqe, const HostTarget& target, uint32_t index,
                             HostIovecs& remote, ibv_wc_status status) {
  samehost::Peer& peer = *conn_.path().peer;
  samehost::RecvState& rq = *target.rq;
  samehost::RecvResult result{};
  result.qpn = conn_.path().dest_qpn;
  result.status = uint32_t(status);
  result.byte_len = status == IBV_WC_SUCCESS ? wqe.length : 0;
  result.imm_data = wqe.imm_data;
  if (wqe.opcode != IBV_WR_SEND) result.flags |= samehost::RecvResult::kWithImm;
  if (wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) result.flags |= samehost::RecvResult::kRdmaWithImm;
  if (wqe.flags & IBV_SEND_SOLICITED) result.flags |= samehost::RecvResult::kSolicited;
  uint32_t payload = status == IBV_WC_SUCCESS && wqe.length != 0 ? remote.count : 0;
  if (payload != 0) {
    const int err = place_mapped(wqe, remote, payload);
    if (err != ENOENT && err != 0) return err;
    if (err == 0) payload = 0;
  }
  const uint32_t slots = rq.slot_count.load(std::memory_order_relaxed);
  const uint32_t slot = index & (slots - 1);
  samehost::RecvResult* in_segment = results_in_segment(target, slots);
  if (target.srq && in_segment == nullptr) return EINVAL;  // garbage: an SRQ's are there
  std::array<iovec, kMaxPeerSges + 1> local;
  uint32_t n = payload != 0 ? local_iovecs(wqe, {local.data(), kMaxPeerSges}) : 0;
  if (in_segment != nullptr) {
    // Published by `placed` (a QP's queue) or by `seq`, stored last (an SRQ's).
    std::memcpy(&in_segment[slot], &result, sizeof result);
    int err = 0;
    if (payload != 0) {
      bump(conn_.qp().device().counters().host_calls);
      err = peer.memory->write({local.data(), n}, {remote.remote.data(), payload});
    }
    if (err == 0 && target.srq)
      std::atomic_ref<uint32_t>(in_segment[slot].seq).store(index + 1, std::memory_order_seq_cst);
    return err;
  }
  local[n++] = {&result, sizeof result};
  remote.remote[payload] = {reinterpret_cast<void*>(rq.results.load(std::memory_order_relaxed) +
                                                    uint64_t(slot) * sizeof(samehost::RecvResult)),
                            sizeof result};
  bump(conn_.qp().device().counters().host_calls);
  return peer.memory->write({local.data(), n}, {remote.remote.data(), payload + 1});
}

// Where the results of the target's queue are in the segment, or null: an SRQ's
// always are, a QP's when its queue is small (RecvState::shared_sges).
samehost::RecvResult* Requester::results_in_segment(const HostTarget& target,
                                                    uint32_t slots) const {
  const bool there = target.srq || target.rq->shared_sges.load(std::memory_order_relaxed) == 1;
  return there && slots <= samehost::kSharedSges
             ? conn_.path().peer->node->recv_results(target.recv_queue)
             : nullptr;
}

// An SRQ's WQE claimed here and then not placed: marked so, its owner consumes it
// without a completion (other senders go on claiming after it). A QP's own queue
// has one sender, which gives its claim back or ends the QPs instead.
void Requester::void_claim_on_host(const HostTarget& target, uint32_t index) {
  if (!target.srq) return;
  const uint32_t slots = target.rq->slot_count.load(std::memory_order_relaxed);
  samehost::RecvResult* results = results_in_segment(target, slots);
  if (results == nullptr || slots == 0 || (slots & (slots - 1)) != 0) return;
  samehost::RecvResult& result = results[index & (slots - 1)];
  result = samehost::RecvResult{};
  result.flags = samehost::RecvResult::kVoid;
  result.qpn = conn_.path().dest_qpn;
  std::atomic_ref<uint32_t>(result.seq).store(index + 1, std::memory_order_seq_cst);
  if (conn_.path().peer->node->notice(target.recv_queue)) conn_.path().peer->ring();
}

// A WQE claimed here that the message will not use after all goes back (nobody
// can have claimed after it in a QP's own queue: one sender per QP); in an SRQ
// another sender may have, and the WQE is then voided. kInvalidRequest.
Requester::HostVerdict Requester::give_back_on_host(const HostTarget& target, uint32_t index) {
  uint32_t next = index + 1;
  if (!target.rq->claimed.compare_exchange_strong(next, index, std::memory_order_acq_rel))
    void_claim_on_host(target, index);
  return HostVerdict::kInvalidRequest;
}

int Requester::place_mapped(const SendWqe& wqe, const HostIovecs& remote, uint32_t count) {
  samehost::Peer& peer = *conn_.path().peer;
  if (!peer.pages) return ENOENT;
  if (!peer.memory->alive_lately()) return ESRCH;  // as in transfer_mapped
  // The mappings, held until the copy is done (another thread's map() may drop
  // them meanwhile): a few distinct ones, as a scatter list's entries are mostly
  // in one region; more take cross-memory attach. (A holder per entry, 65 of
  // them built and destroyed per SEND, was half of this function's instructions.)
  constexpr uint32_t kHeld = 4;
  std::array<std::shared_ptr<const samehost::PeerPages::Mapping>, kHeld> held;
  uint32_t distinct = 0;
  std::array<uint8_t*, kMaxPeerSges + 1> there;
  for (uint32_t r = 0; r < count; ++r) {
    const auto addr = reinterpret_cast<uintptr_t>(remote.remote[r].iov_base);
    if (!remote.spans[r].contains(addr, remote.remote[r].iov_len)) return ENOENT;
    if (distinct == 0 || held[distinct - 1]->span.inode != remote.spans[r].inode) {
      if (distinct == kHeld) return ENOENT;
      if (!(held[distinct] = peer.pages->map(remote.spans[r]))) return ENOENT;
      ++distinct;
    }
    there[r] = held[distinct - 1]->at(addr);
  }
  std::array<iovec, kMaxPeerSges> local;
  const uint32_t n = local_iovecs(wqe, local);
  uint32_t r = 0;
  size_t offset = 0;  // into remote entry r
  for (uint32_t i = 0; i < n; ++i) {
    if (local[i].iov_base == nullptr) return EFAULT;  // an L_Key that no longer resolves
    const auto* from = static_cast<const uint8_t*>(local[i].iov_base);
    size_t left = local[i].iov_len;
    while (left > 0 && r < count) {
      const size_t take = std::min(left, remote.remote[r].iov_len - offset);
      if (!guarded_copy(there[r] + offset, from, take)) return EFAULT;
      from += take;
      left -= take;
      offset += take;
      if (offset == remote.remote[r].iov_len) {
        ++r;
        offset = 0;
      }
    }
  }
  bump(conn_.qp().device().counters().host_mapped);
  return 0;
}

// Executes the WQE into the peer's next receive; false when the requester must
// stop for now (an RNR wait, a retry, an error).
bool Requester::send_on_host(SendWqe& wqe, Nanos now) {
  samehost::Peer& peer = *conn_.path().peer;
  HostTarget target;
  uint32_t index = 0;
  ibv_wc_status there = IBV_WC_SUCCESS;
  peer.node->begin_access();
  HostVerdict verdict = find_receiver_on_host(wqe, target);
  HostIovecs remote;
  HostRange range;
  if (verdict == HostVerdict::kGo && wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
    verdict = check_on_host(wqe, peer, range);
  if (verdict == HostVerdict::kGo && !claim_receive(*target.rq, index)) verdict = HostVerdict::kRnr;
  const bool claimed = verdict == HostVerdict::kGo;
  if (verdict == HostVerdict::kGo) {
    if (wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      if (wqe.length != 0) {
        remote.spans[remote.count] = range.span;
        remote.remote[remote.count++] = {reinterpret_cast<void*>(range.addr), wqe.length};
      }
    } else {
      const HostVerdict scattered = scatter_on_host(target, index, wqe.length, remote);
      // UC drops a message longer than its WQE and keeps the WQE (responder_uc.cc).
      if (scattered == HostVerdict::kInvalidRequest && conn_.qp().type() == IBV_QPT_UC)
        verdict = give_back_on_host(target, index);
      if (scattered == HostVerdict::kInvalidRequest) there = IBV_WC_LOC_LEN_ERR;
      if (scattered == HostVerdict::kRemoteOperational) there = IBV_WC_LOC_PROT_ERR;
      if (scattered == HostVerdict::kNotReady) verdict = scattered;
    }
  }
  if (verdict == HostVerdict::kGo)
    verdict = finish_on_host(wqe, target, index, remote, there);
  if (claimed && (verdict == HostVerdict::kNotReady || verdict == HostVerdict::kAccess))
    void_claim_on_host(target, index);
  peer.node->end_access();
  return conclude_send_on_host(wqe, verdict, target, now);
}

// The peer's QP, and its receive queue if SENDs to it may be placed from here.
Requester::HostVerdict Requester::find_receiver_on_host(const SendWqe& wqe,
                                                        HostTarget& target) const {
  samehost::Peer& peer = *conn_.path().peer;
  const uint32_t dest_qpn = conn_.path().dest_qpn;
  const auto grant = peer.node->qp(dest_qpn);
  if (!grant || !takes_requests_on_host(grant->state) ||
      grant->type != uint32_t(conn_.qp().type()))
    return HostVerdict::kNotReady;
  if (wqe.length > conn_.qp().device().limits().max_msg_size) return HostVerdict::kInvalidRequest;
  // Not published (an XRC or tag-matching SRQ's, or one too large): the wire.
  if (grant->recv_queue == 0) return HostVerdict::kWire;
  target.recv_queue = grant->recv_queue;
  target.min_rnr_timer = grant->min_rnr_timer;
  target.rq = peer.node->recv(grant->recv_queue);
  if (target.rq == nullptr) return HostVerdict::kNotReady;
  target.srq = target.rq->kind.load(std::memory_order_relaxed) == samehost::RecvState::kSrq;
  target.pd = target.srq ? target.rq->pd.load(std::memory_order_relaxed) : grant->pd;
  // Closed (the QP is entering Error or Reset, the SRQ is destroyed): as a QP that
  // takes no request.
  const uint32_t serving = target.rq->qpn.load(std::memory_order_acquire);
  if (serving == 0 || (!target.srq && serving != dest_qpn)) return HostVerdict::kNotReady;
  return HostVerdict::kGo;
}

// Writes, then tells the peer: its `placed` moves past the WQE and a notice wakes
// its engine. A failed write of the payload leaves a protection error there.
Requester::HostVerdict Requester::finish_on_host(const SendWqe& wqe, const HostTarget& target,
                                                 uint32_t index, HostIovecs& remote,
                                                 ibv_wc_status there) {
  samehost::Peer& peer = *conn_.path().peer;
  int err = place_on_host(wqe, target, index, remote, there);
  // The sender's own buffer went (munmap without ibv_dereg_mr): its local
  // protection error, as the wire's gather finds it, and the WQE claimed there is
  // given back (nobody can have claimed after it in a QP's own queue: one sender
  // per RC QP; in an SRQ another sender may have, and the WQE is then voided).
  if (err == EFAULT && !local_buffers_readable(wqe)) {
    give_back_on_host(target, index);
    return HostVerdict::kLocalProtection;
  }
  if (err == EFAULT && there == IBV_WC_SUCCESS) {
    there = wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR;
    if (there == IBV_WC_SUCCESS) return HostVerdict::kAccess;  // the R_Key's memory went
    HostIovecs none;
    err = place_on_host(wqe, target, index, none, there);
  }
  if (err != 0) return HostVerdict::kNotReady;
  if (!target.srq) target.rq->placed.store(index + 1, std::memory_order_release);
  if (peer.node->notice(target.recv_queue) && peer.ring())
    bump(conn_.qp().device().counters().host_doorbells);
  if (there == IBV_WC_LOC_LEN_ERR) return HostVerdict::kInvalidRequest;
  if (there == IBV_WC_LOC_PROT_ERR) return HostVerdict::kRemoteOperational;
  return HostVerdict::kGo;
}

bool Requester::conclude_send_on_host(SendWqe& wqe, HostVerdict verdict,
                                      const HostTarget& target, Nanos now) {
  Qp& qp = conn_.qp();
  // IBA 9.8.3.1: what a UC responder cannot take (no WQE, too long, a bad R_Key,
  // a QP not ready) it drops silently; the requester completes the WQE as sent.
  // An error of the peer's own WQE (LOC_PROT_ERR there) was placed and ends its QP.
  if (qp.type() == IBV_QPT_UC && verdict != HostVerdict::kGo && verdict != HostVerdict::kWire &&
      verdict != HostVerdict::kLocalProtection) {
    bump(qp.device().counters().host_refused);
    mark_executed_on_host(wqe);
    return true;
  }
  switch (verdict) {
    case HostVerdict::kGo:
      host_retries_ = host_rnr_retries_ = 0;
      bump(qp.device().counters().host_sends);
      bump(qp.device().counters().host_bytes, wqe.length);
      bump(qp.counters().host_operations);
      mark_executed_on_host(wqe);
      return true;
    case HostVerdict::kWire:
      return start_on_wire(wqe);
    case HostVerdict::kNotReady:
      return retry_on_host(wqe, now);
    case HostVerdict::kRnr:
      // A dead peer posts nothing more: as over the wire, it stops answering.
      if (!conn_.path().peer->memory->alive_lately()) return retry_on_host(wqe, now);
      return wait_rnr_on_host(wqe, target, now);
    case HostVerdict::kAccess:
      refuse_on_host(wqe, verdict, now);
      return false;
    case HostVerdict::kLocalProtection:
      bump(qp.device().counters().local_access_unmapped);
      fail_on_host(wqe, IBV_WC_LOC_PROT_ERR, now);
      return false;
    default:
      // The peer's WQE carries the error and ends its QP when completed.
      host_retries_ = host_rnr_retries_ = 0;
      fail_on_host(wqe, verdict == HostVerdict::kInvalidRequest ? IBV_WC_REM_INV_REQ_ERR
                                                                : IBV_WC_REM_OP_ERR,
                   now);
      return false;
  }
}

// Whether every byte of the WQE's gather list can be read here: one byte of each
// page, through the fault-guarded copy (guarded_memory.h). Only after a failed
// placement, to tell whose memory was missing.
bool Requester::local_buffers_readable(const SendWqe& wqe) const {
  std::array<iovec, kMaxPeerSges> local;
  const uint32_t n = local_iovecs(wqe, local);
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  for (uint32_t i = 0; i < n; ++i) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(local[i].iov_base);
    const uintptr_t end = begin + local[i].iov_len;
    if (begin == 0 && local[i].iov_len != 0) return false;  // the lkey did not resolve
    for (uintptr_t at = begin; at < end; at = (at / page + 1) * page) {
      uint8_t byte;
      if (!guarded_copy(&byte, reinterpret_cast<const void*>(at), 1)) return false;
    }
  }
  return true;
}

// IBA 9.7.5.2.8: as after an RNR NAK, wait the peer's min_rnr_timer; rnr_retry 7
// waits for ever.
bool Requester::wait_rnr_on_host(SendWqe& wqe, const HostTarget& target, Nanos now) {
  Qp& qp = conn_.qp();
  bump(qp.device().counters().host_rnr_waits);
  if (qp.attr().rnr_retry != 7 && host_rnr_retries_++ >= qp.attr().rnr_retry) {
    host_rnr_retries_ = 0;
    fail_on_host(wqe, IBV_WC_RNR_RETRY_EXC_ERR, now);
    return false;
  }
  const uint32_t timer = target.min_rnr_timer & 31;
  const Nanos until = now + Nanos(wire::kRnrTimerMicros[timer]) * 1000;
  pause_until(until);
  qp.device().arm_timer(qp, until);
  return false;
}

}  // namespace softrdma::engine::rc
