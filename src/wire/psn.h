// 24-bit packet sequence number arithmetic (IBA 9.7.1: PSNs are modulo 2^24 and
// compared within a window of half the space, 2^23).
#pragma once

#include <cstdint>

namespace softrdma::wire {

inline constexpr uint32_t kPsnMask = 0x00ffffff;

constexpr uint32_t psn_add(uint32_t psn, int64_t n) {
  return uint32_t(int64_t(psn) + n) & kPsnMask;
}

// Signed distance a - b in the 24-bit ring: negative when a is before b.
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
  return int32_t((a - b) << 8) >> 8;
}

constexpr bool psn_before(uint32_t a, uint32_t b) { return psn_diff(a, b) < 0; }

static_assert(psn_diff(0, kPsnMask) == 1);
static_assert(psn_diff(kPsnMask, 0) == -1);
static_assert(psn_add(kPsnMask, 2) == 1);
static_assert(psn_before(0xfffff8, 0x000004));

}  // namespace softrdma::wire
