// RDMA WRITE, READ and atomics through a same-host peer's shared pages
// (samehost/shared_pages.h; docs/decisions/same-host.md "Shared pages"): loads and
// stores into the memory file the peer's registered pages are on, mapped here,
// where a cross-memory-attach call would cost about 2 µs whatever it copies
// (docs/performance.md). The checks before are check_on_host's, inside the same
// access bracket (the peer's ibv_dereg_mr waits for it, and only then gives its
// pages back); the outcomes after are those of the system-call path.
#include <sys/uio.h>

#include <array>
#include <cerrno>

#include "engine/device.h"
#include "engine/guarded_memory.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/host_execution.h"
#include "samehost/host.h"

namespace softrdma::engine::host {

int RcExecution::transfer_mapped(SendWqe& wqe, samehost::Peer& peer, const HostRange& range) {
  const uint64_t length = wqe.is_atomic() ? 8 : wqe.length;
  if (!peer.pages || !range.span.contains(range.addr, length)) return ENOENT;
  // A store into a dead process's pages succeeds: ask whether it lives (as the
  // system call's ESRCH would tell), or the survivor never learns it died.
  if (!peer.memory->alive_lately()) return ESRCH;
  const auto mapping = peer.pages->map(range.span);
  if (!mapping) return ENOENT;
  uint8_t* there = mapping->at(range.addr);
  EngineCounters& counters = conn_.qp().ctx().counters;
  if (wqe.is_atomic()) {
    // Under the peer's atomics lock, as every other process's atomic on its memory
    // (those that reach it by system calls too): IBA 9.4.5, atomic among them all.
    uint64_t before = 0;
    {
      samehost::AtomicsGuard guard(peer.node->header());
      const bool swap = wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
      if (!guarded_atomic(swap ? AtomicOp::kCompareSwap : AtomicOp::kFetchAdd,
                          reinterpret_cast<uint64_t*>(there), wqe.compare_add,
                          swap ? wqe.swap : wqe.compare_add, before))
        return EFAULT;
    }
    if (!deliver_atomic_result(wqe, before)) return EFAULT;
  } else {
    std::array<iovec, 64> local;
    const uint32_t n = local_iovecs(wqe, local);
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; ++i) {
      // An L_Key that no longer resolves: the fault a system call would report.
      if (local[i].iov_base == nullptr) return EFAULT;
      const bool copied = wqe.is_read() ? guarded_copy(local[i].iov_base, there + at, local[i].iov_len)
                                        : guarded_copy(there + at, local[i].iov_base, local[i].iov_len);
      if (!copied) return EFAULT;
      at += local[i].iov_len;
    }
    bump(wqe.is_read() ? counters.host_reads : counters.host_writes);
    bump(counters.host_bytes, length);
  }
  bump(counters.host_mapped);
  bump(conn_.qp().counters().host_operations);
  return 0;
}

}  // namespace softrdma::engine::host
