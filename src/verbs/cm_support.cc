// softrdma's own calls for its librdmacm on an address other processes of the host
// share (issue 27, docs/decisions/host-rnic.md, "CM MADs"). Each process runs its
// own Communication Manager on its own QP1; a MAD that reaches the wrong process
// is handed to the right one, found from the ServiceID of a request (the
// listener's) or the Communication ID an answer names (its chooser's, whose slot
// it carries). Not part of rdma-core's ABI: node SOFTRDMA_PRIVATE_1.
#include <cerrno>
#include <cstdint>

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {

softrdma::runtime::SharedAddress* shared_address(ibv_context* context) {
  if (context == nullptr || !live(context)) return nullptr;
  return to_context(context)->node->shared_address();
}

}  // namespace

// The slot a process's Communication IDs carry in their high bits
// (wire/cm_route.h); 0 when the address is not shared (any ID will do).
SOFTRDMA_EXPORT uint32_t softrdma_cm_id_slot(ibv_context* context) {
  softrdma::runtime::SharedAddress* shared = shared_address(context);
  return shared != nullptr ? shared->slot() : 0;
}

// rdma_listen(3) on the device: REQs and SIDR_REQs for `service_id` are this
// process's, whichever process of the address receives them. 0; EADDRINUSE when
// another process listens there or the host's table is full. Always 0 on an
// address that is not shared.
SOFTRDMA_EXPORT int softrdma_cm_claim_service(ibv_context* context, uint64_t service_id) {
  softrdma::runtime::SharedAddress* shared = shared_address(context);
  return shared != nullptr ? shared->claim_service(service_id) : 0;
}

SOFTRDMA_EXPORT void softrdma_cm_release_service(ibv_context* context, uint64_t service_id) {
  if (softrdma::runtime::SharedAddress* shared = shared_address(context))
    shared->release_service(service_id);
}

// The live process that holds `slot` of the shared address (its pid), 0 when none
// does or the address is not shared: a peer's liveness socket found by its slot
// names a process that may have left the slot since (decisions/host-rnic.md).
SOFTRDMA_EXPORT int softrdma_cm_slot_owner(ibv_context* context, uint32_t slot) {
  softrdma::runtime::SharedAddress* shared = shared_address(context);
  return shared != nullptr ? shared->slot_owner(slot) : 0;
}

// The rdma_cm agent sent a CM MAD again because its answer did not come in time
// (IBA 12.9.7): counted in the device's `cm_mads_resent`, which `softrdma status`
// shows. The agent's thread is the counter's only writer (counters.h: one writer
// per counter), under its CM lock.
SOFTRDMA_EXPORT void softrdma_cm_count_resent(ibv_context* context) {
  if (context == nullptr || !live(context)) return;
  softrdma::engine::bump(to_context(context)->device->counters().cm_mads_resent);
}
