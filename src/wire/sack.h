// The payload of softrdma's selective acknowledgement (op::kRcSack; its meaning and
// why it exists: docs/decisions/selective-repeat.md). The BTH PSN is the last PSN
// received in order, as an ACK's (IBA 9.7.5.1.6), so the first missing one is the
// next; the AETH is an ACK's (syndrome, MSN). The payload is a bitmap of the
// kSackSpan PSNs after the first missing one: bit i (byte i / 8, bit i % 8, least
// significant first) set when PSN first_missing + 1 + i has been received and is
// held, waiting for the gap before it to fill.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace softrdma::wire {

// Every agreed connection's SACK: 128 PSNs.
inline constexpr size_t kSackBitmapBytes = 16;
inline constexpr uint32_t kSackSpan = kSackBitmapBytes * 8;
// The wide SACK, when both ends agreed on it too (ECE option bit 1,
// engine/limits.h): 512 PSNs, so that a gap open for a round trip or two does
// not stop a sender whose round trip holds more than 128 packets.
inline constexpr size_t kWideSackBitmapBytes = 64;
inline constexpr uint32_t kWideSackSpan = kWideSackBitmapBytes * 8;

inline constexpr size_t sack_bitmap_bytes(uint32_t span) { return span / 8; }

inline void sack_mark(std::span<uint8_t> bitmap, uint32_t i) {
  bitmap[i / 8] = uint8_t(bitmap[i / 8] | (1u << (i % 8)));
}

inline bool sack_marked(std::span<const uint8_t> bitmap, uint32_t i) {
  return i < bitmap.size() * 8 && (bitmap[i / 8] >> (i % 8)) & 1u;
}

// The last bit set (the newest PSN held: first_missing + 1 + it), if any.
inline std::optional<uint32_t> sack_last_marked(std::span<const uint8_t> bitmap) {
  for (size_t byte = bitmap.size(); byte-- > 0;) {
    if (bitmap[byte] == 0) continue;
    return uint32_t(byte * 8 + 7 - std::countl_zero(bitmap[byte]));
  }
  return std::nullopt;
}

}  // namespace softrdma::wire
