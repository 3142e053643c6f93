// Deterministic message contents and checksums for the traffic engine.
//
// Every byte either process puts on the wire is a pure function of a 64-bit key and
// the byte's position, so the receiving process can regenerate what it should have
// received, compare byte for byte, and name the first wrong offset. The CRC-32
// (zlib's) of the same bytes is what the two processes exchange for one-sided
// operations, where only the target can see the destination.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace softrdma::traffic {

// SplitMix64 (Steele, Lea, Flood 2014): a bijective mixer, cheap and well spread.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A key for a named stream of contents: mix of the parts.
constexpr uint64_t make_key(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

// Small seeded generator for plans (not for contents).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_++); }
  // Uniform in [0, n); n > 0.
  uint64_t below(uint64_t n) { return next() % n; }
  bool chance(double p) { return double(next() >> 11) * 0x1.0p-53 < p; }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Writes content(key) bytes [offset, offset + out.size()) into out.
void fill_content(uint64_t key, uint64_t offset, std::span<uint8_t> out);

inline constexpr size_t kNoMismatch = ~size_t(0);
// Index into `in` of the first byte that differs from content(key) at
// [offset, offset + in.size()), or kNoMismatch.
size_t first_mismatch(uint64_t key, uint64_t offset, std::span<const uint8_t> in);

// CRC-32 (IEEE, zlib), continued from `crc` (start with 0).
uint32_t crc32_of(std::span<const uint8_t> bytes, uint32_t crc = 0);

}  // namespace softrdma::traffic
