#include "wire/icrc.h"

#include <array>
#include <cassert>
#include <cstring>

#include "wire/crc32.h"
#include "wire/crc32_gf2.h"
#include "wire/opcodes.h"

namespace softrdma::wire {

namespace {

// IBA Annex A17.3.3: the ICRC input starts with 64 bits of ones standing for the
// LRH that RoCEv2 does not carry.
constexpr size_t kLrhOnesBytes = 8;
static_assert(kIcrcPrefixMaxBytes == kLrhOnesBytes + kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes);

// Where the IPv4 Identification and flags sit in the ICRC input.
constexpr size_t kIpv4IdAt = kLrhOnesBytes + 4;
constexpr size_t kIpv4FlagsAt = kLrhOnesBytes + 6;
constexpr uint8_t kIpv4DfInFlagsByte = 0x40;
static_assert(kIpv4FlagsAt == kIpv4IdAt + 2, "DF delta below assumes flags follow the ID");

// A receiving socket cannot get more than this into one UDP payload (IPv4: 65535 -
// 20 - 8), and the IP/UDP length fields the ICRC covers must hold it.
constexpr size_t kMaxUdpPayload = 65507;

bool icrc_covers(size_t udp_payload_bytes) {
  return udp_payload_bytes >= kBthBytes + kIcrcBytes && udp_payload_bytes <= kMaxUdpPayload;
}

void set_ones(uint8_t* p, size_t n) { std::memset(p, 0xff, n); }

// The register change that clearing DF makes, expressed where the ID's register
// contribution sits (right after the two ID bytes): DF is in the byte that follows
// them, so it is that byte's register taken back through one byte.
constexpr uint32_t kDfClearedAtId =
    crc_math::multiply(crc_math::kByteTable[kIpv4DfInFlagsByte], crc_math::kInversePow8[0]);

}  // namespace

// Everything after the BTH is fed to the CRC where it lies; only the headers the
// annex masks are written out.
size_t write_icrc_prefix(const IpUdpInfo& info, std::span<const uint8_t, kBthBytes> bth,
                         size_t udp_payload_bytes,
                         std::span<uint8_t, kIcrcPrefixMaxBytes> out) {
  if (!icrc_covers(udp_payload_bytes)) [[unlikely]] return 0;
  set_ones(out.data(), kLrhOnesBytes);
  uint8_t* ip = out.data() + kLrhOnesBytes;
  const size_t ip_udp = build_ip_udp_headers(
      info, udp_payload_bytes, std::span<uint8_t>(ip, kIpv6HeaderBytes + kUdpHeaderBytes));
  assert(ip_udp != 0);
  const size_t ip_bytes = ip_udp - kUdpHeaderBytes;
  if (info.ipv6()) {
    ip[0] |= 0x0f;        // traffic class, low nibble of byte 0
    set_ones(ip + 1, 3);  // rest of the traffic class, flow label
    ip[7] = 0xff;         // hop limit
  } else {
    ip[1] = 0xff;          // TOS
    ip[8] = 0xff;          // TTL
    set_ones(ip + 10, 2);  // header checksum
  }
  set_ones(ip + ip_bytes + 6, 2);  // UDP checksum
  uint8_t* masked_bth = ip + ip_udp;
  std::memcpy(masked_bth, bth.data(), kBthBytes);
  masked_bth[4] = 0xff;  // A17.3.3: BTH reserved byte (FECN/BECN in RoCEv2) as ones
  return kLrhOnesBytes + ip_udp + kBthBytes;
}

IcrcStream::IcrcStream(const IpUdpInfo& info, std::span<const uint8_t, kBthBytes> bth,
                       size_t udp_payload_bytes) {
  std::array<uint8_t, kIcrcPrefixMaxBytes> prefix;
  const size_t prefix_bytes = write_icrc_prefix(info, bth, udp_payload_bytes, prefix);
  if (prefix_bytes == 0) [[unlikely]] return;  // finish() says nullopt
  crc_ = crc32_update(0, std::span(prefix.data(), prefix_bytes));
  bytes_left_ = udp_payload_bytes - kBthBytes - kIcrcBytes;
  length_ok_ = true;
}

void IcrcStream::add(std::span<const uint8_t> bytes) {
  if (bytes.size() > bytes_left_) [[unlikely]] {  // more than announced: never valid
    length_ok_ = false;
    return;
  }
  crc_ = crc32_update(crc_, bytes);
  bytes_left_ -= bytes.size();
}

std::optional<uint32_t> IcrcStream::finish() const {
  if (!length_ok_ || bytes_left_ != 0) [[unlikely]] return std::nullopt;
  return crc_;
}

std::optional<uint32_t> compute_icrc_gathered(const IpUdpInfo& info,
                                              std::span<const uint8_t> headers,
                                              std::span<const iovec> payload) {
  if (headers.size() < kBthBytes) [[unlikely]] return std::nullopt;
  size_t udp_payload_bytes = headers.size() + kIcrcBytes;
  for (const iovec& piece : payload) udp_payload_bytes += piece.iov_len;
  IcrcStream icrc(info, headers.first<kBthBytes>(), udp_payload_bytes);
  icrc.add(headers.subspan(kBthBytes));
  for (const iovec& piece : payload)
    icrc.add({static_cast<const uint8_t*>(piece.iov_base), piece.iov_len});
  return icrc.finish();
}

uint32_t compute_icrc(const IpUdpInfo& info, std::span<const uint8_t> udp_payload) {
  if (!icrc_covers(udp_payload.size())) [[unlikely]] return 0;  // contract broken: stay in bounds
  IcrcStream icrc(info, udp_payload.first<kBthBytes>(), udp_payload.size());
  icrc.add(udp_payload.subspan(kBthBytes, udp_payload.size() - kBthBytes - kIcrcBytes));
  return icrc.finish().value_or(0);
}

// A17.3.3 / as Linux Soft-RoCE and RoCE NICs send it (checked against the golden
// vectors): the CRC value stored least significant byte first.
void write_icrc(const IpUdpInfo& info, std::span<uint8_t> udp_payload) {
  if (!icrc_covers(udp_payload.size())) [[unlikely]] return;
  const uint32_t crc = compute_icrc(info, udp_payload);
  uint8_t* out = udp_payload.data() + udp_payload.size() - kIcrcBytes;
  for (size_t i = 0; i < kIcrcBytes; ++i) out[i] = uint8_t(crc >> (8 * i));
}

uint32_t stored_icrc(std::span<const uint8_t> udp_payload) {
  if (udp_payload.size() < kIcrcBytes) [[unlikely]] return 0;
  const uint8_t* in = udp_payload.data() + udp_payload.size() - kIcrcBytes;
  return uint32_t(in[0]) | uint32_t(in[1]) << 8 | uint32_t(in[2]) << 16 |
         uint32_t(in[3]) << 24;
}

bool check_icrc(const IpUdpInfo& info, std::span<const uint8_t> udp_payload) {
  if (!icrc_covers(udp_payload.size())) return false;
  return compute_icrc(info, udp_payload) == stored_icrc(udp_payload);
}

// crc(ID = x, DF = d) = crc(ID = 0, DF = 1) ^ [reg(x) ^ (d ? 0 : reg(DF))] * x^(8K),
// with K the bytes after the ID and reg() the register a change leaves from a zero
// register (the affine parts of CRC-32 cancel between equal-length messages, and
// the IPv4 header checksum that the ID would change is masked to ones). So one CRC
// pass with ID 0, one multiplication by x^(-8K) and a table inversion find x.
std::optional<SolvedIpv4> solve_icrc_ipv4(IpUdpInfo info,
                                          std::span<const uint8_t> udp_payload) {
  if (!icrc_covers(udp_payload.size())) return std::nullopt;
  if (info.ipv6()) {  // nothing unknown: the flow label is masked
    if (!check_icrc(info, udp_payload)) return std::nullopt;
    return SolvedIpv4{info.ipv4_id, info.ipv4_df};
  }
  info.ipv4_id = 0;
  info.ipv4_df = true;
  const uint32_t difference = stored_icrc(udp_payload) ^ compute_icrc(info, udp_payload);
  if (difference == 0) return SolvedIpv4{0, true};  // softrdma's own senders: ID 0, DF

  const size_t icrc_input_bytes = kLrhOnesBytes + kIpv4HeaderBytes + kUdpHeaderBytes +
                                  udp_payload.size() - kIcrcBytes;
  const uint32_t bytes_after_id = uint32_t(icrc_input_bytes - (kIpv4IdAt + 2));
  const uint32_t at_id = crc_math::undo_zero_bytes(difference, bytes_after_id);
  if (auto id = crc_math::two_bytes_of_register(at_id)) return SolvedIpv4{*id, true};
  if (auto id = crc_math::two_bytes_of_register(at_id ^ kDfClearedAtId))
    return SolvedIpv4{*id, false};
  return std::nullopt;
}

}  // namespace softrdma::wire
