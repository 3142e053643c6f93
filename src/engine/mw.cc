// Memory windows in the key table (engine/mw.h, docs/decisions/memory-windows.md).
#include <sys/random.h>

#include <cerrno>

#include "engine/access_check.h"
#include "engine/mr.h"
#include "engine/pd.h"

namespace softrdma::engine {

namespace {

constexpr uint32_t kKeyMask = (1u << kMwKeyBits) - 1;
// A window grants remote rights only; IBV_ACCESS_LOCAL_WRITE, which programs pass
// along with them (pyverbs does), means nothing for a window and is ignored.
constexpr int kWindowAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED |
                              IBV_ACCESS_LOCAL_WRITE;
constexpr int kNeedsLocalWrite = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

uint32_t random_u32() {
  uint32_t v = 0;
  while (getrandom(&v, sizeof v, 0) != sizeof v) {
  }
  return v;
}

// IBA 10.6.7.2 (C10-72..C10-76, o10-37.2.x): what a bind of `mw` to `mr` must
// satisfy: the window's own index under the new key, the QP's PD, an MR of that PD
// registered for binding, local write under remote write/atomic rights, and a range
// within the MR. `mr` is null for a type 1 unbind.
bool bind_allowed(const Mw& mw, const Mr* mr, const MwBind& b, const Pd* qp_pd) {
  if ((b.access & ~kWindowAccess) != 0) return false;
  if (mw.type == IBV_MW_TYPE_1) {
    // ibv_bind_mw(3) is the only way to bind a type 1 window; it is never zero based.
    if (!b.by_bind_verb || (b.access & IBV_ACCESS_ZERO_BASED)) return false;
  } else {
    // A type 2 window is bound by a work request, while Free, to a non-empty range.
    if (b.by_bind_verb || mw.bound || !b.has_mr || b.length == 0) return false;
  }
  if (mw_index(b.new_rkey) != mw_index(mw.rkey) || mw.pd != qp_pd) return false;
  if (!b.has_mr) return b.length == 0 && b.addr == 0;
  if (mr == nullptr || mr->pd != mw.pd) return false;  // no such MR, or another PD's
  if (!(mr->access & IBV_ACCESS_MW_BIND)) return false;
  if ((b.access & kNeedsLocalWrite) && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) return false;
  if (b.length == 0) return b.addr >= mr->iova && b.addr - mr->iova <= mr->length;
  return mr->translate(b.addr, b.length) != nullptr;  // within the MR
}

}  // namespace

bool MrTable::key_in_use(uint32_t key) const {
  return by_key_.contains(key) || windows_.contains(mw_index(key));
}

// A window index that no MR key or other window shares: an R_Key then names one
// object whatever its low 8 bits. Never 0, so no window key is 0.
uint32_t MrTable::fresh_window_index() {
  for (;;) {
    const uint32_t index = random_u32() >> kMwKeyBits;
    if (index == 0 || windows_.contains(index)) continue;
    bool taken = false;
    for (uint32_t k = 0; k <= kKeyMask && !taken; ++k)
      taken = by_key_.contains((index << kMwKeyBits) | k);
    if (!taken) return index;
  }
}

Mw* MrTable::alloc_mw(Pd* pd, ibv_mw_type type, int& err) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    err = EINVAL;
    return nullptr;
  }
  auto mw = std::make_unique<Mw>();
  mw->pd = pd;
  mw->type = type;
  std::unique_lock lock(mutex_);
  const uint32_t index = fresh_window_index();
  mw->rkey = (index << kMwKeyBits) | (random_u32() & kKeyMask);
  Mw* raw = mw.get();
  windows_.emplace(index, std::move(mw));
  pd->users.fetch_add(1);
  return raw;
}

size_t MrTable::window_count() const {
  std::shared_lock lock(mutex_);
  return windows_.size();
}

