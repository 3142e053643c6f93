// The responder's side of selective repeat (docs/decisions/selective-repeat.md):
// what arrives beyond a gap is held, not dropped, and executed in PSN order once
// the gap fills; SACKs tell the requester what is held so that it resends only
// what is missing.
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/rc/responder.h"
#include "wire/ack_hold.h"
#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {

using namespace wire;

// Beyond what one SACK can describe the packet is dropped (the requester's window
// never reaches that far; a hostile or broken peer's packet costs nothing held).
void Responder::hold_out_of_order(PacketView p, uint32_t ahead) {
  EngineCounters& counters = conn_.qp().ctx().counters;
  if (ahead > conn_.sack_span()) {
    bump(counters.reorder_dropped);
    return;
  }
  if (reorder_.hold(p.psn(), p.bytes())) {
    bump(counters.reorder_held);
    // The SACK names the newest held: a resend filling an older hole is not it.
    if (reorder_.count() == 1 || psn_before(held_newest_psn_, p.psn())) {
      held_newest_psn_ = p.psn();
      held_arrival_ = taken_arrival_;
    }
  } else {
    bump(counters.duplicate_requests);  // a resend of one held: SACKed again
  }
  sack_pending_ = true;
}

// The gap before epsn_ filled: run what was held behind it, in order, up to the
// next gap. A request refused (RNR, an error) drops the rest: the requester
// resends from there (RNR) or the QP ends.
void Responder::execute_held(Nanos now) {
  while (reorder_.count() > 0) {
    const uint32_t psn = epsn_;
    std::span<uint8_t> bytes = reorder_.held(psn);
    if (bytes.empty()) break;
    const bool executed = execute_in_order(PacketView(bytes), now);
    reorder_.release(psn);
    if (!executed) return;
  }
  // The requester learns at once how far it got, and what is still held.
  if (reorder_.count() > 0) {
    sack_pending_ = true;
  } else {
    ack_pending_ = true;
  }
}

// Acknowledges up to the gap as an ACK does (IBA 9.7.5.1.6: PSN of the last in
// order, the MSN) and lists what is held after it (wire/sack.h).
void Responder::send_sack() {
  sack_pending_ = false;
  if (reorder_.count() == 0) {
    ack_pending_ = true;
    return on_burst_end();
  }
  produce_all();  // PSN order: nothing may overtake queued responses
  ack_pending_ = false;
  ack_twice_ = false;
  const size_t bitmap_bytes = sack_bitmap_bytes(conn_.sack_span());
  const size_t hold_bytes = conn_.ack_hold() ? kAckHoldBytes : 0;
  PacketView r = conn_.emit(op::kRcSack, bitmap_bytes + hold_bytes, psn_add(epsn_, -1));
  r.set(aeth::kSyndrome, syndrome::ack());
  r.set(aeth::kMsn, msn_);
  std::span<uint8_t> bitmap = r.payload().first(bitmap_bytes);
  std::fill(bitmap.begin(), bitmap.end(), uint8_t(0));
  reorder_.describe(epsn_, bitmap);
  if (hold_bytes != 0) write_hold(r.payload().subspan(bitmap_bytes), held_arrival_);
  bump(conn_.qp().ctx().counters.sacks_sent);
}

}  // namespace softrdma::engine::rc
