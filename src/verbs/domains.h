// Parent domains' custom allocators (ibv_alloc_parent_domain(3)): the memory
// resource through which an object made with a parent domain gets its queues.
#pragma once

#include <cstdint>
#include <memory>
#include <memory_resource>

#include "verbs/objects.h"

namespace softrdma::verbs {

// The resource_type handed to the allocator: "derived from the rdma_driver_id enum
// (upper 32 bits) and a vendor specific resource code". softrdma has no driver id
// of its own (RDMA_DRIVER_UNKNOWN, 0); its codes:
inline constexpr uint64_t kResourceQpQueues = 1;  // a QP's send and receive queues

// The parent domain's allocator (or null when it has none): what it answers
// IBV_ALLOCATOR_USE_DEFAULT for comes from the heap; null from it is ENOMEM.
std::unique_ptr<std::pmr::memory_resource> parent_domain_memory(Pd& domain,
                                                                uint64_t resource_type);

}  // namespace softrdma::verbs
