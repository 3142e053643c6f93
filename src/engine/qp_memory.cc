// The memory operations of a send queue (IBA 10.6.7.2, 10.8.2.?; ibv_post_send(3)
// IBV_WR_BIND_MW and IBV_WR_LOCAL_INV, ibv_bind_mw(3)): checked and copied at post
// time like any WR; the requester executes them in queue order
// (rc/requester_local.cc, docs/decisions/memory-windows.md).
#include <cerrno>

#include "engine/mw.h"
#include "engine/qp.h"

namespace softrdma::engine {

// What can be refused at post time. Whether the bind itself is allowed (the
// window's state, the MR, the range, the rights) is decided when it executes and
// reported by its completion (IBV_WC_MW_BIND_ERR), as the window may change before.
int Qp::check_memory_wr(const ibv_send_wr& wr, bool by_bind_verb) const {
  // ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND".
  if (type_ != IBV_QPT_RC && type_ != IBV_QPT_UC) return EINVAL;
  if (wr.send_flags & IBV_SEND_INLINE) return EINVAL;
  if (wr.opcode == IBV_WR_LOCAL_INV) return 0;
  const ibv_mw* mw = wr.bind_mw.mw;
  if (mw == nullptr) return EINVAL;
  // A type 1 window is bound by ibv_bind_mw(3) only; a type 2 one by a posted WR
  // ("for type 2 MW, one should directly post bind WR to the QP").
  const bool type1 = raw_enum(mw->type) == IBV_MW_TYPE_1;
  if (type1 != by_bind_verb) return EINVAL;
  return 0;
}

void Qp::copy_memory_wr(const ibv_send_wr& wr, SendWqe& wqe, bool by_bind_verb) const {
  if (wr.opcode == IBV_WR_LOCAL_INV) {
    wqe.invalidate_rkey = wr.invalidate_rkey;
    return;
  }
  const ibv_mw_bind_info& info = wr.bind_mw.bind_info;
  // The window is named by its index (engine/mw.h), which its R_Key keeps for life:
  // the verbs object's copy is read, not the engine's, which a bind may be changing.
  wqe.bind.window_rkey = wr.bind_mw.mw->rkey;
  wqe.bind.new_rkey = wr.bind_mw.rkey;
  wqe.bind.has_mr = info.mr != nullptr;
  wqe.bind.mr_key = info.mr != nullptr ? info.mr->lkey : 0;
  wqe.bind.by_bind_verb = by_bind_verb;
  wqe.bind.addr = info.addr;
  wqe.bind.length = info.length;
  wqe.bind.access = int(info.mw_access_flags);
}

}  // namespace softrdma::engine
