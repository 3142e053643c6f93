// iWARP's headers as data, as IBA's are (wire/fields.h, STYLE.md): every field of
// DDP (RFC 5041), RDMAP (RFC 5040) and MPA (RFC 5044, RFC 6581) is a FieldSpec of
// the header it belongs to, read and written by wire::load_field/store_field, and
// checked at compile time to cover each bit of its header exactly once. Which
// headers each RDMAP message carries, and where, is the table of
// wire/iwarp/opcodes.h. All big-endian (RFC 5041 §5: network byte order), except
// the FPDU's CRC, which is no header field (mpa.cc says why).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "wire/fields.h"

namespace softrdma::wire::iwarp {

enum class Header : uint8_t {
  kControl,      // DDP's control byte, then RDMAP's (RFC 5041 §5.1, RFC 5040 §4.1)
  kTagged,       // the tagged buffer model's STag and Tagged Offset (RFC 5041 §5.2)
  kUntagged,     // the untagged model's RsvdULP, QN, MSN, MO (RFC 5041 §5.3, 5040 §4.2)
  kReadRequest,  // what an RDMA READ request asks for (RFC 5040 §4.4)
  kTerminate,    // a Terminate's control word (RFC 5040 §4.8)
  kFpdu,         // the FPDU's ULPDU_Length (RFC 5044 §4.1)
  kMpaStart,     // a start frame up to its private data (RFC 5044 §7.1)
  kMpaEnhanced,  // RFC 6581 §5's IRD/ORD word, first in the private data
  kCount,
};
inline constexpr size_t kNumHeaders = size_t(Header::kCount);
inline constexpr std::array<uint8_t, kNumHeaders> kHeaderBytes = {2, 12, 16, 28, 4, 2, 20, 4};
constexpr size_t header_bytes(Header h) { return kHeaderBytes[size_t(h)]; }

using FieldSpec = BasicFieldSpec<Header>;

// RFC 5041 §5.1: DDP's control byte T L Rsvd(4) DV(2); RFC 5040 §4.1: RDMAP's
// control byte, the first of DDP's RsvdULP: RV(2) Rsvd(2) Opcode(4).
namespace control {
inline constexpr FieldSpec kTagged{Header::kControl, 0, 1, 7, 1};
inline constexpr FieldSpec kLast{Header::kControl, 0, 1, 6, 1};
inline constexpr FieldSpec kDdpReserved{Header::kControl, 0, 1, 2, 4};
inline constexpr FieldSpec kDdpVersion{Header::kControl, 0, 1, 0, 2};
inline constexpr FieldSpec kRdmapVersion{Header::kControl, 1, 1, 6, 2};
inline constexpr FieldSpec kRdmapReserved{Header::kControl, 1, 1, 4, 2};
inline constexpr FieldSpec kOpcode{Header::kControl, 1, 1, 0, 4};
}  // namespace control

// RFC 5041 §5.2 (RFC 5040 §4.3: the Data Sink STag and Tagged Offset).
namespace tagged {
inline constexpr FieldSpec kStag{Header::kTagged, 0, 4, 0, 32};
inline constexpr FieldSpec kOffset{Header::kTagged, 4, 8, 0, 64};
}  // namespace tagged

// RFC 5041 §5.3; RFC 5040 §4.2: the rest of RsvdULP is the Invalidate STag of a
// SEND with Invalidate (zero otherwise).
namespace untagged {
inline constexpr FieldSpec kInvalidateStag{Header::kUntagged, 0, 4, 0, 32};
inline constexpr FieldSpec kQueue{Header::kUntagged, 4, 4, 0, 32};
inline constexpr FieldSpec kMsn{Header::kUntagged, 8, 4, 0, 32};
inline constexpr FieldSpec kMessageOffset{Header::kUntagged, 12, 4, 0, 32};
}  // namespace untagged

// RFC 5040 §4.4.
namespace read_request {
inline constexpr FieldSpec kSinkStag{Header::kReadRequest, 0, 4, 0, 32};
inline constexpr FieldSpec kSinkOffset{Header::kReadRequest, 4, 8, 0, 64};
inline constexpr FieldSpec kSize{Header::kReadRequest, 12, 4, 0, 32};
inline constexpr FieldSpec kSourceStag{Header::kReadRequest, 16, 4, 0, 32};
inline constexpr FieldSpec kSourceOffset{Header::kReadRequest, 20, 8, 0, 64};
}  // namespace read_request

// RFC 5040 §4.8: Layer(4) EType(4) ErrCode(8), then HdrCt: M (a DDP segment
// length follows), D (the offending DDP header follows), R (its RDMAP header
// follows), and 13 reserved bits.
namespace terminate {
inline constexpr FieldSpec kLayer{Header::kTerminate, 0, 1, 4, 4};
inline constexpr FieldSpec kErrorType{Header::kTerminate, 0, 1, 0, 4};
inline constexpr FieldSpec kErrorCode{Header::kTerminate, 1, 1, 0, 8};
inline constexpr FieldSpec kHasSegmentLength{Header::kTerminate, 2, 1, 7, 1};
inline constexpr FieldSpec kHasDdpHeader{Header::kTerminate, 2, 1, 6, 1};
inline constexpr FieldSpec kHasRdmapHeader{Header::kTerminate, 2, 1, 5, 1};
inline constexpr FieldSpec kReserved{Header::kTerminate, 2, 2, 0, 13};
}  // namespace terminate

// RFC 5044 §4.1.
namespace fpdu {
inline constexpr FieldSpec kUlpduLength{Header::kFpdu, 0, 2, 0, 16};
}

// RFC 5044 §7.1: Key (16 bytes of ASCII: compared as bytes, mpa.cc), M C R
// Res(5), Rev, PD_Length. Linux (siw, cxgb4) takes the first reserved bit as
// its "enhanced" flag: RFC 6581's IRD/ORD word heads the private data.
namespace mpa_start {
inline constexpr FieldSpec kKeyHigh{Header::kMpaStart, 0, 8, 0, 64};
inline constexpr FieldSpec kKeyLow{Header::kMpaStart, 8, 8, 0, 64};
inline constexpr FieldSpec kMarkers{Header::kMpaStart, 16, 1, 7, 1};
inline constexpr FieldSpec kCrc{Header::kMpaStart, 16, 1, 6, 1};
inline constexpr FieldSpec kReject{Header::kMpaStart, 16, 1, 5, 1};
inline constexpr FieldSpec kEnhanced{Header::kMpaStart, 16, 1, 4, 1};
inline constexpr FieldSpec kReserved{Header::kMpaStart, 16, 1, 0, 4};
inline constexpr FieldSpec kRevision{Header::kMpaStart, 17, 1, 0, 8};
inline constexpr FieldSpec kPrivateDataLength{Header::kMpaStart, 18, 2, 0, 16};
}  // namespace mpa_start

// RFC 6581 §5: above the 14-bit IRD, the peer-to-peer bit and "a zero-length
// SEND may be the RTR"; above the 14-bit ORD, "a zero-length WRITE may" and "a
// zero-length READ may" (siw's MPA_V2_* flags are the same bits).
namespace mpa_enhanced {
inline constexpr FieldSpec kPeerToPeer{Header::kMpaEnhanced, 0, 1, 7, 1};
inline constexpr FieldSpec kRtrSend{Header::kMpaEnhanced, 0, 1, 6, 1};
inline constexpr FieldSpec kIrd{Header::kMpaEnhanced, 0, 2, 0, 14};
inline constexpr FieldSpec kRtrWrite{Header::kMpaEnhanced, 2, 1, 7, 1};
inline constexpr FieldSpec kRtrRead{Header::kMpaEnhanced, 2, 1, 6, 1};
inline constexpr FieldSpec kOrd{Header::kMpaEnhanced, 2, 2, 0, 14};
}  // namespace mpa_enhanced

// Every field of each header, reserved bits included, in wire order.
namespace detail {
inline constexpr std::array kControlFields = {
    control::kTagged,        control::kLast,           control::kDdpReserved,
    control::kDdpVersion,    control::kRdmapVersion,   control::kRdmapReserved,
    control::kOpcode};
inline constexpr std::array kTaggedFields = {tagged::kStag, tagged::kOffset};
inline constexpr std::array kUntaggedFields = {untagged::kInvalidateStag, untagged::kQueue,
                                               untagged::kMsn, untagged::kMessageOffset};
inline constexpr std::array kReadRequestFields = {
    read_request::kSinkStag, read_request::kSinkOffset, read_request::kSize,
    read_request::kSourceStag, read_request::kSourceOffset};
inline constexpr std::array kTerminateFields = {
    terminate::kLayer,         terminate::kErrorType,     terminate::kErrorCode,
    terminate::kHasSegmentLength, terminate::kHasDdpHeader, terminate::kHasRdmapHeader,
    terminate::kReserved};
inline constexpr std::array kFpduFields = {fpdu::kUlpduLength};
inline constexpr std::array kMpaStartFields = {
    mpa_start::kKeyHigh, mpa_start::kKeyLow,   mpa_start::kMarkers,  mpa_start::kCrc,
    mpa_start::kReject,  mpa_start::kEnhanced, mpa_start::kReserved, mpa_start::kRevision,
    mpa_start::kPrivateDataLength};
inline constexpr std::array kMpaEnhancedFields = {
    mpa_enhanced::kPeerToPeer, mpa_enhanced::kRtrSend, mpa_enhanced::kIrd,
    mpa_enhanced::kRtrWrite,   mpa_enhanced::kRtrRead, mpa_enhanced::kOrd};
}  // namespace detail

constexpr std::span<const FieldSpec> header_fields(Header h) {
  switch (h) {
    case Header::kControl: return detail::kControlFields;
    case Header::kTagged: return detail::kTaggedFields;
    case Header::kUntagged: return detail::kUntaggedFields;
    case Header::kReadRequest: return detail::kReadRequestFields;
    case Header::kTerminate: return detail::kTerminateFields;
    case Header::kFpdu: return detail::kFpduFields;
    case Header::kMpaStart: return detail::kMpaStartFields;
    case Header::kMpaEnhanced: return detail::kMpaEnhancedFields;
    case Header::kCount: break;
  }
  return {};
}

namespace detail {
constexpr bool all_headers_tiled() {
  for (size_t h = 0; h < kNumHeaders; ++h)
    if (!wire::detail::fields_tile(header_fields(Header(h)), Header(h), kHeaderBytes[h]))
      return false;
  return true;
}
static_assert(all_headers_tiled(), "an iWARP header's FieldSpecs leave gaps or overlap");
}  // namespace detail

}  // namespace softrdma::wire::iwarp
