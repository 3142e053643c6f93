// Protection domains and memory regions (ibv_alloc_pd(3), ibv_reg_mr(3)).
#include <cstdint>
#include <memory>

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace softrdma::verbs;

namespace {


// ibv_reg_mr(3): "optional" access bits (IBV_ACCESS_OPTIONAL_RANGE, e.g.
// IBV_ACCESS_RELAXED_ORDERING, which perftest sets) may be ignored by a device
// that does not support them; they only ever allow an optimisation.
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (pd == nullptr) return fail(EINVAL);
  if (!live(pd->context)) return fail(EIO);
  Context* ctx = to_context(pd->context);
  auto mr = std::make_unique<Mr>();
  int err = 0;
  mr->mr = ctx->device->reg_mr(to_pd(pd)->pd, addr, length, iova,
                               int(access & ~unsigned(IBV_ACCESS_OPTIONAL_RANGE)), err);
  if (mr->mr == nullptr) return fail(err);
  mr->ibv.context = pd->context;
  mr->ibv.pd = pd;
  mr->ibv.addr = addr;
  mr->ibv.length = length;
  mr->ibv.handle = mr->mr->key;
  mr->ibv.lkey = mr->mr->key;
  mr->ibv.rkey = mr->mr->key;
  return &mr.release()->ibv;
}

}  // namespace

SOFTRDMA_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  return guard_ptr([&]() -> ibv_pd* {
    if (!live(context)) return fail(EIO);
    auto pd = std::make_unique<Pd>();
    int err = 0;
    pd->pd = to_context(context)->device->alloc_pd(err);
    if (pd->pd == nullptr) return fail(err);
    pd->ibv.context = context;
    pd->ibv.handle = pd->pd->handle();
    return &pd.release()->ibv;
  });
}

// ibv_dealloc_pd(3): EBUSY while MRs or QPs still use it.
SOFTRDMA_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  return guard_errno([&] {
    if (to_pd(pd)->protection != nullptr) return dealloc_parent_domain(to_pd(pd));
    if (live(pd->context)) {
      if (int err = to_context(pd->context)->device->dealloc_pd(to_pd(pd)->pd)) return err;
    }
    delete to_pd(pd);
    return 0;
  });
}

SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return guard_ptr([&] { return reg_mr(pd, addr, length, uintptr_t(addr), unsigned(access)); });
}

SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                         unsigned int access) {
  return guard_ptr([&] { return reg_mr(pd, addr, length, iova, access); });
}

// Deregistration revokes remote access at once (engine/mr.h: the MR table's
// lock is held by every access in progress).
SOFTRDMA_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  return guard_errno([&] {
    if (live(mr->context)) {
      if (int err = to_context(mr->context)->device->dereg_mr(to_mr(mr)->mr)) return err;
    }
    if (to_mr(mr)->dm != nullptr) to_mr(mr)->dm->mrs.fetch_sub(1);
    delete to_mr(mr);
    return 0;
  });
}

// ibv_rereg_mr(3): 0, or an ibv_rereg_mr_err_code with errno. Every refusal here
// is IBV_REREG_MR_ERR_INPUT: the change is checked before anything changes, so the
// old MR is still valid. The keys stay the same (the man page allows either).
SOFTRDMA_EXPORT int ibv_rereg_mr(ibv_mr* ibv, int flags, ibv_pd* pd, void* addr, size_t length,
                                 int access) {
  const int refused = guard_errno([&] {
    constexpr int kKnown = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
                           IBV_REREG_MR_CHANGE_ACCESS;
    if (ibv == nullptr || flags == 0 || (flags & ~kKnown) != 0) return EINVAL;
    const bool translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
    if (translation ? (addr == nullptr || length == 0) : (addr != nullptr || length != 0))
      return EINVAL;
    if ((flags & IBV_REREG_MR_CHANGE_PD) && (pd == nullptr || pd->context != ibv->context))
      return EINVAL;
    if (!live(ibv->context)) return EIO;
    Mr& mr = *to_mr(ibv);
    if (translation && mr.dm != nullptr) return EINVAL;  // device memory stays where it is
    ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : ibv->pd;
    void* new_addr = translation ? addr : ibv->addr;
    const size_t new_length = translation ? length : ibv->length;
    const int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS)
                               ? int(unsigned(access) & ~unsigned(IBV_ACCESS_OPTIONAL_RANGE))
                               : mr.mr->access;
    if (int err = to_context(ibv->context)->device->rereg_mr(
            mr.mr, to_pd(new_pd)->pd, new_addr, new_length, new_access))
      return err;
    ibv->pd = new_pd;
    ibv->addr = new_addr;
    ibv->length = new_length;
    return 0;
  });
  if (refused == 0) return 0;
  errno = refused;
  return IBV_REREG_MR_ERR_INPUT;
}

