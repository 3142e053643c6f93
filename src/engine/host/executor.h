// The same-host executor (docs/decisions/same-host-executor.md): where a work
// request to a peer process of this host is executed by the poster itself, as
// that peer's RNIC would on receiving it (docs/decisions/same-host.md). One per
// device, used by the engine's owner only; it owns the batch of WRITEs a posted
// list fills (host/batch.h). The RC requester asks it one question per WQE in
// its ordering line (rc::Requester::start: local, this executor, or the wire):
//   takes(wqe)          — does the WQE run on the peer?
//   execute(wqe, now)   — run it (or batch it) now;
//   flush(now)          — run what was batched, before anything that must not
//                         overtake it (IBA 9.5).
// The connection's own state for this path (the retry counts) is a HostRetries
// the connection keeps; everything else is looked up in the peer's node segment
// at each use (samehost/node_segment.h), inside its access bracket.
#pragma once

#include <cstdint>

#include "engine/clock.h"
#include "engine/host/batch.h"
#include "engine/wqe.h"

namespace softrdma::engine::rc {
class RcConnection;
}

namespace softrdma::engine::host {

// Consecutive tries of one connection that a same-host peer refused.
struct HostRetries {
  uint32_t not_ready = 0;  // the peer's QP took no request (as a lost packet)
  uint32_t rnr = 0;        // waits for a receive WQE (as RNR NAKs)
};

class HostExecutor {
 public:
  // Whether `conn`'s WQE is executed on its same-host peer rather than sent.
  bool takes(rc::RcConnection& conn, const SendWqe& wqe);
  // Executes (or batches) the WQE at send queue index `index` of `conn`; false
  // when the requester must stop for now (a wait, a retry, an error), with
  // `index` then the send queue index to resume from.
  bool execute(rc::RcConnection& conn, SendWqe& wqe, uint32_t& index, Nanos now);
  // Executes what `conn` batched; false when it must stop, with `resume` the send
  // queue index to resume from (unchanged otherwise).
  bool flush(rc::RcConnection& conn, Nanos now, uint32_t& resume) {
    // Nothing of this connection's is open: nothing to do (the common case, and
    // the wire's, at the end of every requester run).
    return !batch_.open || batch_.owner != &conn || flush_open(conn, now, resume);
  }

 private:
  bool flush_open(rc::RcConnection& conn, Nanos now, uint32_t& resume);

  HostBatch batch_;
};

}  // namespace softrdma::engine::host
