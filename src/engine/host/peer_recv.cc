#include "engine/host/peer_recv.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include <unistd.h>

#include "engine/counters.h"
#include "engine/access_check.h"
#include "engine/guarded_memory.h"
#include "engine/mr.h"

namespace softrdma::engine {

namespace {

// Where the results of the target's queue are in the segment, or null: a queue of
// many senders always has them there, a QP's own when it is small
// (RecvState::shared_sges).
samehost::RecvResult* results_in_segment(const PeerRecvTarget& target, uint32_t slots) {
  const bool there =
      target.many_senders || target.rq->shared_sges.load(std::memory_order_relaxed) == 1;
  return there && slots <= samehost::kSharedSges ? target.peer->node->recv_results(target.recv_queue)
                                                 : nullptr;
}

// The scatter list of the peer's WQE `index` (`max_sge` entries, of a queue of
// `slots`, both checked by the caller): from the segment when the peer keeps a
// copy there (RecvState::shared_sges: a load), else from its memory (a system
// call). What a peer wrote is bounded here, never trusted: the checks that follow
// refuse what does not fit its published keys.
bool read_scatter_list(const PeerRecvTarget& target, uint32_t index, uint32_t slots,
                       uint32_t max_sge, std::span<samehost::RecvSge, kMaxPeerSges> out,
                       EngineCounters& counters) {
  samehost::RecvState& rq = *target.rq;
  const size_t first = size_t(index & (slots - 1)) * max_sge;
  if (rq.shared_sges.load(std::memory_order_relaxed) == 1 &&
      size_t(slots) * max_sge <= samehost::kSharedSges) {
    const samehost::RecvSge* shared = target.peer->node->recv_sges(target.recv_queue);
    if (shared == nullptr) return false;
    std::memcpy(out.data(), shared + first, max_sge * sizeof(samehost::RecvSge));
    return true;
  }
  iovec local{out.data(), max_sge * sizeof(samehost::RecvSge)};
  iovec remote{reinterpret_cast<void*>(rq.sges.load(std::memory_order_relaxed) +
                                       first * sizeof(samehost::RecvSge)),
               local.iov_len};
  bump(counters.host_calls);
  return target.peer->memory->read({&local, 1}, {&remote, 1}) == 0;
}

// The payload by stores when every byte of it is on shared pages mapped here:
// 0, EFAULT (a local buffer went), or ENOENT (cross-memory attach then).
int place_mapped(samehost::Peer& peer, std::span<const iovec> local, const PeerIovecs& remote,
                 uint32_t count, EngineCounters& counters) {
  if (!peer.pages) return ENOENT;
  if (!peer.memory->alive_lately()) return ESRCH;  // as in RcExecution::transfer_mapped
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
  uint32_t r = 0;
  size_t offset = 0;  // into remote entry r
  for (const iovec& part : local) {
    if (part.iov_base == nullptr && part.iov_len != 0) return EFAULT;  // an L_Key gone
    const auto* from = static_cast<const uint8_t*>(part.iov_base);
    size_t left = part.iov_len;
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
  bump(counters.host_mapped);
  return 0;
}

}  // namespace

uint32_t gather_iovecs(const SendWqe& wqe, const MrTable& mrs, const Pd* pd, std::span<iovec> out) {
  if (wqe.inline_data != nullptr) {
    out[0] = {wqe.inline_data, wqe.length};
    return 1;
  }
  const MrTable::Access access = mrs.access();
  uint32_t n = 0;
  for (uint32_t i = 0; i < wqe.sgl.count && n < out.size(); ++i) {
    const Sge& sge = wqe.sgl.sges[i];
    if (sge.length == 0) continue;
    AccessError why;
    out[n++] = {access.resolve(sge.lkey, pd, sge.addr, sge.length, 0, why), sge.length};
  }
  return n;
}

bool readable_here(std::span<const iovec> local) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  for (const iovec& part : local) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(part.iov_base);
    const uintptr_t end = begin + part.iov_len;
    if (begin == 0 && part.iov_len != 0) return false;  // the L_Key did not resolve
    for (uintptr_t at = begin; at < end; at = (at / page + 1) * page) {
      uint8_t byte;
      if (!guarded_copy(&byte, reinterpret_cast<const void*>(at), 1)) return false;
    }
  }
  return true;
}

bool open_peer_recv(samehost::Peer& peer, const samehost::QpGrant& grant, uint32_t dest_qpn,
                    PeerRecvTarget& target) {
  target.peer = &peer;
  target.recv_queue = grant.recv_queue;
  target.min_rnr_timer = grant.min_rnr_timer;
  target.rq = peer.node->recv(grant.recv_queue);
  if (target.rq == nullptr) return false;
  const uint32_t kind = target.rq->kind.load(std::memory_order_relaxed);
  target.many_senders = kind != samehost::RecvState::kQueue;
  target.pd = kind == samehost::RecvState::kSrq ? target.rq->pd.load(std::memory_order_relaxed)
                                                : grant.pd;
  // Closed (the QP is entering Error or Reset, the SRQ is destroyed): as a QP that
  // takes no request. An SRQ serves its number, a QP's queue that QP.
  const uint32_t serving = target.rq->qpn.load(std::memory_order_acquire);
  return serving != 0 && (kind == samehost::RecvState::kSrq || serving == dest_qpn);
}

