#include "engine/mr.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>

#include "engine/access_check.h"
#include "engine/pd.h"
#include "samehost/node_segment.h"

namespace softrdma::engine {

namespace {
constexpr int kRemoteNeedsLocalWrite = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr int kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                             IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB |
                             IBV_ACCESS_RELAXED_ORDERING;

// mincore(2) fails with ENOMEM when the range holds an unmapped page; it is asked
// about at most kChunkPages pages at a time so the vector stays small.
bool range_is_mapped(const void* addr, uint64_t length) {
  if (length == 0) return true;
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  constexpr uintptr_t kChunkPages = 4096;
  unsigned char residency[kChunkPages];
  uintptr_t begin = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + length;
  while (begin < end) {
    const uintptr_t span = std::min<uintptr_t>(end - begin, kChunkPages * page);
    if (mincore(reinterpret_cast<void*>(begin), span, residency) != 0) return false;
    begin += span;
  }
  return true;
}

// Every byte of [begin, end) lies in a writable mapping of /proc/self/maps (which
// lists mappings in address order). Only asked when write access is registered.
bool range_is_writable(uintptr_t begin, uintptr_t end) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return true;  // no procfs: cannot tell, do not refuse
  char line[512];
  while (begin < end && std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (hi <= begin || lo > begin) continue;  // not the mapping holding `begin`
    if (perms[1] != 'w') break;
    begin = hi;
  }
  std::fclose(maps);
  return begin >= end;
}

uint32_t random_seed() {
  uint32_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = uint32_t(reinterpret_cast<uintptr_t>(&seed));
  return seed;
}
}  // namespace

MrTable::MrTable() : key_rng_(random_seed()) {}

// Keys are random (DESIGN.md §7: a guessed key must not reach memory), never 0.
// They come from the kernel's CSPRNG: a Mersenne Twister's outputs give its state
// away, so a peer that saw 624 keys could compute every later one. Registration is
// a slow path; one getrandom call per key is cheap next to it.
uint32_t MrTable::fresh_key() {
  for (;;) {
    uint32_t key = 0;
    if (getrandom(&key, sizeof key, 0) != sizeof key) key = uint32_t(key_rng_());
    if (key != 0 && !key_in_use(key)) return key;
  }
}

// What ibv_reg_mr(3) and ibv_rereg_mr(3) refuse; 0 when the registration may be.
int MrTable::check(void* addr, uint64_t length, int access) {
  // IBA 10.6.3.1 / ibv_reg_mr(3): remote write or atomic without local write is EINVAL.
  if ((access & kRemoteNeedsLocalWrite) && !(access & IBV_ACCESS_LOCAL_WRITE)) return EINVAL;
  if ((access & ~kKnownAccess) != 0) return EINVAL;
  if (is_implicit(addr, length, access)) return 0;
  if (addr == nullptr && length != 0) return EINVAL;
  // The host range must not wrap past the end of the address space (as the kernel's
  // ib_umem_get refuses addr + length < addr): translate() would wrap too.
  if (length > std::numeric_limits<uintptr_t>::max() - reinterpret_cast<uintptr_t>(addr))
    return EINVAL;
  // The kernel pins the pages and fails with EFAULT on a hole; softrdma cannot pin,
  // but it can refuse memory that is not mapped now, instead of faulting later in
  // the progress thread when a peer writes there.
  // Likewise memory registered for writing must be writable (FOLL_WRITE in the
  // kernel): a remote WRITE into a read-only page would fault.
  // On-demand paging (docs/decisions/odp.md): the pages are looked at when they are
  // accessed, not now; an access to a page that is not there then fails as an ODP
  // NIC's unresolvable page fault does (the guarded copy, memory-faults.md).
  if (access & IBV_ACCESS_ON_DEMAND) return 0;
  const bool written = (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  if (!range_is_mapped(addr, length) ||
      (written && length != 0 && !range_is_writable(begin, begin + length)))
    return EFAULT;
  return 0;
}

Mr* MrTable::reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access, int& err) {
  if ((err = check(addr, length, access)) != 0) return nullptr;
  auto mr = std::make_unique<Mr>();
  mr->pd = pd;
  mr->addr = static_cast<uint8_t*>(addr);
  mr->iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : iova;
  mr->length = length;
  // Implicit ODP: the whole address space, addressed by its virtual addresses.
  if (is_implicit(addr, length, access)) {
    mr->iova = 0;
    mr->length = std::numeric_limits<uint64_t>::max();
  }
  mr->access = access;
  std::unique_lock lock(mutex_);
  mr->key = fresh_key();
  share_pages(*mr);
  Mr* raw = mr.get();
  by_key_.emplace(raw->key, std::move(mr));
  live_.insert(raw);
  pd->users.fetch_add(1);
  publish(*raw);
  return raw;
}

