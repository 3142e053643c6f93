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

// --- The headers' register, computed once per flow and length ---
// A17.3.3 items 1-3 (LRH ones, IP, UDP) are the same for every packet of one flow
// and length but the IPv4 ID and DF, so their CRC is kept (one entry per thread:
// a bulk transfer's packets share it) and the ID and DF are folded in by linearity:
// two messages of equal length that differ in a few bytes have CRCs that differ by
// those bytes' register contribution times x^(8 * bytes after them). Building the
// headers and feeding their 36 bytes to the CRC cost more than the CRC of a 1 KiB
// payload (bench/wire_bench BM_ComputeIcrc).
constexpr size_t kIpv4HeadersBytes = kLrhOnesBytes + kIpv4HeaderBytes + kUdpHeaderBytes;
constexpr uint32_t kAfterIdBytes = uint32_t(kIpv4HeadersBytes - (kIpv4IdAt + 2));

// kIdHigh[b] / kIdLow[b]: what an ID byte b (big-endian: high, then low) adds to
// the headers' register.
template <bool kHigh>
constexpr std::array<uint32_t, 256> make_id_table() {
  std::array<uint32_t, 256> table{};
  const uint32_t after_id = crc_math::zero_bytes_power(kAfterIdBytes);
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t bytes = kHigh ? crc_math::register_of_two_bytes(uint8_t(b), 0)
                                 : crc_math::register_of_two_bytes(0, uint8_t(b));
    table[b] = crc_math::multiply(bytes, after_id);
  }
  return table;
}
constexpr std::array<uint32_t, 256> kIdHigh = make_id_table<true>();
constexpr std::array<uint32_t, 256> kIdLow = make_id_table<false>();
// What clearing DF (in the byte after the ID) adds to the headers' register.
constexpr uint32_t kDfClearedAfterHeaders =
    crc_math::multiply(crc_math::kByteTable[kIpv4DfInFlagsByte],
                       crc_math::zero_bytes_power(kAfterIdBytes - 1));

struct HeadersKey {
  Gid src;
  Gid dst;
  uint16_t src_port;
  uint16_t dst_port;
  uint32_t udp_payload_bytes;
  bool operator==(const HeadersKey&) const = default;
};

struct HeadersRegister {
  HeadersKey key{};
  uint32_t crc = 0;
  bool valid = false;
};

// The CRC of the masked LRH ones, IP and UDP headers with IPv4 ID 0 and DF (or the
// IPv6 headers), built from scratch.
uint32_t headers_crc(const IpUdpInfo& info, size_t udp_payload_bytes) {
  std::array<uint8_t, kIcrcPrefixMaxBytes> prefix;
  const std::array<uint8_t, kBthBytes> no_bth{};
  IpUdpInfo base = info;
  base.ipv4_id = 0;
  base.ipv4_df = true;
  const size_t n = write_icrc_prefix(base, no_bth, udp_payload_bytes, prefix);
  return crc32_update(0, std::span(prefix.data(), n - kBthBytes));
}

// The running CRC after A17.3.3 items 1-3 for `info` (`udp_payload_bytes` in range).
uint32_t headers_register(const IpUdpInfo& info, size_t udp_payload_bytes) {
  thread_local HeadersRegister last;
  const HeadersKey key{info.src, info.dst, info.src_port, info.dst_port,
                       uint32_t(udp_payload_bytes)};
  if (!last.valid || !(last.key == key)) {
    last = {key, headers_crc(info, udp_payload_bytes), true};
  }
  if (info.ipv6()) return last.crc;
  return last.crc ^ kIdHigh[info.ipv4_id >> 8] ^ kIdLow[info.ipv4_id & 0xff] ^
         (info.ipv4_df ? 0 : kDfClearedAfterHeaders);
}

// x^(-8n) for the n of the last call on this thread: packets of one size solve
// with one multiplication instead of one per set bit of n.
uint32_t inverse_zero_bytes_power(uint32_t n) {
  thread_local uint32_t last_n = 0;
  thread_local uint32_t last_power = crc_math::kOne;
  if (n != last_n) {
    last_power = crc_math::undo_zero_bytes(crc_math::kOne, n);
    last_n = n;
  }
  return last_power;
}

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
  if (!icrc_covers(udp_payload_bytes)) [[unlikely]] return;  // finish() says nullopt
  // The BTH by table, a byte at a time: twelve bytes cost the CRC library's call
  // more than its work. Byte 4 (FECN, BECN, reserved) counts as ones (A17.3.3).
  uint32_t r = ~headers_register(info, udp_payload_bytes);  // the raw register
  for (size_t i = 0; i < kBthBytes; ++i)
    r = crc_math::feed_byte(r, i == 4 ? uint8_t(0xff) : bth[i]);
  crc_ = ~r;
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

// crc(ID = x, DF = d) = crc(ID = g, DF = 1) ^ [reg(x ^ g) ^ (d ? 0 : reg(DF))] * x^(8K),
// with g the guess, K the bytes after the ID and reg() the register a change leaves
// from a zero register (the affine parts of CRC-32 cancel between equal-length
// messages, and the IPv4 header checksum that the ID would change is masked to
// ones). So one CRC pass with ID g, one multiplication by x^(-8K) and a table
// inversion find x.
std::optional<SolvedIpv4> solve_icrc_ipv4(IpUdpInfo info, std::span<const uint8_t> udp_payload,
                                          uint16_t likely_id) {
  if (!icrc_covers(udp_payload.size())) return std::nullopt;
  if (info.ipv6()) {  // nothing unknown: the flow label is masked
    if (!check_icrc(info, udp_payload)) return std::nullopt;
    return SolvedIpv4{info.ipv4_id, info.ipv4_df};
  }
  info.ipv4_id = likely_id;
  info.ipv4_df = true;
  const uint32_t difference = stored_icrc(udp_payload) ^ compute_icrc(info, udp_payload);
  if (difference == 0) return SolvedIpv4{likely_id, true};

  const size_t icrc_input_bytes = kLrhOnesBytes + kIpv4HeaderBytes + kUdpHeaderBytes +
                                  udp_payload.size() - kIcrcBytes;
  const uint32_t bytes_after_id = uint32_t(icrc_input_bytes - (kIpv4IdAt + 2));
  const uint32_t at_id = crc_math::multiply(difference, inverse_zero_bytes_power(bytes_after_id));
  if (auto delta = crc_math::two_bytes_of_register(at_id))
    return SolvedIpv4{uint16_t(*delta ^ likely_id), true};
  if (auto delta = crc_math::two_bytes_of_register(at_id ^ kDfClearedAtId))
    return SolvedIpv4{uint16_t(*delta ^ likely_id), false};
  return std::nullopt;
}

}  // namespace softrdma::wire
