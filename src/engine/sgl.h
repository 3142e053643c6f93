// Copying message bytes to and from scatter/gather lists through the MR table:
// every SGE is resolved (key, PD, bounds, access) at the moment it is touched.
#pragma once

#include <cstdint>
#include <span>

#include "engine/mr.h"
#include "engine/wqe.h"

namespace softrdma::engine {

// Copies `out.size()` message bytes starting at message offset `offset` out of the
// list. False when an SGE no longer resolves, its memory is not mapped (a fault,
// caught: guarded_memory.h) or the list is too short; `why` then says which.
bool gather(const MrTable::Access& access, const Pd* pd, const SgeList& sgl,
            uint64_t offset, std::span<uint8_t> out, AccessError* why = nullptr);

// Copies `data` into the list at message offset `offset` (needs local write).
bool scatter(const MrTable::Access& access, const Pd* pd, const SgeList& sgl,
             uint64_t offset, std::span<const uint8_t> data, AccessError* why = nullptr);

uint64_t total_length(const SgeList& sgl);

}  // namespace softrdma::engine
