// The marker that ends a round on an unreliable transport (UC, UD; lane.h): a
// 0-byte SEND with immediate data. The plan's messages are never empty, so a
// 0-byte message is always a marker.
#pragma once

#include <cstdint>

namespace softrdma::traffic {

// A marker's wr_id: the plan's messages use their index (below 2^32).
inline constexpr uint64_t kMarkerWrId = uint64_t(1) << 63;

// A marker's immediate data: phase (4 bits), round (12 bits) and the count of
// WQE-consuming messages posted so far in the phase (16 low bits; the receiver
// knows the rest, rounds being far shorter).
struct MarkerTag {
  uint32_t phase = 0, round = 0, consumed = 0;
  static constexpr uint32_t kPhaseMask = 0xf, kRoundMask = 0xfff, kConsumedMask = 0xffff;
  uint32_t imm() const {
    return (phase & kPhaseMask) << 28 | (round & kRoundMask) << 16 | (consumed & kConsumedMask);
  }
  static MarkerTag from_imm(uint32_t imm) {
    return {imm >> 28, (imm >> 16) & kRoundMask, imm & kConsumedMask};
  }
};

}  // namespace softrdma::traffic
