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

KeyView KeyView::of(const samehost::KeyGrant& grant) {
  // Published with the name of its first byte (0 for a zero-based window) and
  // the QP a type 2 window serves (MrTable::publish).
  return KeyView{grant.pd, grant.access, grant.iova, grant.length, grant.qpn};
}

Verdict check_message(const RemoteAccess& r, uint64_t max_msg_size, bool atomic) {
  if (r.length > max_msg_size) return Verdict::kInvalidRequest;
  if (atomic && r.va % 8 != 0) return Verdict::kInvalidRequest;
  return Verdict::kDone;
}

Verdict check_remote_access(uint32_t qp_access, uint64_t max_msg_size, bool atomic,
                            const RemoteAccess& r, const KeyView* key, uint64_t& offset) {
  if (!qp_allows(qp_access, r.need)) return Verdict::kInvalidRequest;
  if (const Verdict v = check_message(r, max_msg_size, atomic); v != Verdict::kDone) return v;
  offset = 0;
  // A zero-length message touches nothing and is checked against no key, as the
  // wire's responder does (it resolves no range for it).
  if (r.length == 0) return Verdict::kDone;
  return check_key(key, r, offset) == AccessError::kNone ? Verdict::kDone : Verdict::kRemoteAccess;
}

}  // namespace softrdma::engine
