#include "traffic/content.h"

#include <zlib.h>

#include <bit>
#include <cstring>

static_assert(std::endian::native == std::endian::little, "content words are little-endian");

namespace softrdma::traffic {

namespace {

// Content is a sequence of little-endian 64-bit words; word w of key k is
// mix64(k ^ (w * odd)), so any aligned or unaligned window can be produced alone.
inline uint64_t word_at(uint64_t key, uint64_t index) {
  return mix64(key ^ (index * 0xd1342543de82ef95ull));
}

inline uint8_t byte_at(uint64_t key, uint64_t pos) {
  return uint8_t(word_at(key, pos >> 3) >> (8 * (pos & 7)));
}

}  // namespace

void fill_content(uint64_t key, uint64_t offset, std::span<uint8_t> out) {
  size_t i = 0;
  const size_t n = out.size();
  for (; i < n && ((offset + i) & 7) != 0; ++i) out[i] = byte_at(key, offset + i);
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = word_at(key, (offset + i) >> 3);
    std::memcpy(&out[i], &w, 8);  // little-endian hosts: byte j = bits 8j..8j+7
  }
  for (; i < n; ++i) out[i] = byte_at(key, offset + i);
}

size_t first_mismatch(uint64_t key, uint64_t offset, std::span<const uint8_t> in) {
  size_t i = 0;
  const size_t n = in.size();
  for (; i < n && ((offset + i) & 7) != 0; ++i)
    if (in[i] != byte_at(key, offset + i)) return i;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = word_at(key, (offset + i) >> 3);
    if (std::memcmp(&in[i], &w, 8) != 0) break;
  }
  for (; i < n; ++i)
    if (in[i] != byte_at(key, offset + i)) return i;
  return kNoMismatch;
}

uint32_t crc32_of(std::span<const uint8_t> bytes, uint32_t crc) {
  return uint32_t(crc32_z(crc, bytes.data(), bytes.size()));
}

}  // namespace softrdma::traffic
