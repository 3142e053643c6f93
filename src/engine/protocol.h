// The wire protocol behind a QP (DESIGN.md §2; docs/decisions/protocol-families.md):
// the verbs object (Qp) keeps the work queues and the state; a Protocol turns them
// into its family's messages and back. The device's protocol family (family.h)
// makes each QP's protocol and hands it what arrives for it, in the family's own
// terms (RoCEv2: roce/protocol.h); this is what the engine's turn, the QP and
// modify_qp ask of every protocol, whatever its family.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "engine/clock.h"

namespace softrdma::engine {

class Protocol {
 public:
  virtual ~Protocol() = default;
  // New work was posted to the send queue, or the window may have opened.
  virtual void on_send_posted(Nanos now) = 0;
  // The engine has room to send: produce up to `budget` queued packets (after
  // Device::want_tx). True while more remain.
  virtual bool on_tx_ready(Nanos now, uint32_t budget) = 0;
  // Timers: the earliest deadline, and what to do when it has passed.
  virtual Nanos deadline() const = 0;
  virtual void on_timer(Nanos now) = 0;
  // The QP moved to a new state (after modify_qp succeeded).
  virtual void on_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) = 0;
  // Its peer is reached by the same-host path (docs/decisions/same-host.md).
  virtual bool on_same_host() const { return false; }
};

}  // namespace softrdma::engine
