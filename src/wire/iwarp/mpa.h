// MPA, Marker PDU Aligned framing (RFC 5044, with RFC 6581's enhanced connection
// set-up): what turns a TCP connection into an iWARP one, and then frames each
// DDP segment (docs/decisions/protocol-families.md). Pure byte code: frames are
// parsed from and written into caller's buffers, nothing is allocated.
//
// Start frames (RFC 5044 §7.1): a 16-byte key ("MPA ID Req Frame" from the
// initiator, "MPA ID Rep Frame" back), a flags byte (M: markers, C: CRC,
// R: rejected), the revision (1, or 2 with RFC 6581's IRD/ORD data first in the
// private data), PD_Length, then at most 512 bytes of private data.
// FPDUs (§4): ULPDU_Length (16 bits), the ULPDU (a DDP segment), zero padding to
// a multiple of 4, then the CRC-32C of all of that (§6.4, least significant byte
// first; sent even when not negotiated, as zeros, which the receiver then does
// not check). softrdma never
// uses markers and refuses a peer that requires them (as Linux's siw does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace softrdma::wire::iwarp {

// The field tables of these headers: wire/iwarp/fields.h (kMpaStart, kMpaEnhanced,
// kFpdu).
inline constexpr size_t kMpaKeyBytes = 16;
inline constexpr char kMpaRequestKey[] = "MPA ID Req Frame";
inline constexpr char kMpaReplyKey[] = "MPA ID Rep Frame";
inline constexpr size_t kMpaStartHeaderBytes = kMpaKeyBytes + 4;  // key, flags, rev, PD_Length
inline constexpr size_t kMpaMaxPrivateData = 512;                  // RFC 5044 §7.1
inline constexpr size_t kMpaEnhancedBytes = 4;                     // RFC 6581 §5: IRD, ORD
inline constexpr uint16_t kMpaMaxIrdOrd = 0x3fff;                  // 14 bits each

// RFC 6581 §5: how the two peers agree the connection is in RDMA mode (the
// initiator's first FPDU, a "ready to receive" message) and what each may read.
struct MpaEnhanced {
  bool peer_to_peer = false;  // the initiator sends an RTR message first
  bool rtr_send = false;      // a zero-length SEND may be that message ...
  bool rtr_write = false;     // ... a zero-length RDMA WRITE ...
  bool rtr_read = false;      // ... a zero-length RDMA READ request
  uint16_t ird = 0;           // incoming RDMA READs it takes at once
  uint16_t ord = 0;           // outgoing RDMA READs it issues at once
};

struct MpaStart {
  bool reply = false;  // the responder's ("Rep" key)
  bool markers = false;
  bool crc = false;
  bool reject = false;
  uint8_t revision = 1;
  std::optional<MpaEnhanced> enhanced;  // revision 2 only
  std::span<const uint8_t> private_data;  // the ULP's (after the enhanced data)
};

enum class MpaParse : uint8_t {
  kDone,
  kNeedMore,      // the frame is not whole yet
  kBadKey,        // not the key expected: not an MPA peer
  kBadRevision,   // not 1 or 2
  kTooLong,       // PD_Length above 512
  kBadEnhanced,   // revision 2 without room for its IRD/ORD
};

// Parses a start frame of the kind `reply` at the front of `bytes`; on kDone,
// `frame` (whose private_data points into `bytes`) and `used`, its length.
MpaParse parse_mpa_start(std::span<const uint8_t> bytes, bool reply, MpaStart& frame,
                         size_t& used);
// Writes `frame` into `out`; its length, or 0 when it does not fit or its private
// data is longer than 512 bytes (with the enhanced data).
size_t write_mpa_start(const MpaStart& frame, std::span<uint8_t> out);

// FPDU framing.
inline constexpr size_t kFpduHeaderBytes = 2;
inline constexpr size_t kFpduCrcBytes = 4;
constexpr size_t fpdu_pad(size_t ulpdu_length) { return (4 - (2 + ulpdu_length) % 4) % 4; }
constexpr size_t fpdu_bytes(size_t ulpdu_length) {
  return kFpduHeaderBytes + ulpdu_length + fpdu_pad(ulpdu_length) + kFpduCrcBytes;
}
// The length field and padding around a ULPDU already at out[2..]; then the CRC
// (zeros when `with_crc` is false). `out` holds fpdu_bytes(ulpdu_length).
void seal_fpdu(std::span<uint8_t> out, size_t ulpdu_length, bool with_crc);

enum class FpduParse : uint8_t { kDone, kNeedMore, kBadCrc, kTooShort };
// The FPDU at the front of a stream: its ULPDU and its whole length (`used`).
// kTooShort: a length field below the smallest DDP header (RFC 5041 §5: 14).
FpduParse parse_fpdu(std::span<const uint8_t> bytes, bool check_crc,
                     std::span<const uint8_t>& ulpdu, size_t& used);

}  // namespace softrdma::wire::iwarp
