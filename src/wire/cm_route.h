// Whom a CM MAD is for, when several processes of a host share one address and
// each runs its own Communication Manager (issue 27, docs/decisions/host-rnic.md,
// "CM MADs"). A request names the service it wants (IBA 12.6.5 REQ, 12.11.2
// SIDR_REQ: ServiceID); every later message names the receiver's own Communication
// ID (IBA 12.6: the REP's, RTU's, REJ's, MRA's, DREQ's and DREP's "Remote
// Communication ID"; the SIDR_REP's Request ID, which is the requester's). So a
// process that chooses its Communication IDs in a range of its own — its slot in
// the high bits, as its QPNs carry it (wire/qpn_blocks.h) — can be found from any
// MAD that answers it. Pure: no I/O, no allocation.
#pragma once

#include <cstdint>
#include <span>

#include "wire/qpn_blocks.h"

namespace softrdma::wire {

// A 32-bit Communication ID: the slot in its top bits, a counter below.
inline constexpr unsigned kCommIdSlotShift = 22;
inline constexpr uint32_t kCommIdCounterMask = (1u << kCommIdSlotShift) - 1;
static_assert(kMaxQpnBlock < (1u << (32 - kCommIdSlotShift)), "every slot fits a Comm ID");
inline constexpr uint32_t comm_id_slot(uint32_t comm_id) { return comm_id >> kCommIdSlotShift; }
inline constexpr uint32_t comm_id_in_slot(uint32_t slot, uint32_t counter) {
  return slot << kCommIdSlotShift | (counter & kCommIdCounterMask);
}

struct CmRoute {
  enum class By : uint8_t {
    kNothing,    // not a CM MAD this codec reads (other classes, LAP/APR, malformed)
    kServiceId,  // REQ, SIDR_REQ: whoever listens on `service_id`
    kCommId,     // an answer: whoever chose `comm_id`
  };
  By by = By::kNothing;
  uint64_t service_id = 0;
  uint32_t comm_id = 0;
};

// The route of a 256-byte MAD (the payload of a UD SEND to QP1, cm_gsi.h).
CmRoute cm_route(std::span<const uint8_t> mad);

}  // namespace softrdma::wire
