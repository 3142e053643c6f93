// Consecutive RDMA WRITEs to a same-host peer in one system call: a posted list
// (ibv_post_send with many WRs, perftest's --post_list) would otherwise cost one
// process_vm_writev(2) each, and the call, not the copy, is what an 8-byte WRITE
// costs. The batch is checked WQE by WQE as each joins it (the same checks as
// alone), executed when something else must go (a READ, an ATOMIC, a packet, the
// end of the requester's run) and completes in queue order like the rest.
//
// One access bracket (NodeSegment::revoke_key waits for it) covers the whole
// batch, from the first lookup to the copy. If the copy fails, each WQE is
// executed again alone, in order, so the one that fails gets its own status (a
// WRITE repeated writes the same bytes).
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <climits>

#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/host_execution.h"
#include "samehost/host.h"

namespace softrdma::engine::host {


bool RcExecution::batch(SendWqe& wqe, uint32_t index) {
  if (wqe.opcode != IBV_WR_RDMA_WRITE || wqe.length == 0) return false;
  HostBatch& b = batch_;
  if (b.open && b.owner != &conn_) return false;
  const uint32_t sges = wqe.inline_data != nullptr ? 1 : wqe.sgl.count;
  if (b.wqes == HostBatch::kWqes || b.locals + sges > HostBatch::kLocal) return false;
  samehost::Peer& peer = *conn_.path().peer;
  if (!b.open) {
    peer.node->begin_access();
    // The arrays are written before they are read (up to wqes and locals): only
    // the counts start again (clearing 17 KiB per batch was a seventh of a posted
    // list's instructions, callgrind of ib_write_bw -s 8 --post_list=32).
    b.owner = &conn_;
    b.peer = &peer;
    b.open = true;
    b.wqes = 0;
    b.locals = 0;
    b.bytes = 0;
    b.target.reset();
    b.key.reset();
  }
  HostRange range;
  if (check(wqe, peer, range, &b) != Verdict::kDone) return false;
  // On the peer's shared pages, with nothing batched before it: a store now, in
  // order. After batched WRITEs it joins them, so as not to overtake them.
  if (b.wqes == 0) {
    const int err = transfer_mapped(wqe, peer, range);
    if (err == 0) mark_executed(wqe);
    if (err != ENOENT) return err == 0;
  }
  const uint32_t n = local_iovecs(wqe, {b.local.data() + b.locals, HostBatch::kLocal - b.locals});
  b.locals += n;
  b.remote[b.wqes] = {reinterpret_cast<void*>(range.addr), wqe.length};
  b.index[b.wqes++] = index;
  b.bytes += wqe.length;
  mark_executed(wqe);
  return true;
}

bool RcExecution::flush(Nanos now, uint32_t& resume) {
  HostBatch& b = batch_;
  if (!b.open || b.owner != &conn_) return true;
  samehost::Peer& peer = *b.peer;
  const int err =
      b.wqes == 0 ? 0 : peer.memory->write({b.local.data(), b.locals}, {b.remote.data(), b.wqes});
  peer.node->end_access();
  b.open = false;
  b.owner = nullptr;
  EngineCounters& counters = conn_.qp().ctx().counters;
  if (b.wqes != 0) bump(counters.host_calls);
  if (err == 0) {
    bump(counters.host_writes, b.wqes);
    bump(counters.host_bytes, b.bytes);
    bump(conn_.qp().counters().host_operations, b.wqes);
    return true;
  }
  // Each again alone, from the first: the requester resumes there if one waits.
  Ring<SendWqe>& sq = conn_.qp().sq();
  const HostBatch failed = b;
  for (uint32_t i = 0; i < failed.wqes; ++i) {
    sq.at(failed.index[i]).state = SendState::kQueued;
    sq.at(failed.index[i]).on_host = false;
  }
  for (uint32_t i = 0; i < failed.wqes; ++i) {
    if (execute_alone(sq.at(failed.index[i]), now)) continue;
    resume = failed.index[i];
    return false;
  }
  return true;
}

}  // namespace softrdma::engine::host
