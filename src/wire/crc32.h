// CRC-32 as the ICRC uses it (IBA Annex A17.3.3): IEEE 802.3 polynomial, reflected,
// initial value and final XOR all ones, which is zlib's crc32(). The one place that
// names the library computing it (docs/decisions/icrc-library.md says which and why);
// everything else in softrdma calls crc32_update.
#pragma once

#include <cstdint>
#include <span>

namespace softrdma::wire {

// The CRC of the bytes fed so far, continued with `bytes`. Start with 0 (the CRC of
// nothing). Feeding a message in pieces gives the CRC of the whole message:
//   crc32_update(crc32_update(0, a), b) == crc32_update(0, a ++ b)
// The GF(2) solver (crc32_gf2.h) relies on this being exactly zlib's CRC-32.
uint32_t crc32_update(uint32_t crc, std::span<const uint8_t> bytes);

// CRC-32C (Castagnoli, iSCSI's: RFC 3385; the MPA CRC of RFC 5044 §6.4):
// reflected, initial value and final XOR all ones; crc32c_update(0, "123456789")
// is 0xE3069283. Continued in pieces like crc32_update.
uint32_t crc32c_update(uint32_t crc, std::span<const uint8_t> bytes);

}  // namespace softrdma::wire
