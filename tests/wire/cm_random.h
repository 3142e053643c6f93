// Random CM MADs for the codec and fuzz tests: random bytes under a valid CM header
// of one of the nine attributes this codec knows.
#pragma once

#include <array>
#include <cstdint>
#include <random>

#include "wire/cm_mad.h"

namespace softrdma::wire::testing {

inline constexpr std::array<CmAttr, 9> kCmAttrs = {
    CmAttr::kReq,  CmAttr::kMra,  CmAttr::kRej,     CmAttr::kRep,    CmAttr::kRtu,
    CmAttr::kDreq, CmAttr::kDrep, CmAttr::kSidrReq, CmAttr::kSidrRep};

// With `valid_lengths`, the REJ ARI length and SIDR_REP additional information length
// stay within their 72-byte fields, so that every such MAD decodes.
inline std::array<uint8_t, kMadBytes> random_cm_mad(std::mt19937_64& rng, bool valid_lengths) {
  std::array<uint8_t, kMadBytes> mad;
  for (auto& b : mad) b = uint8_t(rng());
  const CmAttr attr = kCmAttrs[rng() % kCmAttrs.size()];
  mad[0] = kMadBaseVersion;
  mad[1] = kMgmtClassCm;
  mad[2] = kCmClassVersion;
  mad[3] = kMadMethodSend;
  mad[16] = uint8_t(uint16_t(attr) >> 8);
  mad[17] = uint8_t(attr);
  if (valid_lengths) {
    if (attr == CmAttr::kRej) mad[kMadHeaderBytes + 9] = uint8_t((rng() % 73) << 1 | (rng() & 1));
    if (attr == CmAttr::kSidrRep) mad[kMadHeaderBytes + 5] = uint8_t(rng() % 73);
  }
  return mad;
}

}  // namespace softrdma::wire::testing
