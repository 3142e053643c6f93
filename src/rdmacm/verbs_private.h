// What softrdma's librdmacm calls in softrdma's libibverbs beyond the verbs API:
// node SOFTRDMA_PRIVATE_1 of libibverbs.map, which no rdma-core library has
// (src/verbs/abi-extra/README.md says what each is for). One declaration each.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace softrdma::wire::iwarp {
struct IwarpHandoff;
}

extern "C" {
// QP1 for the Communication Manager's MADs (verbs/qp.cc).
ibv_qp* softrdma_create_gsi_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
// The RC QPs that entered Error, without the application's async events (verbs/async.cc).
int softrdma_qp_error_fd(ibv_context* context);
int softrdma_take_qp_error(ibv_context* context, uint32_t* qpn);
// Told of each ibv_destroy_qp(3) before the QP is freed.
void softrdma_observe_qp_destroy(void (*observer)(ibv_qp*));
// iWARP: an orderly close by the peer; a QP bound to its TCP stream (verbs/qp.cc).
int softrdma_qp_closed_by_peer(ibv_qp* qp);
int softrdma_iwarp_attach(ibv_qp* qp, const softrdma::wire::iwarp::IwarpHandoff* handoff);
// A shared address: this process's Communication IDs and listeners (verbs/cm_support.cc).
uint32_t softrdma_cm_id_slot(ibv_context* context);
int softrdma_cm_claim_service(ibv_context* context, uint64_t service_id);
void softrdma_cm_release_service(ibv_context* context, uint64_t service_id);
// The live process holding `slot` of the shared address; 0 when none, or not shared.
int softrdma_cm_slot_owner(ibv_context* context, uint32_t slot);
// A CM MAD sent again after its timeout, counted in `cm_mads_resent` (verbs/cm_support.cc).
void softrdma_cm_count_resent(ibv_context* context);
}