void MrTable::publish(const Mr& mr) {
  if (node_ == nullptr) return;
  node_->publish_key(mr.key, samehost::KeyGrant{reinterpret_cast<uintptr_t>(mr.addr), mr.iova,
                                                mr.length, mr.pd->handle(), uint32_t(mr.access),
                                                0, mr.pages ? mr.pages->span() : samehost::SharedSpan{}});
}

// Same-host peers then copy into the MR's whole pages with loads and stores
// (samehost/shared_pages.h, docs/decisions/same-host.md "Shared pages"), unless:
// ODP memory (it follows whatever the process maps there later), more bytes than
// configured (the move copies them), or a page of another MR's range (a peer may
// be writing there through that MR while the pages move).
void MrTable::share_pages(Mr& mr) {
  if (node_ == nullptr || share_up_to_ == 0 || mr.length > share_up_to_ ||
      (mr.access & IBV_ACCESS_ON_DEMAND) != 0)
    return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const auto pages_of = [page](const Mr& m) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(m.addr);
    return std::pair{at / page * page, (at + m.length + page - 1) / page * page};
  };
  const auto [begin, end] = pages_of(mr);
  for (const Mr* other : live_) {
    const auto [other_begin, other_end] = pages_of(*other);
    if (other != &mr && other_begin < end && begin < other_end) return;
  }
  std::string why;
  mr.pages = samehost::SharedPages::share(mr.addr, mr.length, why);
}

// After the key's revocation (no peer inside an access through it): the pages go
// back to private memory, and peers learn to drop their mappings.
void MrTable::unshare_pages(Mr& mr) {
  if (!mr.pages) return;
  mr.pages.reset();
  node_->header().pages_unshared.fetch_add(1, std::memory_order_release);
}

// A window's range is in its MR's address space; what peers need is where its
// first byte is in this process, and the address they name it by.
void MrTable::publish(const Mw& mw) {
  if (node_ == nullptr || !mw.bound || mw.mr == nullptr) return;
  uint8_t* host = mw.mr->translate(mw.va, mw.length);
  if (host == nullptr) return;
  const uint64_t named_from = (mw.access & IBV_ACCESS_ZERO_BASED) ? 0 : mw.va;
  node_->publish_key(mw.rkey,
                     samehost::KeyGrant{reinterpret_cast<uintptr_t>(host), named_from, mw.length,
                                        mw.pd->handle(), uint32_t(mw.access), mw.qpn,
                                        mw.mr->pages ? mw.mr->pages->span() : samehost::SharedSpan{}});
}

void MrTable::revoke(uint32_t key) {
  if (node_ != nullptr) node_->revoke_key(key);
}

int MrTable::dereg(Mr* mr) {
  std::unique_lock lock(mutex_);
  // Known before touched: a second dereg of the same MR must not read freed memory.
  if (!live_.contains(mr)) return EINVAL;
  auto it = by_key_.find(mr->key);
  if (it == by_key_.end() || it->second.get() != mr) return EINVAL;
  if (mr->windows != 0) return EBUSY;  // ibv_alloc_mw(3): windows are still bound to it
  revoke(mr->key);
  unshare_pages(*mr);
  mr->pd->users.fetch_sub(1);
  live_.erase(mr);
  by_key_.erase(it);
  generation_.fetch_add(1, std::memory_order_release);
  return 0;
}