bool claim_peer_recv(samehost::RecvState& rq, uint32_t& index) {
  uint32_t claimed = rq.claimed.load(std::memory_order_acquire);
  const uint32_t posted = rq.posted.load(std::memory_order_acquire);
  if (int32_t(posted - claimed) <= 0) return false;
  if (!rq.claimed.compare_exchange_strong(claimed, claimed + 1, std::memory_order_acq_rel))
    return false;
  index = claimed;
  return true;
}

PeerScatter scatter_into_peer(const PeerRecvTarget& target, uint32_t index, uint64_t length,
                              PeerIovecs& out, EngineCounters& counters) {
  samehost::RecvState& rq = *target.rq;
  const uint32_t slots = rq.slot_count.load(std::memory_order_relaxed);
  const uint32_t max_sge = rq.max_sge.load(std::memory_order_relaxed);
  if (slots == 0 || (slots & (slots - 1)) != 0 || max_sge == 0 || max_sge > kMaxPeerSges)
    return PeerScatter::kUnreadable;
  std::array<samehost::RecvSge, kMaxPeerSges> sges;
  if (!read_scatter_list(target, index, slots, max_sge, sges, counters))
    return PeerScatter::kUnreadable;
  uint64_t left = length;
  uint64_t capacity = 0;
  for (uint32_t i = 0; i < max_sge; ++i) {
    const samehost::RecvSge& sge = sges[i];
    capacity += sge.length;
    if (sge.length == 0 || left == 0) continue;
    // IBA 10.6.3.1: the L_Key's PD, local write, the range (access_check.h).
    const auto grant = target.peer->node->key(sge.lkey);
    const KeyView key = grant ? KeyView::of(*grant) : KeyView{};
    uint64_t offset = 0;
    const RemoteAccess entry{IBV_ACCESS_LOCAL_WRITE, sge.addr, sge.length, target.pd, 0};
    if (check_key(grant ? &key : nullptr, entry, offset) != AccessError::kNone)
      return PeerScatter::kRefused;
    const uint64_t take = std::min<uint64_t>(left, sge.length);
    out.spans[out.count] = grant->shared;
    out.remote[out.count++] = {reinterpret_cast<void*>(grant->host_addr + offset),
                               size_t(take)};
    left -= take;
  }
  return length > capacity ? PeerScatter::kTooLong : PeerScatter::kGo;
}

// The payload by stores when it is all on shared pages, else by cross-memory
// attach; the result by a store into the segment for a small queue, else in the
// same system call as the payload.
int place_into_peer(const PeerRecvTarget& target, uint32_t index, std::span<iovec> local,
                    uint32_t local_count, PeerIovecs& remote, samehost::RecvResult result,
                    EngineCounters& counters) {
  samehost::Peer& peer = *target.peer;
  uint32_t payload = local_count != 0 ? remote.count : 0;
  if (payload != 0) {
    const int err = place_mapped(peer, local.first(local_count), remote, payload, counters);
    if (err != ENOENT && err != 0) return err;
    if (err == 0) payload = 0;
  }
  const uint32_t slots = target.rq->slot_count.load(std::memory_order_relaxed);
  const uint32_t slot = index & (slots - 1);
  samehost::RecvResult* in_segment = results_in_segment(target, slots);
  if (target.many_senders && in_segment == nullptr) return EINVAL;  // garbage: theirs are there
  const uint32_t n = payload != 0 ? local_count : 0;
  if (in_segment != nullptr) {
    // Published by `placed` (a QP's own queue) or by `seq`, stored last (many senders).
    result.seq = 0;
    std::memcpy(&in_segment[slot], &result, sizeof result);
    int err = 0;
    if (payload != 0) {
      bump(counters.host_calls);
      err = peer.memory->write({local.data(), n}, {remote.remote.data(), payload});
    }
    if (err == 0 && target.many_senders)
      std::atomic_ref<uint32_t>(in_segment[slot].seq).store(index + 1, std::memory_order_seq_cst);
    return err;
  }
  local[n] = {&result, sizeof result};
  remote.remote[payload] = {
      reinterpret_cast<void*>(target.rq->results.load(std::memory_order_relaxed) +
                              uint64_t(slot) * sizeof(samehost::RecvResult)),
      sizeof result};
  bump(counters.host_calls);
  return peer.memory->write({local.data(), n + 1}, {remote.remote.data(), payload + 1});
}

void void_peer_claim(const PeerRecvTarget& target, uint32_t index, uint32_t qpn) {
  if (!target.many_senders) return;
  const uint32_t slots = target.rq->slot_count.load(std::memory_order_relaxed);
  if (slots == 0 || (slots & (slots - 1)) != 0) return;
  samehost::RecvResult* results = results_in_segment(target, slots);
  if (results == nullptr) return;
  samehost::RecvResult& result = results[index & (slots - 1)];
  result = samehost::RecvResult{};
  result.flags = samehost::RecvResult::kVoid;
  result.qpn = qpn;
  std::atomic_ref<uint32_t>(result.seq).store(index + 1, std::memory_order_seq_cst);
  if (target.peer->node->notice(target.recv_queue)) target.peer->ring();
}

void notify_peer_recv(const PeerRecvTarget& target, EngineCounters& counters) {
  if (target.peer->node->notice(target.recv_queue) && target.peer->ring())
    bump(counters.host_doorbells);
}

}  // namespace softrdma::engine