void MrTable::unbind(Mw& mw) {
  if (mw.bound) revoke(mw.rkey);
  if (mw.mr != nullptr) mw.mr->windows--;
  mw.mr = nullptr;
  mw.bound = false;
  mw.length = 0;
  mw.access = 0;
  generation_.fetch_add(1, std::memory_order_release);
}

// ibv_alloc_mw(3): "ibv_dealloc_mw() unbinds in case was previously bound".
int MrTable::dealloc_mw(Mw* mw) {
  std::unique_lock lock(mutex_);
  auto it = windows_.find(mw_index(mw->rkey));
  if (it == windows_.end() || it->second.get() != mw) return EINVAL;
  unbind(*mw);
  mw->pd->users.fetch_sub(1);
  windows_.erase(it);
  return 0;
}

Mw* MrTable::window_of(uint32_t rkey) const {
  auto it = windows_.find(mw_index(rkey));
  return it == windows_.end() ? nullptr : it->second.get();
}

bool MrTable::bind(const MwBind& b, const Pd* qp_pd, uint32_t qpn) {
  std::unique_lock lock(mutex_);
  Mw* mw = window_of(b.window_rkey);
  if (mw == nullptr) return false;  // deallocated after the bind was posted
  auto mr_it = b.has_mr ? by_key_.find(b.mr_key) : by_key_.end();
  Mr* mr = mr_it != by_key_.end() ? mr_it->second.get() : nullptr;
  if (!bind_allowed(*mw, mr, b, qp_pd)) return false;
  unbind(*mw);
  mw->rkey = b.new_rkey;
  // ibv_alloc_mw(3): a type 1 window bound with zero length is invalidated.
  if (b.length == 0) return true;
  mr->windows++;
  mw->mr = mr;
  mw->bound = true;
  mw->va = b.addr;
  mw->length = b.length;
  mw->access = b.access;
  mw->qpn = mw->type == IBV_MW_TYPE_2 ? qpn : 0;
  publish(*mw);
  return true;
}

// IBA 10.6.7.2.3 / 9.4.?: Local Invalidate and SEND with Invalidate free a type 2
// window. An MR's key, a type 1 window (freed only by a bind), a Free window, a
// key that does not match the window's, another PD's window or - from a peer - a
// window bound through another QP cannot be invalidated.
bool MrTable::invalidate(uint32_t rkey, const Pd* qp_pd, uint32_t qpn, bool remote) {
  std::unique_lock lock(mutex_);
  if (by_key_.contains(rkey)) return false;
  Mw* mw = window_of(rkey);
  if (mw == nullptr || mw->rkey != rkey || mw->type != IBV_MW_TYPE_2 || !mw->bound)
    return false;
  if (mw->pd != qp_pd || (remote && mw->qpn != qpn)) return false;
  unbind(*mw);
  return true;
}

// IBA 10.6.7.3 (C10-79..): a window's R_Key reaches memory while the window is
// bound, with the window's rights, within its range (relative to its start when
// zero based), from a QP of its PD - and for type 2B only from the QP it was bound
// through: the rules of access_check.h, for a window's key.
uint8_t* MrTable::Access::resolve_remote(uint32_t rkey, const Pd* pd, uint32_t qpn, uint64_t va,
                                         uint64_t len, int need, AccessError& why) const {
  if (const Mr* mr = find(rkey)) return resolve_in(mr, pd, va, len, need, why);
  const Mw* mw = table_->window_of(rkey);
  KeyView key;
  const bool named = mw != nullptr && KeyView::of(*mw, rkey, key);
  uint64_t offset = 0;
  why = check_key(named ? &key : nullptr, RemoteAccess{need, va, len, pd_id(pd), qpn}, offset);
  if (why != AccessError::kNone) return nullptr;
  uint8_t* host = mw->mr->translate(mw->va + offset, len);
  if (host == nullptr) why = AccessError::kOutOfBounds;
  return host;
}

}  // namespace softrdma::engine
