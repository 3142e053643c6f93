// Memory regions (IBA 10.6): registered ranges of the process's memory, named by
// unpredictable keys. The responder reaches memory only through an rkey of its own
// PD with the right access, and deregistration revokes access at once
// (DESIGN.md §7): lookups hold the table's shared lock for as long as they touch the
// memory, deregistration takes it exclusively.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

namespace softrdma::engine {

class Pd;

struct Mr {
  Pd* pd = nullptr;
  uint8_t* addr = nullptr;  // where the memory is in this process
  uint64_t iova = 0;        // the address the peers use (ibv_reg_mr_iova)
  uint64_t length = 0;
  int access = 0;           // IBV_ACCESS_* flags
  uint32_t key = 0;         // lkey == rkey

  // Host pointer for [va, va+len) when it lies inside the region, else nullptr.
  uint8_t* translate(uint64_t va, uint64_t len) const {
    if (va < iova || len > length || va - iova > length - len) return nullptr;
    return addr + (va - iova);
  }
};

// Why an access was refused; the requester and responder map it to the status or
// NAK that IBA prescribes.
// kUnmapped: the key and bounds were right but the pages are gone (munmap'ed without
// ibv_dereg_mr): the guarded copy faulted (guarded_memory.h).
enum class AccessError : uint8_t { kNone, kBadKey, kWrongPd, kOutOfBounds, kNoPermission, kUnmapped };

class MrTable {
 public:
  MrTable();
  // Validates flags (IBA 10.6.3.1: remote write/atomic need local write) and keys it.
  Mr* reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access, int& err);
  int dereg(Mr* mr);
  int rereg(Mr* mr, Pd* pd, void* addr, uint64_t length, int access);
  // The MR of `key`, or null (cold path: ibv_import_mr).
  Mr* find(uint32_t key);

  // Holds the table's shared lock while the memory is in use.
  class Access {
   public:
    explicit Access(const MrTable& table) : lock_(table.mutex_) {}
    // Returns the host pointer or nullptr and the reason.
    uint8_t* resolve(uint32_t key, const Pd* pd, uint64_t va, uint64_t len, int need,
                     AccessError& why) const;
    const Mr* find(uint32_t key) const;

   private:
    friend class MrTable;
    std::shared_lock<std::shared_mutex> lock_;
    const MrTable* table_ = nullptr;
  };
  Access access() const {
    Access a(*this);
    a.table_ = this;
    return a;
  }
  size_t size() const;
  // Bumped by every dereg. A translation cached for a message (the responder
  // resolves a WRITE's or READ's range once, at its first packet) stays valid
  // while this is unchanged: Device::dereg_mr holds the engine, so no turn is
  // between its check and its copy when it changes.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  uint32_t fresh_key();
  static int check(void* addr, uint64_t length, int access);

  mutable std::shared_mutex mutex_;
  std::atomic<uint64_t> generation_{0};
  std::unordered_map<uint32_t, std::unique_ptr<Mr>> by_key_;
  std::unordered_set<const Mr*> live_;  // the MRs of by_key_, for dereg's check
  std::mt19937 key_rng_;  // only if getrandom fails
};

}  // namespace softrdma::engine
