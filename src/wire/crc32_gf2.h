// CRC-32 (IEEE 802.3, the ICRC's CRC: IBA Annex A17.3.3) as arithmetic in
// GF(2)[x] modulo its polynomial P. A CRC register is a polynomial of degree < 32
// in the reflected layout zlib uses: bit 31 holds the coefficient of x^0, bit 0
// that of x^31. Feeding a zero byte multiplies the register by x^8 mod P, so a
// change of some message bytes changes the final CRC by (the change's own register
// contribution) * x^(8 * bytes after it). This file gives the pieces that undo
// that: multiplication, x^-1 (P has a constant term, so x is invertible), powers
// x^(-8 * 2^j), and the inversion of the register left by two bytes. icrc.cc uses
// them to solve the IPv4 Identification a receiving socket cannot see.
// All constexpr: tables are built by the compiler, nothing at run time.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace softrdma::wire::crc_math {

inline constexpr uint32_t kPoly = 0xedb88320;  // P without x^32, reflected
inline constexpr uint32_t kOne = 0x80000000;   // the polynomial 1 (x^0)
inline constexpr uint32_t kX = 0x40000000;     // the polynomial x

constexpr uint32_t times_x(uint32_t a) { return (a & 1) ? (a >> 1) ^ kPoly : a >> 1; }

// a * b mod P. Walks a's coefficients from x^0 upwards, stops when none is left.
constexpr uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (; a != 0; a <<= 1) {
    if (a & kOne) product ^= b;
    b = times_x(b);
  }
  return product;
}

// x^-1: the q with q * x = 1. times_x(q) = kOne needs q's x^31 bit (bit 0) set, and
// then (q >> 1) ^ kPoly = kOne.
inline constexpr uint32_t kXInverse = ((kOne ^ kPoly) << 1) | 1;
static_assert(times_x(kXInverse) == kOne);
static_assert(multiply(kX, kXInverse) == kOne && multiply(kXInverse, kX) == kOne);

// kByteTable[b]: the register after feeding byte b into a zero register (b * x^8),
// the classic table of byte-wise CRC-32.
constexpr std::array<uint32_t, 256> make_byte_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int i = 0; i < 8; ++i) r = times_x(r);
    table[b] = r;
  }
  return table;
}
inline constexpr std::array<uint32_t, 256> kByteTable = make_byte_table();
static_assert(kByteTable[1] == 0x77073096 && kByteTable[255] == 0x2d02ef8d);

// The top byte of kByteTable[b] differs for every b (b -> top byte is a linear map
// of eight bits that is invertible for this P; the compiler checks it below), so
// the top byte of a register names the table entry that was folded in last.
constexpr std::array<uint8_t, 256> make_top_byte_index() {
  std::array<uint8_t, 256> index{};
  for (uint32_t b = 0; b < 256; ++b) index[kByteTable[b] >> 24] = uint8_t(b);
  return index;
}
inline constexpr std::array<uint8_t, 256> kByteOfTopByte = make_top_byte_index();
constexpr bool top_bytes_are_unique() {
  for (uint32_t b = 0; b < 256; ++b)
    if (kByteOfTopByte[kByteTable[b] >> 24] != b) return false;
  return true;
}
static_assert(top_bytes_are_unique());

// kInversePow8[j] = x^(-8 * 2^j): undoes 2^j zero bytes.
constexpr std::array<uint32_t, 32> make_inverse_powers() {
  std::array<uint32_t, 32> powers{};
  uint32_t p = kOne;
  for (int i = 0; i < 8; ++i) p = multiply(p, kXInverse);
  for (auto& entry : powers) {
    entry = p;
    p = multiply(p, p);
  }
  return powers;
}
inline constexpr std::array<uint32_t, 32> kInversePow8 = make_inverse_powers();
static_assert(multiply(kByteTable[0x5a], kInversePow8[0]) == 0x5a);  // b * x^8 * x^-8

// r * x^(-8n): the register r had before n zero bytes were fed. O(popcount(n))
// multiplications, one per set bit of n (square-and-multiply with fixed squares).
constexpr uint32_t undo_zero_bytes(uint32_t r, uint32_t n) {
  for (size_t j = 0; n != 0; ++j, n >>= 1)
    if (n & 1) r = multiply(r, kInversePow8[j]);
  return r;
}

// x^(8n): what feeding n zero bytes multiplies a register by.
constexpr uint32_t zero_bytes_power(uint32_t n) {
  uint32_t p = kOne;
  for (uint32_t i = 0; i < 8 * n; ++i) p = times_x(p);
  return p;
}
static_assert(multiply(zero_bytes_power(5), undo_zero_bytes(kOne, 5)) == kOne);

// The register after feeding byte b into register r (byte-wise CRC-32's step).
constexpr uint32_t feed_byte(uint32_t r, uint8_t b) {
  return (r >> 8) ^ kByteTable[(r ^ b) & 0xff];
}

// The register after feeding bytes b0 then b1 into a zero register.
constexpr uint32_t register_of_two_bytes(uint8_t b0, uint8_t b1) {
  return feed_byte(kByteTable[b0], b1);
}

// Inverse of register_of_two_bytes: the bytes (b0 << 8 | b1) that leave register r,
// or nullopt when no two bytes do. 16 of r's 32 bits are redundant and checked.
constexpr std::optional<uint16_t> two_bytes_of_register(uint32_t r) {
  const uint8_t last_index = kByteOfTopByte[r >> 24];  // (T[b0] ^ b1) & 0xff
  const uint32_t shifted_b0 = r ^ kByteTable[last_index];  // T[b0] >> 8 if consistent
  const uint8_t b0 = kByteOfTopByte[(shifted_b0 >> 16) & 0xff];
  if ((kByteTable[b0] >> 8) != shifted_b0) return std::nullopt;
  const uint8_t b1 = uint8_t(last_index ^ (kByteTable[b0] & 0xff));
  return uint16_t(b0 << 8 | b1);
}
static_assert(two_bytes_of_register(register_of_two_bytes(0x12, 0x34)) == 0x1234);
static_assert(two_bytes_of_register(0) == 0);

}  // namespace softrdma::wire::crc_math
