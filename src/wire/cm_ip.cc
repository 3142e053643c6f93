#include "wire/cm_ip.h"

#include "wire/mad_fields.h"

namespace softrdma::wire {
namespace mad {

template <> struct Layout<IpCmHeader> {
  static constexpr size_t kBytes = kIpCmHeaderBytes;
  static constexpr auto kBound = std::tuple{
      bind(be(0, 1, 4, 4), &IpCmHeader::major_version),
      bind(be(0, 1, 0, 4), &IpCmHeader::minor_version),
      bind(be(1, 1, 4, 4), &IpCmHeader::ip_version),
      bind(be(2, 2), &IpCmHeader::src_port),
      bind(octets(4, 16), &IpCmHeader::src_ip),
      bind(octets(20, 16), &IpCmHeader::dst_ip),
  };
  static constexpr std::array kReserved = {be(1, 1, 0, 4)};
};
static_assert(layout_tiles<IpCmHeader>());

}  // namespace mad

IpCmAddress ip_cm_ipv4(uint32_t ipv4) {
  IpCmAddress a{};
  for (int i = 0; i < 4; ++i) a[12 + i] = uint8_t(ipv4 >> (24 - 8 * i));
  return a;
}

uint32_t ip_cm_to_ipv4(const IpCmAddress& a) {
  return uint32_t(a[12]) << 24 | uint32_t(a[13]) << 16 | uint32_t(a[14]) << 8 | a[15];
}

std::string_view to_string(IpCmError e) {
  switch (e) {
    case IpCmError::kNone: return "none";
    case IpCmError::kTruncated: return "truncated";
    case IpCmError::kBadMajorVersion: return "bad_major_version";
    case IpCmError::kBadIpVersion: return "bad_ip_version";
  }
  return "?";
}

IpCmError decode_ip_cm_header(std::span<const uint8_t> private_data, IpCmHeader& out) {
  if (private_data.size() < kIpCmHeaderBytes) return IpCmError::kTruncated;
  const IpCmHeader h = mad::load_fields<IpCmHeader>(private_data.first(kIpCmHeaderBytes));
  // A11: a newer minor version stays readable by this one; a major version does not.
  if (h.major_version != 0) return IpCmError::kBadMajorVersion;
  if (h.ip_version != 4 && h.ip_version != 6) return IpCmError::kBadIpVersion;
  out = h;
  return IpCmError::kNone;
}

bool encode_ip_cm_header(const IpCmHeader& h, std::span<uint8_t> private_data) {
  if (private_data.size() < kIpCmHeaderBytes) return false;
  mad::store_fields(h, private_data.first(kIpCmHeaderBytes));
  return true;
}

}  // namespace softrdma::wire
