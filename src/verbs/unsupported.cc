// Verbs whose objects the engine does not have yet (SRQ): clients
// import them (abi/imports), so they exist and answer "not supported" the verbs
// way, never crash: create calls NULL with errno EOPNOTSUPP, the others
// EOPNOTSUPP. Their objects can never exist, so destroy/modify/query of one is
// a misuse and answers the same.
#include "verbs/objects.h"

using namespace softrdma::verbs;

SOFTRDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* /*pd*/, ibv_srq_init_attr* /*attr*/) {
  return fail(EOPNOTSUPP);
}

SOFTRDMA_EXPORT int ibv_modify_srq(ibv_srq* /*srq*/, ibv_srq_attr* /*attr*/, int /*mask*/) {
  return EOPNOTSUPP;
}

SOFTRDMA_EXPORT int ibv_query_srq(ibv_srq* /*srq*/, ibv_srq_attr* /*attr*/) { return EOPNOTSUPP; }

SOFTRDMA_EXPORT int ibv_destroy_srq(ibv_srq* /*srq*/) { return EOPNOTSUPP; }


