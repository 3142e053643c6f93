#include "engine/sgl.h"

#include <algorithm>

#include "engine/guarded_memory.h"

namespace softrdma::engine {

namespace {

// Walks the list from message offset `offset`, calling copy(host_ptr, pos, n) for
// each contiguous piece of `len` bytes; copy returns false when the memory faulted.
template <typename Copy>
bool walk(const MrTable::Access& access, const Pd* pd, const SgeList& sgl, uint64_t offset,
          size_t len, int need, AccessError* why, Copy&& copy) {
  AccessError reason = AccessError::kOutOfBounds;  // the list is too short
  size_t done = 0;
  for (uint32_t i = 0; i < sgl.count && done < len; ++i) {
    const Sge& sge = sgl.sges[i];
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const size_t n = std::min<uint64_t>(sge.length - offset, len - done);
    uint8_t* host = access.resolve(sge.lkey, pd, sge.addr + offset, n, need, reason);
    if (host == nullptr) break;
    if (!copy(host, done, n)) {
      reason = AccessError::kUnmapped;
      break;
    }
    done += n;
    offset = 0;
  }
  if (done == len) return true;
  if (why != nullptr) *why = reason;
  return false;
}

}  // namespace

bool gather(const MrTable::Access& access, const Pd* pd, const SgeList& sgl,
            uint64_t offset, std::span<uint8_t> out, AccessError* why) {
  return walk(access, pd, sgl, offset, out.size(), 0, why,
              [&](uint8_t* host, size_t pos, size_t n) {
                return guarded_copy(out.data() + pos, host, n);
              });
}

bool scatter(const MrTable::Access& access, const Pd* pd, const SgeList& sgl,
             uint64_t offset, std::span<const uint8_t> data, AccessError* why) {
  return walk(access, pd, sgl, offset, data.size(), IBV_ACCESS_LOCAL_WRITE, why,
              [&](uint8_t* host, size_t pos, size_t n) {
                return guarded_copy(host, data.data() + pos, n);
              });
}

uint64_t total_length(const SgeList& sgl) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < sgl.count; ++i) n += sgl.sges[i].length;
  return n;
}

}  // namespace softrdma::engine
