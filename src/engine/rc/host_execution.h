// One RC or UC connection's WQEs executed on its same-host peer
// (docs/decisions/same-host.md): what the HostExecutor does for rc::Requester.
// A short-lived view, made for each call, over the connection, the executor's
// batch and the connection's retry counts; it holds no state of its own.
//   rc_execution.cc  WRITE, READ, ATOMIC: the checks (access_check.h), the copy,
//                    the outcomes (retry, refusal, UC's silent drop);
//   rc_batch.cc      consecutive WRITEs in one system call;
//   rc_mapped.cc     the same through the peer's shared pages;
//   rc_send.cc       SEND and WRITE with immediate, into the peer's receive queue.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>

#include "engine/access_check.h"
#include "engine/clock.h"
#include "engine/host/batch.h"
#include "engine/host/executor.h"
#include "engine/rc/connection.h"
#include "engine/host/peer_recv.h"
#include "engine/wqe.h"
#include "samehost/shared_pages.h"

namespace softrdma::samehost {
struct Peer;
}

namespace softrdma::engine::host {

class RcExecution {
 public:
  RcExecution(rc::RcConnection& conn, HostBatch& batch, HostRetries& retries)
      : conn_(conn), batch_(batch), retries_(retries) {}

  bool executes(const SendWqe& wqe) const;
  // `index`: the WQE's send queue index (a batch re-executes by it); where the
  // requester resumes when false.
  bool execute(SendWqe& wqe, uint32_t& index, Nanos now);
  bool flush(Nanos now, uint32_t& resume);

 private:
  // IBA 9.6.1.1: a QP takes requests in RTR, RTS, SQD and SQE.
  static bool takes_requests(uint32_t state);
  // The type the peer's QP has: the same, or XRC receive for an XRC send QP.
  uint32_t peer_qp_type() const;
  // The peer QP's grant with an XRC request's SRQ in it (its PD and queue).
  Verdict as_request_sees_it(const SendWqe& wqe, samehost::Peer& peer,
                             samehost::QpGrant& target) const;
  bool execute_alone(SendWqe& wqe, Nanos now);
  void mark_executed(SendWqe& wqe);
  // rc_batch.cc: true when the WQE joined the batch of WRITEs.
  bool batch(SendWqe& wqe, uint32_t index);
  // Where a WRITE, READ or atomic lands in the peer: its address there, and the
  // shared pages (samehost/shared_pages.h) of the key that granted it.
  struct HostRange {
    uint64_t addr = 0;
    samehost::SharedSpan span;
  };
  // `cache`: an open batch's lookups (batch.h), or null.
  Verdict check(const SendWqe& wqe, samehost::Peer& peer, HostRange& range,
                HostBatch* cache = nullptr) const;
  uint32_t local_iovecs(const SendWqe& wqe, std::span<iovec> out) const;
  int transfer(SendWqe& wqe, samehost::Peer& peer, const HostRange& range);
  // The same through the peer's shared pages, by loads and stores: 0, EFAULT, or
  // ENOENT when the range is not on pages mapped here (cross-memory attach then).
  int transfer_mapped(SendWqe& wqe, samehost::Peer& peer, const HostRange& range);
  bool deliver_atomic_result(const SendWqe& wqe, uint64_t original);
  bool retry(SendWqe& wqe, Nanos now);
  void refuse(SendWqe& wqe, Verdict verdict, Nanos now);
  void fail(SendWqe& wqe, ibv_wc_status status, Nanos now);
  // rc_send.cc: a SEND or WRITE with immediate placed in the peer's receive WQE
  // (over peer_recv.h).
  static bool consumes_receive(const SendWqe& wqe);
  bool send(SendWqe& wqe, Nanos now);
  Verdict find_receiver(const SendWqe& wqe, PeerRecvTarget& target) const;
  Verdict scatter(const PeerRecvTarget& target, uint32_t index, uint64_t length,
                  PeerIovecs& out) const;
  int place(const SendWqe& wqe, const PeerRecvTarget& target, uint32_t index, PeerIovecs& remote,
            ibv_wc_status status);
  Verdict finish(const SendWqe& wqe, const PeerRecvTarget& target, uint32_t index,
                 PeerIovecs& remote, ibv_wc_status there);
  Verdict give_back(const PeerRecvTarget& target, uint32_t index);
  bool may_invalidate(const SendWqe& wqe, const PeerRecvTarget& target) const;
  bool conclude_send(SendWqe& wqe, Verdict verdict, const PeerRecvTarget& target, Nanos now);
  bool wait_rnr(SendWqe& wqe, const PeerRecvTarget& target, Nanos now);
  bool local_buffers_readable(const SendWqe& wqe) const;

  rc::RcConnection& conn_;
  HostBatch& batch_;
  HostRetries& retries_;
};

// HostExecutor's calls (host/executor.h) for an RC connection: a view made per
// call. Inline, in the one file that calls them (rc/requester.cc), so that the
// view costs nothing on a post's path.
inline bool HostExecutor::takes(rc::RcConnection& conn, const SendWqe& wqe) {
  return RcExecution(conn, batch_, conn.host_retries()).executes(wqe);
}

inline bool HostExecutor::execute(rc::RcConnection& conn, SendWqe& wqe, uint32_t& index,
                                  Nanos now) {
  return RcExecution(conn, batch_, conn.host_retries()).execute(wqe, index, now);
}

inline bool HostExecutor::flush_open(rc::RcConnection& conn, Nanos now, uint32_t& resume) {
  return RcExecution(conn, batch_, conn.host_retries()).flush(now, resume);
}

}  // namespace softrdma::engine::host
