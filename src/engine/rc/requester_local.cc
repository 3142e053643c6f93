// The send queue's memory operations (IBA 10.6.7.2 Bind Memory Window, 10.6.7.2.3
// Local Invalidate): executed when the requester reaches them in queue order, after
// the fence (IBV_SEND_FENCE waits for earlier READ/ATOMICs, may_start), so a SEND
// posted after a bind carries an R_Key that is already valid when the peer uses it
// (ibv_bind_mw(3) NOTES). Nothing goes on the wire; the completer completes the WQE
// once it is the oldest (Completer::complete_local_heads).
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/requester.h"

namespace softrdma::engine::rc {

bool Requester::execute_local(SendWqe& wqe, Nanos now) {
  Qp& qp = conn_.qp();
  wqe.first_psn = next_psn_;  // takes no PSN: last_psn() is the one before
  wqe.npackets = 0;
  wqe.next_packet = 0;
  wqe.state = SendState::kSent;
  MrTable& table = qp.ctx().mrs;
  const bool bind = wqe.opcode == IBV_WR_BIND_MW;
  const bool done = bind ? table.bind(wqe.bind, qp.pd(), qp.qpn())
                         : table.invalidate(wqe.invalidate_rkey, qp.pd(), qp.qpn(), false);
  if (done) return true;
  // ibv_poll_cq(3): IBV_WC_MW_BIND_ERR for a bind refused (IBA 10.6.7.2); a
  // refused invalidation is a local QP operation error. Either ends the QP
  // (IBA 10.8.3.1: an error completion puts an RC/UC QP into Error).
  bump(qp.ctx().counters.memory_operations_refused);
  wqe.status = bind ? IBV_WC_MW_BIND_ERR : IBV_WC_LOC_QP_OP_ERR;
  conn_.fail(now, std::nullopt);
  return false;
}

}  // namespace softrdma::engine::rc
