// Thread domains and parent domains (ibv_alloc_td(3), ibv_alloc_parent_domain(3)),
// as the software constructs they are (docs/decisions/parent-domains.md): a parent
// domain is its protection domain everywhere a PD is taken (the engine sees the
// same PD), carrying a thread domain and custom allocators, which the queues of
// QPs made with it come from.
#include "verbs/domains.h"

#include <mutex>
#include <new>
#include <unordered_set>

#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {

class ParentDomainMemory final : public std::pmr::memory_resource {
 public:
  ParentDomainMemory(Pd& domain, uint64_t type) : domain_(domain), type_(type) {}

 private:
  void* do_allocate(size_t bytes, size_t alignment) override {
    void* p = domain_.alloc(&domain_.ibv, domain_.pd_context, bytes, alignment, type_);
    if (p == IBV_ALLOCATOR_USE_DEFAULT) {
      p = std::pmr::new_delete_resource()->allocate(bytes, alignment);
      std::lock_guard lock(mutex_);
      from_heap_.insert(p);
      return p;
    }
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }

  void do_deallocate(void* p, size_t bytes, size_t alignment) override {
    {
      std::lock_guard lock(mutex_);
      if (from_heap_.erase(p) != 0) {
        std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
        return;
      }
    }
    domain_.free(&domain_.ibv, domain_.pd_context, p, type_);
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  Pd& domain_;
  const uint64_t type_;
  std::mutex mutex_;  // creation and destruction may run on different threads
  std::unordered_set<void*> from_heap_;
};

}  // namespace

namespace softrdma::verbs {

std::unique_ptr<std::pmr::memory_resource> parent_domain_memory(Pd& domain,
                                                                uint64_t resource_type) {
  if (domain.alloc == nullptr) return nullptr;
  return std::make_unique<ParentDomainMemory>(domain, resource_type);
}

// "If the ibv_td object is specified then any objects created under this thread
// domain will disable internal locking": softrdma keeps its locking (it is not
// on the data path's critical cost here: threading.md), which the man page
// allows ("by default all verbs objects are safe for multi-threaded access").
ibv_td* op_alloc_td(ibv_context* context, ibv_td_init_attr* init_attr) {
  return guard_ptr([&]() -> ibv_td* {
    if (init_attr == nullptr || init_attr->comp_mask != 0) return fail(EINVAL);
    if (!live(context)) return fail(EIO);
    auto td = std::make_unique<Td>();
    td->ibv.context = context;
    return &td.release()->ibv;
  });
}

// ibv_alloc_td(3): "All resources created with the td should be destroyed prior
// to deallocating the td": a parent domain still holding it is EBUSY.
int op_dealloc_td(ibv_td* ibtd) {
  return guard_errno([&] {
    Td* td = to_td(ibtd);
    if (td->users.load() != 0) return EBUSY;
    delete td;
    return 0;
  });
}

ibv_pd* op_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  return guard_ptr([&]() -> ibv_pd* {
    constexpr uint32_t kKnown =
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    if (attr == nullptr || attr->pd == nullptr || (attr->comp_mask & ~kKnown) != 0)
      return fail(EINVAL);
    Pd* protection = to_pd(attr->pd);
    // A parent domain is made from a protection domain of this context.
    if (attr->pd->context != context || protection->protection != nullptr) return fail(EINVAL);
    if (attr->td != nullptr && attr->td->context != context) return fail(EINVAL);
    const bool allocators = attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
    if (allocators && (attr->alloc == nullptr || attr->free == nullptr)) return fail(EINVAL);
    if (!live(context)) return fail(EIO);
    auto parent = std::make_unique<Pd>();
    parent->ibv.context = context;
    parent->ibv.handle = attr->pd->handle;
    parent->pd = protection->pd;
    parent->protection = protection;
    parent->td = attr->td != nullptr ? to_td(attr->td) : nullptr;
    if (allocators) {
      parent->alloc = attr->alloc;
      parent->free = attr->free;
    }
    if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
      parent->pd_context = attr->pd_context;
    // The protection domain and thread domain may not go while it exists.
    protection->pd->users.fetch_add(1);
    if (parent->td != nullptr) parent->td->users.fetch_add(1);
    return &parent.release()->ibv;
  });
}

// ibv_dealloc_pd(3) of a parent domain ("ibv_dealloc_pd() will deallocate the
// parent domain"): EBUSY while QPs made with it exist ("all resources created with
// the parent domain should be destroyed prior"), as their queues may be its
// allocator's memory. MRs hold the protection domain itself (the engine's PD).
int dealloc_parent_domain(Pd* parent) {
  if (parent->users.load() != 0) return EBUSY;
  parent->protection->pd->users.fetch_sub(1);
  if (parent->td != nullptr) parent->td->users.fetch_sub(1);
  delete parent;
  return 0;
}

}  // namespace softrdma::verbs
