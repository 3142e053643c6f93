#include "engine/access_check.h"

#include "samehost/node_segment.h"

namespace softrdma::engine {

bool KeyView::of(const Mw& mw, uint32_t rkey, KeyView& out) {
  // IBA 10.6.7.1: only a Valid (bound) window has rights, and only under the
  // R_Key it was last bound with.
  if (mw.rkey != rkey || !mw.bound) return false;
  const bool zero_based = (mw.access & IBV_ACCESS_ZERO_BASED) != 0;
  // A type 1 window serves any QP of its PD; a type 2 one the QP it was bound
  // through (IBA 10.6.7.2.2), which bind() records only for type 2.
  out = KeyView{pd_id(mw.pd), uint32_t(mw.access), zero_based ? 0 : mw.va, mw.length,
                mw.type == IBV_MW_TYPE_2 ? mw.qpn : 0};
  return true;
}

}  // namespace softrdma::engine
