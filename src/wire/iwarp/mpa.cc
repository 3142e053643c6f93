#include "wire/iwarp/mpa.h"

#include <algorithm>
#include <cstring>

#include "wire/crc32.h"

namespace softrdma::wire::iwarp {

namespace {

// RFC 5044 §7.1: the flags byte (bits 0..2 of the fourth word: M, C, R; the rest
// reserved, sent as zero and not checked).
constexpr uint8_t kFlagMarkers = 0x80, kFlagCrc = 0x40, kFlagReject = 0x20;
// RFC 6581 §5: the two control bits above each 14-bit IRD and ORD.
constexpr uint16_t kPeerToPeer = 0x8000, kRtrSend = 0x4000;  // with IRD
constexpr uint16_t kRtrWrite = 0x8000, kRtrRead = 0x4000;    // with ORD

uint16_t load16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
void store16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

MpaEnhanced parse_enhanced(const uint8_t* p) {
  const uint16_t ird = load16(p), ord = load16(p + 2);
  MpaEnhanced e;
  e.peer_to_peer = (ird & kPeerToPeer) != 0;
  e.rtr_send = (ird & kRtrSend) != 0;
  e.rtr_write = (ord & kRtrWrite) != 0;
  e.rtr_read = (ord & kRtrRead) != 0;
  e.ird = ird & kMpaMaxIrdOrd;
  e.ord = ord & kMpaMaxIrdOrd;
  return e;
}

void write_enhanced(const MpaEnhanced& e, uint8_t* p) {
  store16(p, uint16_t((e.peer_to_peer ? kPeerToPeer : 0) | (e.rtr_send ? kRtrSend : 0) |
                      (e.ird & kMpaMaxIrdOrd)));
  store16(p + 2, uint16_t((e.rtr_write ? kRtrWrite : 0) | (e.rtr_read ? kRtrRead : 0) |
                          (e.ord & kMpaMaxIrdOrd)));
}

}  // namespace

MpaParse parse_mpa_start(std::span<const uint8_t> bytes, bool reply, MpaStart& frame,
                         size_t& used) {
  const size_t key_bytes = std::min(bytes.size(), kMpaKeyBytes);
  const char* key = reply ? kMpaReplyKey : kMpaRequestKey;
  // A wrong key is known from its first wrong byte: no need to wait for the rest.
  if (std::memcmp(bytes.data(), key, key_bytes) != 0) return MpaParse::kBadKey;
  if (bytes.size() < kMpaStartHeaderBytes) return MpaParse::kNeedMore;
  const uint8_t* p = bytes.data() + kMpaKeyBytes;
  const uint8_t revision = p[1];
  const size_t pd_length = load16(p + 2);
  if (revision != 1 && revision != 2) return MpaParse::kBadRevision;
  if (pd_length > kMpaMaxPrivateData) return MpaParse::kTooLong;
  if (bytes.size() < kMpaStartHeaderBytes + pd_length) return MpaParse::kNeedMore;
  frame = MpaStart{};
  frame.reply = reply;
  frame.markers = (p[0] & kFlagMarkers) != 0;
  frame.crc = (p[0] & kFlagCrc) != 0;
  frame.reject = (p[0] & kFlagReject) != 0;
  frame.revision = revision;
  std::span<const uint8_t> data = bytes.subspan(kMpaStartHeaderBytes, pd_length);
  if (revision == 2) {
    if (data.size() < kMpaEnhancedBytes) return MpaParse::kBadEnhanced;
    frame.enhanced = parse_enhanced(data.data());
    data = data.subspan(kMpaEnhancedBytes);
  }
  frame.private_data = data;
  used = kMpaStartHeaderBytes + pd_length;
  return MpaParse::kDone;
}

size_t write_mpa_start(const MpaStart& frame, std::span<uint8_t> out) {
  const bool enhanced = frame.revision == 2;
  const size_t pd_length = (enhanced ? kMpaEnhancedBytes : 0) + frame.private_data.size();
  if (pd_length > kMpaMaxPrivateData || out.size() < kMpaStartHeaderBytes + pd_length) return 0;
  std::memcpy(out.data(), frame.reply ? kMpaReplyKey : kMpaRequestKey, kMpaKeyBytes);
  uint8_t* p = out.data() + kMpaKeyBytes;
  p[0] = uint8_t((frame.markers ? kFlagMarkers : 0) | (frame.crc ? kFlagCrc : 0) |
                 (frame.reject ? kFlagReject : 0));
  p[1] = frame.revision;
  store16(p + 2, uint16_t(pd_length));
  uint8_t* data = p + 4;
  if (enhanced) {
    write_enhanced(frame.enhanced.value_or(MpaEnhanced{}), data);
    data += kMpaEnhancedBytes;
  }
  if (!frame.private_data.empty())
    std::memcpy(data, frame.private_data.data(), frame.private_data.size());
  return kMpaStartHeaderBytes + pd_length;
}

// RFC 5044 §6.4: the CRC covers the length field, the ULPDU and the padding. Its
// bytes go least significant first, as iSCSI's digest (RFC 3385), Linux siw and
// Wireshark's MPA dissector have them: tshark called the network-order CRC bad
// (tests/wire/iwarp_capture_test.cc).
void seal_fpdu(std::span<uint8_t> out, size_t ulpdu_length, bool with_crc) {
  store16(out.data(), uint16_t(ulpdu_length));
  const size_t covered = kFpduHeaderBytes + ulpdu_length + fpdu_pad(ulpdu_length);
  std::memset(out.data() + kFpduHeaderBytes + ulpdu_length, 0, fpdu_pad(ulpdu_length));
  const uint32_t crc = with_crc ? crc32c_update(0, out.first(covered)) : 0;
  for (size_t i = 0; i < kFpduCrcBytes; ++i) out[covered + i] = uint8_t(crc >> (8 * i));
}

FpduParse parse_fpdu(std::span<const uint8_t> bytes, bool check_crc,
                     std::span<const uint8_t>& ulpdu, size_t& used) {
  constexpr size_t kSmallestDdpHeader = 14;  // RFC 5041 §5.1: a tagged one
  if (bytes.size() < kFpduHeaderBytes) return FpduParse::kNeedMore;
  const size_t length = load16(bytes.data());
  if (length < kSmallestDdpHeader) return FpduParse::kTooShort;
  const size_t whole = fpdu_bytes(length);
  if (bytes.size() < whole) return FpduParse::kNeedMore;
  const size_t covered = whole - kFpduCrcBytes;
  if (check_crc) {
    uint32_t sent = 0;
    for (size_t i = 0; i < kFpduCrcBytes; ++i) sent |= uint32_t(bytes[covered + i]) << (8 * i);
    if (crc32c_update(0, bytes.first(covered)) != sent) return FpduParse::kBadCrc;
  }
  ulpdu = bytes.subspan(kFpduHeaderBytes, length);
  used = whole;
  return FpduParse::kDone;
}

}  // namespace softrdma::wire::iwarp
