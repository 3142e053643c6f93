// The CRC-32 library, chosen by measurement (docs/decisions/icrc-library.md): Intel
// ISA-L, about 3x libdeflate and 12x zlib at 4 KiB on the project's machine.
#include "wire/crc32.h"

#include <isa-l/crc.h>

namespace softrdma::wire {

// crc32_gzip_refl is ISA-L's reflected IEEE CRC-32 with zlib's conventions (start
// from 0, the initial and final inversions done inside, a running value may be
// continued); bench/crc_bench checks it against zlib whole and in pieces. Not
// crc32_ieee, which is the unreflected CRC. ISA-L picks the version for the CPU
// (PCLMULQDQ, VPCLMULQDQ with AVX-512, or a table) at the first call.
uint32_t crc32_update(uint32_t crc, std::span<const uint8_t> bytes) {
  return crc32_gzip_refl(crc, bytes.data(), bytes.size());
}

// crc32_iscsi keeps ISA-L's raw register: the inversions are ours, so that a
// running value continues as crc32_update's does.
uint32_t crc32c_update(uint32_t crc, std::span<const uint8_t> bytes) {
  return ~crc32_iscsi(const_cast<uint8_t*>(bytes.data()), int(bytes.size()), ~crc);
}

}  // namespace softrdma::wire
