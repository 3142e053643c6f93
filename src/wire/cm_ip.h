// The IP-based CM service (IBA Vol 1, Annex A11), which rdma_cm uses for
// RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IB: the service ID that names an IP port,
// and the 36-byte header that leads the private data of a REQ or SIDR_REQ with the
// connection's IP addresses. Pure: no I/O, no allocation.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace softrdma::wire {

// Annex A11: service ID = 0x0000000001 (40 bits) | protocol (8 bits) | port (16 bits).
// The protocol byte is the low byte of Linux's RDMA_PS_* (RDMA_PS_TCP 0x0106, ...).
inline constexpr uint64_t kIpServiceIdPrefix = 0x0000000001;
enum class IpProtocol : uint8_t { kTcp = 0x06, kUdp = 0x11, kIb = 0x3f };

struct IpService {
  IpProtocol protocol = IpProtocol::kTcp;  // any byte is kept
  uint16_t port = 0;
  bool operator==(const IpService&) const = default;
};

constexpr uint64_t ip_service_id(IpService s) {
  return (kIpServiceIdPrefix << 24) | (uint64_t(s.protocol) << 16) | s.port;
}
// nullopt when the service ID does not carry the Annex A11 prefix.
constexpr std::optional<IpService> parse_ip_service_id(uint64_t service_id) {
  if ((service_id >> 24) != kIpServiceIdPrefix) return std::nullopt;
  return IpService{IpProtocol(uint8_t(service_id >> 16)), uint16_t(service_id)};
}
static_assert(ip_service_id({IpProtocol::kTcp, 0x1c06}) == 0x0000000001061c06ull);

// Annex A11 (Table "IP Addressing CM REQ Message Private Data Format"): 36 bytes at
// the start of the REQ's / SIDR_REQ's private data; the consumer's data follows.
inline constexpr size_t kIpCmHeaderBytes = 36;
inline constexpr size_t kIpCmReqConsumerBytes = 92 - kIpCmHeaderBytes;       // 56
inline constexpr size_t kIpCmSidrReqConsumerBytes = 216 - kIpCmHeaderBytes;  // 180

using IpCmAddress = std::array<uint8_t, 16>;  // IPv6, or IPv4 in the last 4 bytes

struct IpCmHeader {
  uint8_t major_version = 0;  // 4 bits; A11 and rdma_cm: 0
  uint8_t minor_version = 0;  // 4 bits
  uint8_t ip_version = 4;     // 4 bits: 4 or 6
  uint16_t src_port = 0;
  IpCmAddress src_ip{};
  IpCmAddress dst_ip{};
  bool operator==(const IpCmHeader&) const = default;
};

// An IPv4 address (host order) in the A11 form: 12 zero bytes, then the address.
IpCmAddress ip_cm_ipv4(uint32_t ipv4_host_order);
uint32_t ip_cm_to_ipv4(const IpCmAddress& a);  // host order, from the last 4 bytes

enum class IpCmError : uint8_t {
  kNone,
  kTruncated,       // fewer than 36 bytes of private data
  kBadMajorVersion, // a major version this end does not speak (A11: 0)
  kBadIpVersion,    // neither 4 nor 6
};
std::string_view to_string(IpCmError e);

// Reads the header at the start of `private_data`; `out` is written only on success.
IpCmError decode_ip_cm_header(std::span<const uint8_t> private_data, IpCmHeader& out);
// Writes the 36 header bytes at the start of `private_data` (which must hold them;
// returns false and writes nothing otherwise). Reserved bits are written as zero.
bool encode_ip_cm_header(const IpCmHeader& h, std::span<uint8_t> private_data);

}  // namespace softrdma::wire