// ibv_reg_mr_iova(3): peers (and local SGEs) address the MR by `iova`.
SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                        int access) {
  return guard_ptr([&] { return reg_mr(pd, addr, length, iova, unsigned(access)); });
}

namespace softrdma::verbs {

// ibv_advise_mr(3), the verbs_context slot. Every advice is a prefetch, and there
// is nothing to fetch (docs/decisions/odp.md); the arguments are checked as the
// man page says all the same, so a program's mistakes show here as on hardware.
int op_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                 uint32_t num_sge) {
  return guard_errno([&] {
    if (pd == nullptr || sg_list == nullptr || num_sge == 0) return EINVAL;
    if ((flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) != 0) return EINVAL;
    const int raw_advice = softrdma::engine::raw_enum(advice);
    if (raw_advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
        raw_advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
        raw_advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
      return EOPNOTSUPP;  // ENOTSUP: "the advise operation isn't supported"
    if (!live(pd->context)) return EIO;
    const auto& mrs = to_context(pd->context)->device->mrs();
    const bool write = raw_advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
    for (uint32_t i = 0; i < num_sge; ++i) {
      const ibv_sge& sge = sg_list[i];
      if (int err = mrs.check_prefetch(sge.lkey, to_pd(pd)->pd, sge.addr, sge.length, write))
        return err;
    }
    return 0;
  });
}

}  // namespace softrdma::verbs

// dma-buf memory belongs to a device driver; a software RNIC cannot reach it.
SOFTRDMA_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* /*pd*/, uint64_t /*offset*/, size_t /*length*/,
                                          uint64_t /*iova*/, int /*fd*/, int /*access*/) {
  return fail(EOPNOTSUPP);
}

// ibv_import_pd(3) / ibv_import_mr(3): the PD or MR of a context this one was
// imported from (ibv_import_device: same process, same device), by handle: a new
// handle on the same object, released by unimport (which leaves the object).
SOFTRDMA_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  return guard_ptr([&]() -> ibv_pd* {
    if (context == nullptr) return fail(EINVAL);
    if (!live(context)) return fail(EIO);
    auto pd = std::make_unique<Pd>();
    pd->pd = to_context(context)->device->find_pd(pd_handle);
    if (pd->pd == nullptr) return fail(EINVAL);
    pd->ibv.context = context;
    pd->ibv.handle = pd_handle;
    return &pd.release()->ibv;
  });
}

SOFTRDMA_EXPORT void ibv_unimport_pd(ibv_pd* pd) { delete to_pd(pd); }

SOFTRDMA_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  return guard_ptr([&]() -> ibv_mr* {
    if (pd == nullptr) return fail(EINVAL);
    if (!live(pd->context)) return fail(EIO);
    softrdma::engine::Mr* found = to_context(pd->context)->device->find_mr(mr_handle);
    if (found == nullptr || found->pd != to_pd(pd)->pd) return fail(EINVAL);
    auto mr = std::make_unique<Mr>();
    mr->mr = found;
    mr->ibv.context = pd->context;
    mr->ibv.pd = pd;
    mr->ibv.addr = found->addr;
    mr->ibv.length = found->length;
    mr->ibv.handle = found->key;
    mr->ibv.lkey = found->key;
    mr->ibv.rkey = found->key;
    return &mr.release()->ibv;
  });
}

SOFTRDMA_EXPORT void ibv_unimport_mr(ibv_mr* mr) { delete to_mr(mr); }

