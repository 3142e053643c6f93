// Device memory (ibv_alloc_dm(3), ibv_free_dm, ibv_memcpy_to_dm /
// ibv_memcpy_from_dm through the ibv_dm's own pointers, ibv_reg_dm_mr) as the
// software construct it is: host memory the device owns, reached by the
// application only through the copy calls and by the device through zero-based
// MRs (docs/decisions/device-memory.md).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {

// Device memory is accessed in 4-byte words, as the RoCE NICs that offer it do
// (their on-chip memory is written and read over PCIe in dwords): offsets and
// lengths of the copy calls must be multiples of 4.
constexpr uint64_t kDmWord = 4;
// The largest alignment ibv_alloc_dm's log_align_req may ask for: a page.
constexpr uint32_t kMaxLogAlign = 12;
constexpr size_t kMinAlign = 64;  // a cache line, whatever is asked

int check_copy(const Dm& dm, uint64_t offset, size_t length) {
  if (offset % kDmWord != 0 || length % kDmWord != 0) return EINVAL;
  if (offset > dm.length || length > dm.length - offset) return EINVAL;
  return 0;
}

int memcpy_to_dm(ibv_dm* ibdm, uint64_t offset, const void* host, size_t length) {
  Dm& dm = *to_dm(ibdm);
  if (int err = check_copy(dm, offset, length)) return err;
  std::memcpy(dm.memory + offset, host, length);
  return 0;
}

int memcpy_from_dm(void* host, ibv_dm* ibdm, uint64_t offset, size_t length) {
  Dm& dm = *to_dm(ibdm);
  if (int err = check_copy(dm, offset, length)) return err;
  std::memcpy(host, dm.memory + offset, length);
  return 0;
}

uint32_t next_dm_handle() {
  static std::atomic<uint32_t> next{1};
  return next.fetch_add(1);
}

// The allocated DMs of the process by handle, for ibv_import_dm(3): a DM is
// shared by handle between contexts of one device within the process, as PDs
// and MRs are (ibv_import_pd(3)). Cold paths only.
struct DmRegistry {
  std::mutex mutex;
  std::unordered_map<uint32_t, Dm*> by_handle;
};
DmRegistry& registry() {
  static DmRegistry* r = new DmRegistry;  // never destroyed: DMs may outlive statics
  return *r;
}

// Fills the public half of a handle on `dm`'s memory (allocated or imported).
void fill_handle(Dm& handle, ibv_context* context, uint32_t number) {
  handle.ibv.context = context;
  handle.ibv.memcpy_to_dm = memcpy_to_dm;
  handle.ibv.memcpy_from_dm = memcpy_from_dm;
  handle.ibv.comp_mask = IBV_DM_MASK_HANDLE;
  handle.ibv.handle = number;
}

}  // namespace

namespace softrdma::verbs {

// ibv_alloc_dm(3): EINVAL for a zero length, an unknown comp_mask or an alignment
// beyond a page; ENOMEM when the device's max_dm_size would be exceeded.
ibv_dm* op_alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  return guard_ptr([&]() -> ibv_dm* {
    if (attr == nullptr || attr->length == 0 || attr->comp_mask != 0 ||
        attr->log_align_req > kMaxLogAlign)
      return fail(EINVAL);
    // No live() check: device memory is host memory of this process, counted by an
    // atomic of the device, so a forked child may allocate it on its parent's
    // context (the kernel's contexts allow it; pyverbs'
    // test_multi_process_alloc_dm). An MR on it still needs a live context.
    softrdma::engine::Device& device = *to_context(context)->device;
    const size_t align = std::max<size_t>(kMinAlign, size_t(1) << attr->log_align_req);
    const size_t reserved = (attr->length + align - 1) / align * align;
    if (reserved < attr->length || !device.reserve_device_memory(reserved)) return fail(ENOMEM);
    auto dm = std::make_unique<Dm>();
    dm->memory = static_cast<uint8_t*>(std::aligned_alloc(align, reserved));
    if (dm->memory == nullptr) {
      device.release_device_memory(reserved);
      return fail(ENOMEM);
    }
    std::memset(dm->memory, 0, reserved);  // no earlier owner's bytes show
    dm->length = attr->length;
    dm->reserved = reserved;
    fill_handle(*dm, context, next_dm_handle());
    std::lock_guard lock(registry().mutex);
    registry().by_handle.emplace(dm->ibv.handle, dm.get());
    return &dm.release()->ibv;
  });
}

