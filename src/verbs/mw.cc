// Memory windows (ibv_alloc_mw(3), ibv_dealloc_mw(3), ibv_bind_mw(3)), reached
// through ibv_context::ops as the inline verbs jump there. The engine's window
// holds the ibv_mw as its first member (engine/mw.h); binds are send-queue work
// (engine/qp_memory.cc, docs/decisions/memory-windows.md).
#include "engine/mw.h"

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;
using softrdma::engine::Mw;

namespace softrdma::verbs {

ibv_mw* op_alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  return guard_ptr([&]() -> ibv_mw* {
    if (!live(pd->context)) return fail(EIO);
    int err = 0;
    Mw* mw = to_context(pd->context)->device->alloc_mw(to_pd(pd)->pd, type, err);
    if (mw == nullptr) return fail(err);
    mw->ibv.context = pd->context;
    mw->ibv.pd = pd;
    mw->ibv.rkey = mw->rkey;
    mw->ibv.handle = softrdma::engine::mw_index(mw->rkey);
    mw->ibv.type = type;
    return &mw->ibv;
  });
}

int op_dealloc_mw(ibv_mw* mw) {
  return guard_errno([&] {
    if (!live(mw->context)) return EIO;
    return to_context(mw->context)->device->dealloc_mw(Mw::from(mw));
  });
}

// ibv_bind_mw(3): a type 1 bind posted to `qp` (the inline wrapper checked the
// type, the range without an MR and the PDs). The new R_Key, the old one with its
// low 8 bits moved on (ibv_inc_rkey), is returned in mw->rkey once posted; the
// completion (IBV_WC_BIND_MW) says whether the bind took effect.
int op_bind_mw(ibv_qp* ibqp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  return guard_errno([&] {
    if (ibqp == nullptr || mw == nullptr || mw_bind == nullptr) return EINVAL;
    if (!live(ibqp->context)) return EIO;
    ibv_send_wr wr{};
    wr.wr_id = mw_bind->wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = mw_bind->send_flags;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = mw_bind->bind_info;
    const ibv_send_wr* bad = nullptr;
    if (int err = to_qp(ibqp)->engine_qp->post_send(&wr, &bad, /*by_bind_verb=*/true)) return err;
    mw->rkey = wr.bind_mw.rkey;
    return 0;
  });
}

}  // namespace softrdma::verbs
