// SEND with Invalidate at the responder (IBA 9.4.? "Send with Invalidate", 10.6.7.2.3;
// docs/decisions/memory-windows.md). The message is placed like any SEND; before
// its receive completes, the R_Key its IETH carries is invalidated, and the
// completion says so (IBV_WC_WITH_INV, invalidated_rkey: complete_receive).
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/responder.h"

namespace softrdma::engine::rc {

using namespace wire;

// Only a type 2 window bound through this QP may be invalidated by its peer; any
// other R_Key (an MR's, a type 1 window's, a Free or foreign window's) makes the
// request invalid: NAK Invalid Request, the receive WQE completes with
// IBV_WC_REM_INV_REQ_ERR and the QP goes to Error (fail()).
Responder::Verdict Responder::invalidate_for_send(PacketView p) {
  if (!p.info().has(Header::kIeth)) return Verdict::kDone;
  Qp& qp = conn_.qp();
  const uint32_t rkey = uint32_t(p.get(ieth::kRkey));
  if (qp.ctx().mrs.invalidate(rkey, qp.pd(), qp.qpn(), /*remote=*/true))
    return Verdict::kDone;
  bump(qp.ctx().counters.remote_invalidations_refused);
  return Verdict::kInvalidRequest;
}

}  // namespace softrdma::engine::rc