// ibv_free_dm(3): "may fail if any other resources (such as an MR) is still
// associated with the DM being freed": EBUSY, for an MR on it or a handle
// imported on it. Freeing an imported handle would destroy the memory under the
// allocated one, which always still exists: EBUSY too (ibv_unimport_dm releases
// an imported handle).
int op_free_dm(ibv_dm* ibdm) {
  return guard_errno([&] {
    Dm* dm = to_dm(ibdm);
    if (dm->origin != nullptr) return EBUSY;
    std::lock_guard lock(registry().mutex);  // no import may begin meanwhile
    if (dm->mrs.load() != 0 || dm->imports.load() != 0) return EBUSY;
    registry().by_handle.erase(dm->ibv.handle);
    to_context(ibdm->context)->device->release_device_memory(dm->reserved);  // as alloc
    std::free(dm->memory);
    delete dm;
    return 0;
  });
}

// ibv_reg_dm_mr(3): "user must set the IBV_ACCESS_ZERO_BASED flag"; the range must
// lie in the DM. The MR is an ordinary one over the DM's memory, addressed from 0.
ibv_mr* op_reg_dm_mr(ibv_pd* pd, ibv_dm* ibdm, uint64_t dm_offset, size_t length,
                     unsigned int access) {
  return guard_ptr([&]() -> ibv_mr* {
    if (pd == nullptr || ibdm == nullptr || ibdm->context != pd->context) return fail(EINVAL);
    Dm* dm = to_dm(ibdm);
    if (!(access & IBV_ACCESS_ZERO_BASED) || dm_offset > dm->length ||
        length > dm->length - dm_offset)
      return fail(EINVAL);
    if (!live(pd->context)) return fail(EIO);
    auto mr = std::make_unique<Mr>();
    int err = 0;
    mr->mr = to_context(pd->context)->device->reg_mr(
        to_pd(pd)->pd, dm->memory + dm_offset, length, 0,
        int(access & ~unsigned(IBV_ACCESS_OPTIONAL_RANGE)), err);
    if (mr->mr == nullptr) return fail(err);
    mr->dm = &dm->owner();  // an MR on an imported handle keeps the memory's owner busy
    mr->dm->mrs.fetch_add(1);
    mr->ibv.context = pd->context;
    mr->ibv.pd = pd;
    mr->ibv.addr = nullptr;  // zero based: the MR's addresses start at 0
    mr->ibv.length = length;
    mr->ibv.handle = mr->mr->key;
    mr->ibv.lkey = mr->mr->key;
    mr->ibv.rkey = mr->mr->key;
    return &mr.release()->ibv;
  });
}

}  // namespace softrdma::verbs

// ibv_import_dm(3): a new handle, in `context`, on the DM of handle `dm_handle`
// allocated by another context of the same device in this process (ibv_import_device
// on a dup of its cmd_fd). EINVAL for a null context, an unknown handle or a DM
// of another device.
SOFTRDMA_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  return guard_ptr([&]() -> ibv_dm* {
    if (context == nullptr) return fail(EINVAL);
    if (!live(context)) return fail(EIO);
    std::lock_guard lock(registry().mutex);
    auto it = registry().by_handle.find(dm_handle);
    if (it == registry().by_handle.end()) return fail(EINVAL);
    Dm& origin = *it->second;
    if (to_context(origin.ibv.context)->device != to_context(context)->device)
      return fail(EINVAL);
    auto dm = std::make_unique<Dm>();
    dm->memory = origin.memory;
    dm->length = origin.length;
    dm->origin = &origin;
    fill_handle(*dm, context, dm_handle);
    origin.imports.fetch_add(1);
    return &dm.release()->ibv;
  });
}

// ibv_unimport_dm(3): releases an imported handle, leaving the DM. On a handle
// that was not imported it does nothing (the man page has no error to return;
// ibv_free_dm is how an allocated DM goes).
SOFTRDMA_EXPORT void ibv_unimport_dm(ibv_dm* ibdm) {
  if (ibdm == nullptr) return;
  Dm* dm = to_dm(ibdm);
  if (dm->origin == nullptr) return;
  dm->origin->imports.fetch_sub(1);
  delete dm;
}
