// Memory regions (IBA 10.6): registered ranges of the process's memory, named by
// unpredictable keys. The responder reaches memory only through an rkey of its own
// PD with the right access, and deregistration revokes access at once
// (DESIGN.md §7): lookups hold the table's shared lock for as long as they touch the
// memory, deregistration takes it exclusively.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include "engine/mw.h"
#include "samehost/shared_pages.h"

namespace softrdma::samehost {
class NodeSegment;
}

namespace softrdma::engine {

class Pd;

struct Mr {
  Pd* pd = nullptr;
  uint8_t* addr = nullptr;  // where the memory is in this process
  uint64_t iova = 0;        // the address the peers use (ibv_reg_mr_iova)
  uint64_t length = 0;
  int access = 0;           // IBV_ACCESS_* flags
  uint32_t key = 0;         // lkey == rkey
  uint32_t windows = 0;     // memory windows bound to it (under the table's lock)
  // Its whole pages, moved onto a file that same-host peers map (null: not shared).
  std::unique_ptr<samehost::SharedPages> pages;

  // Host pointer for [va, va+len) when it lies inside the region, else nullptr.
  uint8_t* translate(uint64_t va, uint64_t len) const {
    if (va < iova || len > length || va - iova > length - len) return nullptr;
    return addr + (va - iova);
  }
};

// ibv_reg_mr(3) with IBV_ACCESS_ON_DEMAND, a null address and SIZE_MAX bytes: an
// implicit on-demand MR covering the process's whole address space.
inline bool is_implicit(const void* addr, uint64_t length, int access) {
  return addr == nullptr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND) != 0;
}

// Why an access was refused; the requester and responder map it to the status or
// NAK that IBA prescribes.
// kUnmapped: the key and bounds were right but the pages are gone (munmap'ed without
// ibv_dereg_mr): the guarded copy faulted (guarded_memory.h).
enum class AccessError : uint8_t { kNone, kBadKey, kWrongPd, kOutOfBounds, kNoPermission, kUnmapped };

class MrTable {
 public:
  MrTable();
  // Publishes every R_Key's rights to same-host peers, and revokes them, from now
  // on (samehost/node_segment.h); set before the first registration. MRs of at
  // most `share_up_to` bytes have their pages shared with those peers (0: none).
  void set_node(samehost::NodeSegment* node, uint64_t share_up_to) {
    node_ = node;
    share_up_to_ = share_up_to;
  }
  // Validates flags (IBA 10.6.3.1: remote write/atomic need local write) and keys it.
  Mr* reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access, int& err);
  int dereg(Mr* mr);
  int rereg(Mr* mr, Pd* pd, void* addr, uint64_t length, int access);
  // The MR of `key`, or null (cold path: ibv_import_mr).
  Mr* find(uint32_t key);
  // ibv_advise_mr(3) prefetch of [addr, addr+length) through `lkey`: 0, or the
  // errno the man page gives for a range that names no ODP memory of `pd`.
  int check_prefetch(uint32_t lkey, const Pd* pd, uint64_t addr, uint64_t length,
                     bool write) const;

  // Memory windows (engine/mw.cc, IBA 10.6.7). alloc/dealloc: verbs calls; bind and
  // invalidate: executed by the engine's owner for a send queue (or a SEND with
  // Invalidate); false when IBA forbids it. Every change moves the generation on.
  Mw* alloc_mw(Pd* pd, ibv_mw_type type, int& err);
  int dealloc_mw(Mw* mw);
  size_t window_count() const;
  [[nodiscard]] bool bind(const MwBind& bind, const Pd* qp_pd, uint32_t qpn);
  [[nodiscard]] bool invalidate(uint32_t rkey, const Pd* qp_pd, uint32_t qpn, bool remote);

  // Holds the table's shared lock while the memory is in use.
  class Access {
   public:
    explicit Access(const MrTable& table) : lock_(table.mutex_), table_(&table) {}
    // Returns the host pointer or nullptr and the reason. An L_Key names an MR only.
    uint8_t* resolve(uint32_t key, const Pd* pd, uint64_t va, uint64_t len, int need,
                     AccessError& why) const;
    // The same for an R_Key arriving from a peer of QP `qpn`: an MR's key, or a
    // bound memory window's (engine/mw.cc).
    uint8_t* resolve_remote(uint32_t rkey, const Pd* pd, uint32_t qpn, uint64_t va,
                            uint64_t len, int need, AccessError& why) const;
    const Mr* find(uint32_t key) const;

   private:
    // `mr` (null: no such key) checked for `pd`, the rights `need`, and the range.
    static uint8_t* resolve_in(const Mr* mr, const Pd* pd, uint64_t va, uint64_t len, int need,
                               AccessError& why);
    std::shared_lock<std::shared_mutex> lock_;
    const MrTable* table_ = nullptr;
  };
  Access access() const { return Access(*this); }
  size_t size() const;
  // Bumped by every dereg. A translation cached for a message (the responder
  // resolves a WRITE's or READ's range once, at its first packet) stays valid
  // while this is unchanged: Device::dereg_mr holds the engine, so no turn is
  // between its check and its copy when it changes.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  uint32_t fresh_key();
  uint32_t fresh_window_index();
  bool key_in_use(uint32_t key) const;
  Mw* window_of(uint32_t rkey) const;
  void unbind(Mw& mw);
  static int check(void* addr, uint64_t length, int access);
  // Same-host peers (table lock held exclusively): the key's rights as the
  // responder checks them, and their end (which waits for accesses in flight).
  void publish(const Mr& mr);
  void publish(const Mw& mw);
  void revoke(uint32_t key);
  void share_pages(Mr& mr);
  void unshare_pages(Mr& mr);

  samehost::NodeSegment* node_ = nullptr;
  uint64_t share_up_to_ = 0;

  mutable std::shared_mutex mutex_;
  std::atomic<uint64_t> generation_{0};
  std::unordered_map<uint32_t, std::unique_ptr<Mr>> by_key_;
  std::unordered_set<const Mr*> live_;  // the MRs of by_key_, for dereg's check
  std::unordered_map<uint32_t, std::unique_ptr<Mw>> windows_;  // by mw_index(rkey)
  std::mt19937 key_rng_;  // only if getrandom fails
};

}  // namespace softrdma::engine