// ibv_rereg_mr(3): the MR keeps its key and takes the new PD, range and access at
// once; checked first, so a refused change leaves it as it was. The generation moves
// on, as for a dereg: no translation cached from the old range survives.
int MrTable::rereg(Mr* mr, Pd* pd, void* addr, uint64_t length, int access) {
  if (int err = check(addr, length, access); err != 0) return err;
  std::unique_lock lock(mutex_);
  if (!live_.contains(mr)) return EINVAL;
  // A bound window's range and PD were checked against the MR as it is (IBA
  // C10-74..76): it must be unbound first, as for ibv_dereg_mr.
  if (mr->windows != 0) return EBUSY;
  if (pd != mr->pd) {
    mr->pd->users.fetch_sub(1);
    pd->users.fetch_add(1);
    mr->pd = pd;
  }
  const bool moved = addr != mr->addr || length != mr->length;
  if (moved) {
    // A new translation: peers address it by its host address (as ibv_reg_mr).
    mr->addr = static_cast<uint8_t*>(addr);
    mr->iova = reinterpret_cast<uintptr_t>(addr);
    mr->length = length;
  }
  if (access & IBV_ACCESS_ZERO_BASED) mr->iova = 0;
  mr->access = access;
  generation_.fetch_add(1, std::memory_order_release);
  revoke(mr->key);
  if (moved || (access & IBV_ACCESS_ON_DEMAND) != 0) {
    unshare_pages(*mr);
    share_pages(*mr);
  }
  publish(*mr);
  return 0;
}

// Nothing is fetched: the memory is the host's and is never pinned or mirrored,
// so every access resolves its page when it happens (docs/decisions/odp.md).
int MrTable::check_prefetch(uint32_t lkey, const Pd* pd, uint64_t addr, uint64_t length,
                            bool write) const {
  std::shared_lock lock(mutex_);
  auto it = by_key_.find(lkey);
  if (it == by_key_.end()) return EFAULT;  // "one of the lkeys ... is invalid"
  const Mr& mr = *it->second;
  if (mr.pd != pd) return EPERM;  // "a valid lkey outside the caller's security scope"
  if (!(mr.access & IBV_ACCESS_ON_DEMAND)) return EINVAL;  // prefetch is for ODP MRs
  if (write && !(mr.access & IBV_ACCESS_LOCAL_WRITE)) return EPERM;
  if (mr.translate(addr, length) == nullptr) return EFAULT;  // out of the MR's bounds
  return 0;
}

size_t MrTable::size() const {
  std::shared_lock lock(mutex_);
  return by_key_.size();
}

Mr* MrTable::find(uint32_t key) {
  std::shared_lock lock(mutex_);
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : it->second.get();
}

const Mr* MrTable::Access::find(uint32_t key) const {
  auto it = table_->by_key_.find(key);
  return it == table_->by_key_.end() ? nullptr : it->second.get();
}

uint8_t* MrTable::Access::resolve(uint32_t key, const Pd* pd, uint64_t va, uint64_t len,
                                  int need, AccessError& why) const {
  return resolve_in(find(key), pd, va, len, need, why);
}

uint8_t* MrTable::Access::resolve_in(const Mr* mr, const Pd* pd, uint64_t va, uint64_t len,
                                     int need, AccessError& why) {
  // The rules are access_check.h's, for an MR's key as for any other.
  const KeyView key = mr != nullptr ? KeyView::of(*mr) : KeyView{};
  uint64_t offset = 0;
  why = check_key(mr != nullptr ? &key : nullptr, RemoteAccess{need, va, len, pd_id(pd), 0}, offset);
  return why == AccessError::kNone ? mr->addr + offset : nullptr;
}

}  // namespace softrdma::engine
