#include "wire/iwarp/mpa.h"

#include <algorithm>
#include <cstring>

#include "wire/crc32.h"
#include "wire/iwarp/fields.h"
#include "wire/iwarp/opcodes.h"

namespace softrdma::wire::iwarp {

static_assert(kMpaStartHeaderBytes == header_bytes(Header::kMpaStart));
static_assert(kMpaEnhancedBytes == header_bytes(Header::kMpaEnhanced));
static_assert(kFpduHeaderBytes == header_bytes(Header::kFpdu));
static_assert(kMpaMaxIrdOrd == mpa_enhanced::kIrd.mask());

namespace {

// RFC 6581 §5: the IRD/ORD word, first in a revision 2 frame's private data.
MpaEnhanced parse_enhanced(const uint8_t* p) {
  MpaEnhanced e;
  e.peer_to_peer = load_field(p, mpa_enhanced::kPeerToPeer) != 0;
  e.rtr_send = load_field(p, mpa_enhanced::kRtrSend) != 0;
  e.rtr_write = load_field(p, mpa_enhanced::kRtrWrite) != 0;
  e.rtr_read = load_field(p, mpa_enhanced::kRtrRead) != 0;
  e.ird = uint16_t(load_field(p, mpa_enhanced::kIrd));
  e.ord = uint16_t(load_field(p, mpa_enhanced::kOrd));
  return e;
}

void write_enhanced(const MpaEnhanced& e, uint8_t* p) {
  store_field(p, mpa_enhanced::kPeerToPeer, e.peer_to_peer);
  store_field(p, mpa_enhanced::kRtrSend, e.rtr_send);
  store_field(p, mpa_enhanced::kIrd, e.ird);
  store_field(p, mpa_enhanced::kRtrWrite, e.rtr_write);
  store_field(p, mpa_enhanced::kRtrRead, e.rtr_read);
  store_field(p, mpa_enhanced::kOrd, e.ord);
}

}  // namespace

MpaParse parse_mpa_start(std::span<const uint8_t> bytes, bool reply, MpaStart& frame,
                         size_t& used) {
  const size_t key_bytes = std::min(bytes.size(), kMpaKeyBytes);
  const char* key = reply ? kMpaReplyKey : kMpaRequestKey;
  // A wrong key is known from its first wrong byte: no need to wait for the rest.
  // (Nothing received yet is no byte to compare: memcmp's pointers must be valid.)
  if (key_bytes != 0 && std::memcmp(bytes.data(), key, key_bytes) != 0) return MpaParse::kBadKey;
  if (bytes.size() < kMpaStartHeaderBytes) return MpaParse::kNeedMore;
  const uint8_t* p = bytes.data();
  const uint8_t revision = uint8_t(load_field(p, mpa_start::kRevision));
  const size_t pd_length = load_field(p, mpa_start::kPrivateDataLength);
  if (revision != 1 && revision != 2) return MpaParse::kBadRevision;
  if (pd_length > kMpaMaxPrivateData) return MpaParse::kTooLong;
  if (bytes.size() < kMpaStartHeaderBytes + pd_length) return MpaParse::kNeedMore;
  frame = MpaStart{};
  frame.reply = reply;
  frame.markers = load_field(p, mpa_start::kMarkers) != 0;
  frame.crc = load_field(p, mpa_start::kCrc) != 0;
  frame.reject = load_field(p, mpa_start::kReject) != 0;
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
  uint8_t* p = out.data();
  std::memcpy(p, frame.reply ? kMpaReplyKey : kMpaRequestKey, kMpaKeyBytes);
  p[kMpaKeyBytes] = 0;  // M C R and the reserved bits
  store_field(p, mpa_start::kMarkers, frame.markers);
  store_field(p, mpa_start::kCrc, frame.crc);
  store_field(p, mpa_start::kReject, frame.reject);
  store_field(p, mpa_start::kRevision, frame.revision);
  store_field(p, mpa_start::kPrivateDataLength, pd_length);
  uint8_t* data = p + kMpaStartHeaderBytes;
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
  store_field(out.data(), fpdu::kUlpduLength, ulpdu_length);
  const size_t covered = kFpduHeaderBytes + ulpdu_length + fpdu_pad(ulpdu_length);
  std::memset(out.data() + kFpduHeaderBytes + ulpdu_length, 0, fpdu_pad(ulpdu_length));
  const uint32_t crc = with_crc ? crc32c_update(0, out.first(covered)) : 0;
  for (size_t i = 0; i < kFpduCrcBytes; ++i) out[covered + i] = uint8_t(crc >> (8 * i));
}

FpduParse parse_fpdu(std::span<const uint8_t> bytes, bool check_crc,
                     std::span<const uint8_t>& ulpdu, size_t& used) {
  constexpr size_t kSmallestDdpHeader = kTaggedHeaderBytes;  // RFC 5041 §5.1
  if (bytes.size() < kFpduHeaderBytes) return FpduParse::kNeedMore;
  const size_t length = load_field(bytes.data(), fpdu::kUlpduLength);
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
