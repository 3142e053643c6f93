// The same-host path of a connected QP (docs/decisions/same-host.md): the
// requester side (rc::Requester, through host::HostExecutor) executes an RDMA
// WRITE, READ or ATOMIC itself, against the memory of the peer process, as that
// peer's RNIC would on receiving the request — after the checks its responder
// makes (access_check.h: IBA 10.2.4.2 the QP's remote access rights, 10.6.3 the
// R_Key's PD, rights and range, 9.4.5 alignment), with the same outcome for
// each: a refused request completes with the status its NAK would give and ends
// the peer's QP as that NAK's sender's ends (IBA 9.9.3.1.2).
//
// Order (IBA 9.5): a request executed here must not overtake one still on the
// wire, so it waits until every PSN sent is acknowledged. A peer QP that cannot
// take requests yet (not in RTR/RTS) is a lost packet: retried after the QP's
// timeout, retry_cnt times, then IBV_WC_RETRY_EXC_ERR.
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <optional>
#include <cstring>

#include "engine/device.h"
#include "engine/guarded_memory.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/host_execution.h"
#include "samehost/host.h"
#include "wire/psn.h"

namespace softrdma::engine::host {

namespace {

int right_needed(const SendWqe& wqe) {
  if (wqe.is_read()) return IBV_ACCESS_REMOTE_READ;
  if (wqe.is_atomic()) return IBV_ACCESS_REMOTE_ATOMIC;
  return IBV_ACCESS_REMOTE_WRITE;
}

}  // namespace

bool RcExecution::takes_requests(uint32_t state) {
  return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD ||
         state == IBV_QPS_SQE;
}

bool RcExecution::executes(const SendWqe& wqe) const {
  // A TM SRQ's rendezvous READ completes on the SRQ's CQ through the wire's
  // completer (tag_matching.md): it stays on the wire.
  if (!conn_.path().peer || wqe.tm != TmSend::kNone) return false;
  // A SEND is placed in the peer's receive WQE if the peer publishes the queue
  // its QP receives from (its own, or its basic SRQ's).
  // An XRC SEND's queue is the SRQ it names (find_receiver_on_host).
  if (consumes_receive(wqe)) {
    if (conn_.qp().type() == IBV_QPT_XRC_SEND) return true;
    const auto target = conn_.path().peer->node->qp(conn_.path().dest_qpn);
    return !target || target->recv_queue != 0;
  }
  return wqe.opcode == IBV_WR_RDMA_WRITE || wqe.is_read() || wqe.is_atomic();
}

uint32_t RcExecution::peer_qp_type() const {
  return conn_.qp().type() == IBV_QPT_XRC_SEND ? uint32_t(IBV_QPT_XRC_RECV)
                                                : uint32_t(conn_.qp().type());
}

// IBA A14: an XRC request names the XRC SRQ that receives it, whose PD checks its
// R_Key and whose queue takes its SEND; the receive QP has neither of its own. So
// `target` becomes the grant as this request sees it. An SRQ outside the receive
// QP's domain is an invalid request (responder.cc); one not published (no such
// SRQ, or too large to be) is left to the wire to judge.
Verdict RcExecution::as_request_sees_it(const SendWqe& wqe, samehost::Peer& peer,
                                        samehost::QpGrant& target) const {
  if (conn_.qp().type() != IBV_QPT_XRC_SEND) return Verdict::kDone;
  const auto srq = peer.node->xrc_srq(wqe.xrc_srqn);
  if (!srq) return Verdict::kWire;
  if (srq->xrcd != target.xrcd) return Verdict::kInvalidRequest;
  target.pd = srq->pd;
  target.recv_queue = srq->recv_queue;  // the receive QP's RNR timer stays
  return Verdict::kDone;
}

// What the peer's responder would answer, before any byte moves.
Verdict RcExecution::check(const SendWqe& wqe, samehost::Peer& peer, HostRange& range,
                           HostBatch* cache) const {
  // Looked up into the batch's cache when there is one (a list names the same QP
  // and key in every WQE), else into locals: no grant is copied twice.
  std::optional<samehost::QpGrant> own_target;
  std::optional<samehost::QpGrant>& target = cache != nullptr ? cache->target : own_target;
  if (!target) target = peer.node->qp(conn_.path().dest_qpn);
  if (!target || !takes_requests(target->state) || target->type != peer_qp_type())
    return Verdict::kNotReady;
  // An XRC request sees its SRQ's PD and queue: a view of its own, the cache stays.
  const samehost::QpGrant* view = &*target;
  samehost::QpGrant xrc_view;
  if (conn_.qp().type() == IBV_QPT_XRC_SEND) {
    xrc_view = *target;
    if (const Verdict v = as_request_sees_it(wqe, peer, xrc_view); v != Verdict::kDone) return v;
    view = &xrc_view;
  }
  // The peer's responder's rules (access_check.h) against what it published.
  const uint64_t length = wqe.is_atomic() ? 8 : wqe.length;
  const RemoteAccess request{right_needed(wqe), wqe.remote_addr, length, view->pd,
                             conn_.path().dest_qpn};
  std::optional<samehost::KeyGrant> own_key;
  std::optional<samehost::KeyGrant>& grant = cache != nullptr ? cache->key : own_key;
  if (length != 0 && (!grant || cache == nullptr || cache->rkey != wqe.rkey)) {
    grant = peer.node->key(wqe.rkey);
    if (cache != nullptr) cache->rkey = wqe.rkey;
  }
  const bool keyed = length != 0 && grant.has_value();
  const KeyView key = keyed ? KeyView::of(*grant) : KeyView{};
  uint64_t offset = 0;
  const Verdict v = check_remote_access(view->access, conn_.qp().ctx().config.limits.max_msg_size,
                                        wqe.is_atomic(), request, keyed ? &key : nullptr, offset);
  // A key the peer could not publish (its table full) is the wire's to judge.
  if (v == Verdict::kRemoteAccess && !keyed && peer.node->key_overflow()) return Verdict::kWire;
  if (v != Verdict::kDone || length == 0) return v;  // zero length: no key, no range
  range.addr = grant->host_addr + offset;
  range.span = grant->shared;
  if (wqe.is_atomic() && range.addr % 8 != 0) return Verdict::kInvalidRequest;
  return Verdict::kDone;
}

// The local side of the transfer: the WQE's buffers (checked by start()).
uint32_t RcExecution::local_iovecs(const SendWqe& wqe, std::span<iovec> out) const {
  std::span<const iovec> checked;
  if (!conn_.requester().checked_locals(wqe, checked))
    return gather_iovecs(wqe, conn_.qp().ctx().mrs, conn_.qp().pd(), out);
  const size_t n = std::min(checked.size(), out.size());
  std::copy_n(checked.begin(), n, out.begin());
  return uint32_t(n);
}

// The original value into the WQE's local buffer (IBA 9.4.5: the ATOMIC's result).
bool RcExecution::deliver_atomic_result(const SendWqe& wqe, uint64_t original) {
  const Sge& sge = wqe.sgl.sges[0];
  auto access = conn_.qp().ctx().mrs.access();
  AccessError why;
  uint8_t* result = access.resolve(sge.lkey, conn_.qp().pd(), sge.addr, 8, 0, why);
  if (result == nullptr || !guarded_copy(result, &original, 8)) return false;
  bump(conn_.qp().ctx().counters.host_atomics);
  return true;
}

int RcExecution::transfer(SendWqe& wqe, samehost::Peer& peer, const HostRange& range) {
  if (wqe.length == 0 && !wqe.is_atomic()) return 0;
  if (const int err = transfer_mapped(wqe, peer, range); err != ENOENT) return err;
  EngineCounters& counters = conn_.qp().ctx().counters;
  const uint64_t host_addr = range.addr;
  if (wqe.is_atomic()) {
    uint64_t before = 0;
    iovec word{&before, 8};
    iovec remote{reinterpret_cast<void*>(host_addr), 8};
    samehost::AtomicsGuard guard(peer.node->header());
    bump(counters.host_calls, 2);
    if (int err = peer.memory->read({&word, 1}, {&remote, 1}); err != 0) return err;
    uint64_t after = before + wqe.compare_add;
    if (wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) after = before == wqe.compare_add ? wqe.swap : before;
    iovec value{&after, 8};
    if (int err = peer.memory->write({&value, 1}, {&remote, 1}); err != 0) return err;
    if (!deliver_atomic_result(wqe, before)) return EFAULT;
    bump(conn_.qp().counters().host_operations);
    return 0;
  }
  std::array<iovec, 64> local;
  const uint32_t n = local_iovecs(wqe, local);
  iovec remote{reinterpret_cast<void*>(host_addr), wqe.length};
  bump(counters.host_calls);
  const int err = wqe.is_read() ? peer.memory->read({local.data(), n}, {&remote, 1})
                                : peer.memory->write({local.data(), n}, {&remote, 1});
  if (err != 0) return err;
  bump(conn_.qp().counters().host_operations);
  bump(wqe.is_read() ? counters.host_reads : counters.host_writes);
  bump(counters.host_bytes, wqe.length);
  return 0;
}

// Executes the WQE on the peer; false when the requester must stop for now (a
// wait, a retry, an error), `index` then where it resumes. Consecutive WRITEs
// that pass the checks are batched (rc_batch.cc): a posted list leaves in one
// system call.
bool RcExecution::execute(SendWqe& wqe, uint32_t& index, Nanos now) {
  // IBA 9.5: nothing still on the wire may be overtaken; the ACK that clears the
  // way runs the requester again.
  if (conn_.acknowledged() && conn_.completer().una_psn() != conn_.requester().next_psn())
    return false;
  if (batch(wqe, index)) return true;
  // Alone, after what was batched (IBA 9.5 order).
  if (!flush(now, index)) return false;
  return execute_alone(wqe, now);
}

bool RcExecution::execute_alone(SendWqe& wqe, Nanos now) {
  if (consumes_receive(wqe)) return send(wqe, now);
  samehost::Peer& peer = *conn_.path().peer;
  HostRange range;
  int err = 0;
  // The key is looked up inside the access: the peer's ibv_dereg_mr waits for it
  // to end, or this lookup misses the key (NodeSegment::revoke_key).
  peer.node->begin_access();
  Verdict verdict = check(wqe, peer, range);
  if (verdict == Verdict::kDone) err = transfer(wqe, peer, range);
  peer.node->end_access();
  if (verdict == Verdict::kWire) return conn_.requester().start_on_wire(wqe);
  if (verdict == Verdict::kDone && err == EFAULT) verdict = Verdict::kRemoteAccess;
  if (verdict == Verdict::kDone && err != 0) verdict = Verdict::kNotReady;
  if (verdict != Verdict::kDone && conn_.qp().type() == IBV_QPT_UC) {
    // IBA 9.8.3.1: a UC responder drops what it cannot execute, silently, and
    // its QP lives on; the requester, told nothing, completes the WQE as sent,
    // as it does over the wire (responder_uc.cc).
    bump(conn_.qp().ctx().counters.host_refused);
    mark_executed(wqe);
    return true;
  }
  if (verdict == Verdict::kNotReady) return retry(wqe, now);
  retries_.not_ready = 0;
  if (verdict != Verdict::kDone) {
    refuse(wqe, verdict, now);
    return false;
  }
  mark_executed(wqe);
  return true;
}

void RcExecution::mark_executed(SendWqe& wqe) {
  wqe.first_psn = conn_.requester().next_psn();  // takes no PSN, as a bind
  wqe.npackets = 0;
  wqe.next_packet = 0;
  wqe.on_host = true;
  wqe.state = SendState::kSent;
}

// The peer's QP cannot take the request (not yet connected, destroyed, its process
// gone): as a lost request, retried after the QP's Local ACK Timeout, at most
// retry_cnt times (IBA 9.7.6.1.3). A vanished peer waits out the retries too, as
// it would over the wire: failing at once would let this error overtake the
// completions of requests the peer did take and whose ACKs are still on their way
// (ibv_srq_pingpong's server saw exactly that). Only an infinite timeout (0) is
// bounded for a peer known to be gone, by the longest retransmission interval.
bool RcExecution::retry(SendWqe& wqe, Nanos now) {
  Qp& qp = conn_.qp();
  bump(qp.ctx().counters.host_peer_not_ready);
  const bool gone = !conn_.path().peer->usable();
  if (gone) qp.ctx().host->peer_gone();
  if (retries_.not_ready++ >= qp.attr().retry_cnt) {
    retries_.not_ready = 0;
    wqe.status = IBV_WC_RETRY_EXC_ERR;
    conn_.fail(now, std::nullopt);
    return false;
  }
  Nanos wait = std::max<Nanos>(conn_.completer().retry_interval(), 1'000'000);
  if (gone && wait == kNever) wait = qp.ctx().config.max_retry_interval_ns;
  const Nanos until = now + wait;
  conn_.requester().pause_until(until);
  qp.arm_timer(until);
  return false;
}

// IBA 9.9.3.1.2: the status the NAK would give here, and the peer's QP ends with
// the event its responder would raise.
void RcExecution::refuse(SendWqe& wqe, Verdict verdict, Nanos now) {
  const bool access = verdict == Verdict::kRemoteAccess;
  samehost::Peer& peer = *conn_.path().peer;
  if (peer.node->report_fault(conn_.path().dest_qpn,
                              access ? IBV_EVENT_QP_ACCESS_ERR : IBV_EVENT_QP_REQ_ERR) &&
      peer.ring())
    bump(conn_.qp().ctx().counters.host_doorbells);
  fail(wqe, access ? IBV_WC_REM_ACCESS_ERR : IBV_WC_REM_INV_REQ_ERR, now);
}

// The WQE completes with `status`, after those before it; the QP enters Error.
void RcExecution::fail(SendWqe& wqe, ibv_wc_status status, Nanos now) {
  bump(conn_.qp().ctx().counters.host_refused);
  wqe.status = status;
  conn_.completer().complete_local_heads();
  conn_.fail(now, std::nullopt);
}

}  // namespace softrdma::engine::host
