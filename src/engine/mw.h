// Memory windows (IBA 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3)): a remote key for
// a sub-range of a memory region, with rights of its own, bound and invalidated
// by operations of a send queue (docs/decisions/memory-windows.md). The window's
// R_Key is an index (its upper 24 bits) and a key the binder chooses (the low 8,
// IBA 10.6.7.2); a window is found by its index and refused unless the whole R_Key
// matches. MrTable keeps the windows beside the MRs (engine/mr.h).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace softrdma::engine {

class Pd;
struct Mr;

inline constexpr uint32_t kMwKeyBits = 8;
inline uint32_t mw_index(uint32_t rkey) { return rkey >> kMwKeyBits; }

struct Mw {
  // The verbs object, first: a bind work request's bind_mw.mw leads back here. Its
  // type is set when allocated and never changes (read at post time).
  ibv_mw ibv{};
  Pd* pd = nullptr;
  ibv_mw_type type = IBV_MW_TYPE_1;
  uint32_t rkey = 0;   // the current R_Key (the engine's copy; verbs keeps its own)
  bool bound = false;  // IBA 10.6.7.1: Valid (bound) or Free
  Mr* mr = nullptr;     // bound to (its `windows` counts this one)
  uint64_t va = 0;      // first byte, in the MR's address space
  uint64_t length = 0;
  int access = 0;       // IBV_ACCESS_REMOTE_* and IBV_ACCESS_ZERO_BASED
  uint32_t qpn = 0;     // type 2B: the QP it was bound through (IBA 10.6.7.2.2)

  static Mw* from(ibv_mw* mw) { return reinterpret_cast<Mw*>(mw); }
};
static_assert(std::is_standard_layout_v<Mw> && offsetof(Mw, ibv) == 0);

// A bind as the send queue carries it (copied at post time; the window is named by
// the R_Key it had then, so a window deallocated meanwhile is simply not found).
struct MwBind {
  uint32_t window_rkey = 0;  // the window's R_Key when the bind was posted
  uint32_t new_rkey = 0;     // its R_Key once bound
  uint32_t mr_key = 0;       // the MR's L_Key; 0 with has_mr false (type 1 unbind)
  bool has_mr = false;
  bool by_bind_verb = false;  // type 1 goes through ibv_bind_mw only
  uint64_t addr = 0;
  uint64_t length = 0;
  int access = 0;
};

}  // namespace softrdma::engine
