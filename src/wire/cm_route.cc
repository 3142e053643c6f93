#include "wire/cm_route.h"

#include <variant>

#include "wire/cm_mad.h"

namespace softrdma::wire {

namespace {

CmRoute by_service(uint64_t service_id) { return CmRoute{CmRoute::By::kServiceId, service_id, 0}; }

// An answer whose receiver's Communication ID is 0 names nobody: a REJ of a
// REQ that carried none is the only one that may (IBA 12.6.7), and it is dropped
// where it arrives, as an unknown ID would be.
CmRoute by_comm_id(uint32_t comm_id) {
  return comm_id == 0 ? CmRoute{} : CmRoute{CmRoute::By::kCommId, 0, comm_id};
}

struct RouteOf {
  CmRoute operator()(const CmReq& m) const { return by_service(m.service_id); }
  CmRoute operator()(const CmSidrReq& m) const { return by_service(m.service_id); }
  CmRoute operator()(const CmSidrRep& m) const { return by_comm_id(m.request_id); }
  CmRoute operator()(const auto& m) const { return by_comm_id(m.remote_comm_id); }
};

}  // namespace

CmRoute cm_route(std::span<const uint8_t> mad) {
  CmMessage message;
  if (decode_cm(mad, message) != MadError::kNone) return CmRoute{};
  return std::visit(RouteOf{}, message);
}

}  // namespace softrdma::wire
