// Header fields as data, not as hand-written accessors (STYLE.md): each field is
// (header, byte offset in that header, width in bytes, bit shift, bit count), all
// big-endian as IBA 9.2 lays them out. PacketView::get/set read and write them.
// The same machinery serves every header family of the project: `HeaderId` is
// the family's header enum (IBA's `Header` below; iWARP's in wire/iwarp/fields.h),
// load_field/store_field read and write a field of a header that starts at a
// pointer, and fields_tile() is the compile-time check that a header's fields
// cover each of its bits exactly once.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "wire/opcodes.h"

namespace softrdma::wire {

template <typename HeaderId>
struct BasicFieldSpec {
  HeaderId header;
  uint8_t offset;  // within the header
  uint8_t bytes;   // 1..8, big-endian
  uint8_t shift;   // of the field's least significant bit within those bytes
  uint8_t bits;    // width of the field

  constexpr uint64_t mask() const { return bits >= 64 ? ~0ull : ((1ull << bits) - 1); }
};
using FieldSpec = BasicFieldSpec<Header>;

// The field `f` of the header whose first byte is `header`.
template <typename HeaderId>
constexpr uint64_t load_field(const uint8_t* header, const BasicFieldSpec<HeaderId>& f) {
  const uint8_t* p = header + f.offset;
  uint64_t v = 0;
  for (uint8_t i = 0; i < f.bytes; ++i) v = (v << 8) | p[i];
  return (v >> f.shift) & f.mask();
}
// Writes `value` (its low f.bits bits) into the field, leaving the other bits of
// its bytes as they were.
template <typename HeaderId>
constexpr void store_field(uint8_t* header, const BasicFieldSpec<HeaderId>& f, uint64_t value) {
  uint8_t* p = header + f.offset;
  uint64_t v = 0;
  for (uint8_t i = 0; i < f.bytes; ++i) v = (v << 8) | p[i];
  const uint64_t m = f.mask() << f.shift;
  v = (v & ~m) | ((value << f.shift) & m);
  for (int i = f.bytes - 1; i >= 0; --i) {
    p[i] = uint8_t(v);
    v >>= 8;
  }
}

namespace detail {
// True when `fields` all belong to header `h`, lie inside its `header_bytes`
// (at most 32) and cover each of its bits exactly once.
template <typename HeaderId>
constexpr bool fields_tile(std::span<const BasicFieldSpec<HeaderId>> fields, HeaderId h,
                           size_t header_bytes) {
  const size_t header_bits = header_bytes * 8u;
  std::array<bool, 8 * 32> seen{};
  if (header_bits > seen.size()) return false;
  for (const BasicFieldSpec<HeaderId>& f : fields) {
    if (f.header != h || f.bytes < 1 || f.bytes > 8) return false;
    if (f.shift + f.bits > f.bytes * 8) return false;
    const size_t last_bit_of_field = (f.offset + f.bytes) * 8u;  // bit just after
    if (last_bit_of_field > header_bits) return false;
    for (size_t b = f.shift; b < size_t(f.shift) + f.bits; ++b) {
      const size_t bit = last_bit_of_field - 1 - b;  // big-endian bit index
      if (seen[bit]) return false;
      seen[bit] = true;
    }
  }
  for (size_t bit = 0; bit < header_bits; ++bit)
    if (!seen[bit]) return false;
  return true;
}
}  // namespace detail

// IBA 9.2 Base Transport Header.
namespace bth {
inline constexpr FieldSpec kOpcode{Header::kBth, 0, 1, 0, 8};
inline constexpr FieldSpec kSolicited{Header::kBth, 1, 1, 7, 1};
inline constexpr FieldSpec kMigReq{Header::kBth, 1, 1, 6, 1};
inline constexpr FieldSpec kPadCount{Header::kBth, 1, 1, 4, 2};
inline constexpr FieldSpec kTver{Header::kBth, 1, 1, 0, 4};
inline constexpr FieldSpec kPkey{Header::kBth, 2, 2, 0, 16};
// RoCEv2 (Annex A17.3.5): byte 4 carries FECN/BECN; ICRC covers it as ones.
inline constexpr FieldSpec kFecn{Header::kBth, 4, 1, 7, 1};
inline constexpr FieldSpec kBecn{Header::kBth, 4, 1, 6, 1};
inline constexpr FieldSpec kReserved4{Header::kBth, 4, 1, 0, 6};  // IBA 9.2: Resv8a
inline constexpr FieldSpec kDestQp{Header::kBth, 5, 3, 0, 24};
inline constexpr FieldSpec kAckReq{Header::kBth, 8, 1, 7, 1};
inline constexpr FieldSpec kReserved8{Header::kBth, 8, 1, 0, 7};  // IBA 9.2: Resv7
inline constexpr FieldSpec kPsn{Header::kBth, 9, 3, 0, 24};
}  // namespace bth

// IBA 9.3.3 RDMA Extended Transport Header.
namespace reth {
inline constexpr FieldSpec kVa{Header::kReth, 0, 8, 0, 64};
inline constexpr FieldSpec kRkey{Header::kReth, 8, 4, 0, 32};
inline constexpr FieldSpec kDmaLength{Header::kReth, 12, 4, 0, 32};
}  // namespace reth

// IBA 9.3.4 Atomic Extended Transport Header.
namespace atomic_eth {
inline constexpr FieldSpec kVa{Header::kAtomicEth, 0, 8, 0, 64};
inline constexpr FieldSpec kRkey{Header::kAtomicEth, 8, 4, 0, 32};
inline constexpr FieldSpec kSwapAdd{Header::kAtomicEth, 12, 8, 0, 64};
inline constexpr FieldSpec kCompare{Header::kAtomicEth, 20, 8, 0, 64};
}  // namespace atomic_eth

// IBA 9.3.5 ACK Extended Transport Header.
namespace aeth {
inline constexpr FieldSpec kSyndrome{Header::kAeth, 0, 1, 0, 8};
inline constexpr FieldSpec kMsn{Header::kAeth, 1, 3, 0, 24};
}  // namespace aeth

// IBA 9.5.3 Atomic ACK Extended Transport Header.
namespace atomic_ack_eth {
inline constexpr FieldSpec kOriginalData{Header::kAtomicAckEth, 0, 8, 0, 64};
}  // namespace atomic_ack_eth

// IBA 9.3.2 Datagram Extended Transport Header.
namespace deth {
inline constexpr FieldSpec kQkey{Header::kDeth, 0, 4, 0, 32};
inline constexpr FieldSpec kReserved{Header::kDeth, 4, 1, 0, 8};
inline constexpr FieldSpec kSrcQp{Header::kDeth, 5, 3, 0, 24};
}  // namespace deth

// IBA 9.3.1 Reliable Datagram Extended Transport Header (RD is not served; the
// fields exist so that every header of the table is fully described).
namespace rdeth {
inline constexpr FieldSpec kReserved{Header::kRdeth, 0, 1, 0, 8};
inline constexpr FieldSpec kEeContext{Header::kRdeth, 1, 3, 0, 24};
}  // namespace rdeth

// IBA Annex A14 (XRC): the XRC Extended Transport Header: the XRC SRQ a request is for.
namespace xrceth {
inline constexpr FieldSpec kReserved{Header::kXrceth, 0, 1, 0, 8};
inline constexpr FieldSpec kSrqn{Header::kXrceth, 1, 3, 0, 24};
}  // namespace xrceth

namespace immdt {
inline constexpr FieldSpec kImmediate{Header::kImmDt, 0, 4, 0, 32};
}
namespace ieth {
inline constexpr FieldSpec kRkey{Header::kIeth, 0, 4, 0, 32};
}

// Every field of each header, reserved bits included, in wire order: together they
// cover each header bit exactly once (checked below), so that copying them all from
// one packet to another reproduces the headers byte for byte.
namespace detail {
inline constexpr std::array kBthFields = {
    bth::kOpcode, bth::kSolicited, bth::kMigReq, bth::kPadCount, bth::kTver,
    bth::kPkey,   bth::kFecn,      bth::kBecn,   bth::kReserved4, bth::kDestQp,
    bth::kAckReq, bth::kReserved8, bth::kPsn};
inline constexpr std::array kRdethFields = {rdeth::kReserved, rdeth::kEeContext};
inline constexpr std::array kDethFields = {deth::kQkey, deth::kReserved, deth::kSrcQp};
inline constexpr std::array kXrcethFields = {xrceth::kReserved, xrceth::kSrqn};
inline constexpr std::array kRethFields = {reth::kVa, reth::kRkey, reth::kDmaLength};
inline constexpr std::array kAtomicEthFields = {atomic_eth::kVa, atomic_eth::kRkey,
                                                atomic_eth::kSwapAdd, atomic_eth::kCompare};
inline constexpr std::array kAethFields = {aeth::kSyndrome, aeth::kMsn};
inline constexpr std::array kAtomicAckEthFields = {atomic_ack_eth::kOriginalData};
inline constexpr std::array kImmDtFields = {immdt::kImmediate};
inline constexpr std::array kIethFields = {ieth::kRkey};
}  // namespace detail

constexpr std::span<const FieldSpec> header_fields(Header h) {
  switch (h) {
    case Header::kBth: return detail::kBthFields;
    case Header::kRdeth: return detail::kRdethFields;
    case Header::kDeth: return detail::kDethFields;
    case Header::kXrceth: return detail::kXrcethFields;
    case Header::kReth: return detail::kRethFields;
    case Header::kAtomicEth: return detail::kAtomicEthFields;
    case Header::kAeth: return detail::kAethFields;
    case Header::kAtomicAckEth: return detail::kAtomicAckEthFields;
    case Header::kImmDt: return detail::kImmDtFields;
    case Header::kIeth: return detail::kIethFields;
    case Header::kCount: break;
  }
  return {};
}

namespace detail {
constexpr bool fields_tile_header(Header h) {
  return fields_tile(header_fields(h), h, kHeaderBytes[size_t(h)]);
}
constexpr bool all_headers_tiled() {
  for (size_t h = 0; h < kNumHeaders; ++h)
    if (!fields_tile_header(Header(h))) return false;
  return true;
}
static_assert(all_headers_tiled(), "a header's FieldSpecs leave gaps or overlap");
}  // namespace detail

// IBA 9.7.5.1.1 Table 42: AETH syndrome = type (bits 7..5) | value (bits 4..0).
namespace syndrome {
inline constexpr uint8_t kTypeMask = 0xe0;
inline constexpr uint8_t kAck = 0x00;      // value: credit count (31 = no credit info)
inline constexpr uint8_t kRnrNak = 0x20;   // value: min RNR timer code
inline constexpr uint8_t kNak = 0x60;      // value: NAK code below
inline constexpr uint8_t kNakPsnSequence = 0;
inline constexpr uint8_t kNakInvalidRequest = 1;
inline constexpr uint8_t kNakRemoteAccess = 2;
inline constexpr uint8_t kNakRemoteOperational = 3;
inline constexpr uint8_t kNakInvalidRdRequest = 4;
inline constexpr uint8_t kNoCredits = 0x1f;  // "invalid credit count": not flow-controlled

constexpr uint8_t type(uint8_t s) { return s & kTypeMask; }
constexpr uint8_t value(uint8_t s) { return s & 0x1f; }
constexpr uint8_t ack() { return kAck | kNoCredits; }
constexpr uint8_t rnr_nak(uint8_t timer) { return uint8_t(kRnrNak | (timer & 0x1f)); }
constexpr uint8_t nak(uint8_t code) { return uint8_t(kNak | (code & 0x1f)); }
}  // namespace syndrome

// IBA 9.7.5.2.8 Table 45: RNR NAK timer code -> microseconds.
inline constexpr uint32_t kRnrTimerMicros[32] = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,    320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240,  15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

}  // namespace softrdma::wire
