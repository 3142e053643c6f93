// The responder of an Unreliable Connected QP (IBA 9.8.3): it executes SENDs and
// WRITEs exactly as RC does (responder.cc) but acknowledges nothing. A message
// whose packets do not arrive in sequence, or that cannot be placed (no receive
// WQE, too long, bad R_Key), is dropped whole and silently, and the next FIRST or
// ONLY packet, whatever its PSN, begins a new one (IBA 9.8.3.1; Soft-RoCE does the
// same). Only an error of this side's own receive WQE ends the QP.
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/responder.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

using namespace wire;

void Responder::on_unacknowledged_request(PacketView p, Nanos now) {
  EngineCounters& counters = conn_.qp().ctx().counters;
  const bool begins = p.info().is(kOpFirst);  // FIRST or ONLY
  if (p.psn() != epsn_ && !begins) {
    // A packet lost before this one: the rest of its message goes too.
    if (message_ != Message::kNone) {
      abandon_message();
      bump(counters.uc_messages_dropped);
    }
    bump(counters.uc_packets_dropped);
    return;
  }
  if (begins && message_ != Message::kNone) {
    // The previous message's LAST never came: it is lost, this one may be whole.
    abandon_message();
    bump(counters.uc_messages_dropped);
  }
  epsn_ = p.psn();
  const Verdict verdict = execute(p);
  if (verdict == Verdict::kDone) return;
  if (verdict == Verdict::kRemoteOperational) {
    // The receive WQE itself is bad (its lkey, or unmapped memory): that is this
    // side's error, completed in error, and the QP goes to Error (IBA 10.8.3.1).
    conn_.fail(now, IBV_EVENT_QP_FATAL);
    return;
  }
  abandon_message();
  bump(counters.uc_messages_dropped);
  bump(counters.uc_packets_dropped);
}

// The message in progress will not complete: its receive WQE (not consumed: the
// WQE is taken only when a message completes) is as it was posted.
void Responder::abandon_message() {
  if (RecvWqe* recv = conn_.qp().current_recv()) recv->status = IBV_WC_SUCCESS;
  message_ = Message::kNone;
  recv_offset_ = 0;
  write_host_ = nullptr;
}

}  // namespace softrdma::engine::rc
