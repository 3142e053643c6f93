#include "wire/iwarp/ddp_rdmap.h"

namespace softrdma::wire::iwarp {

namespace {

// The control half-word (RFC 5041 §5.1, RFC 5040 §4.1): T L rsvd(4) DV(2) RV(2)
// rsvd(2) opcode(4).
constexpr uint16_t kTagged = 0x8000, kLast = 0x4000;
constexpr int kDdpVersionShift = 8, kRdmapVersionShift = 6;

uint32_t load32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
uint64_t load64(const uint8_t* p) { return uint64_t(load32(p)) << 32 | load32(p + 4); }
void store32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}
void store64(uint8_t* p, uint64_t v) {
  store32(p, uint32_t(v >> 32));
  store32(p + 4, uint32_t(v));
}

}  // namespace

DdpParse parse_ddp(std::span<const uint8_t> ulpdu, DdpHeader& header, size_t& header_bytes) {
  if (ulpdu.size() < 2) return DdpParse::kTooShort;
  const uint8_t* p = ulpdu.data();
  const uint16_t control = uint16_t(p[0] << 8 | p[1]);
  if (((control >> kDdpVersionShift) & 3) != kDdpVersion) return DdpParse::kBadDdpVersion;
  if (((control >> kRdmapVersionShift) & 3) != kRdmapVersion) return DdpParse::kBadRdmapVersion;
  const uint8_t opcode = control & 0xf;
  if (opcode > uint8_t(RdmapOpcode::kTerminate)) return DdpParse::kBadOpcode;
  const bool tagged = (control & kTagged) != 0;
  header = DdpHeader{};
  header.opcode = RdmapOpcode(opcode);
  if (tagged != is_tagged(header.opcode)) return DdpParse::kBadOpcode;
  header.last = (control & kLast) != 0;
  header_bytes = tagged ? kTaggedHeaderBytes : kUntaggedHeaderBytes;
  if (ulpdu.size() < header_bytes) return DdpParse::kTooShort;
  if (tagged) {
    header.stag = load32(p + 2);
    header.offset = load64(p + 6);
  } else {
    header.invalidate_stag = load32(p + 2);
    header.queue = load32(p + 6);
    header.msn = load32(p + 10);
    header.message_offset = load32(p + 14);
  }
  return DdpParse::kDone;
}

size_t write_ddp(const DdpHeader& header, std::span<uint8_t> out) {
  const bool tagged = is_tagged(header.opcode);
  const size_t bytes = tagged ? kTaggedHeaderBytes : kUntaggedHeaderBytes;
  if (out.size() < bytes) return 0;
  uint8_t* p = out.data();
  const uint16_t control = uint16_t((tagged ? kTagged : 0) | (header.last ? kLast : 0) |
                                    kDdpVersion << kDdpVersionShift |
                                    kRdmapVersion << kRdmapVersionShift |
                                    uint8_t(header.opcode));
  p[0] = uint8_t(control >> 8);
  p[1] = uint8_t(control);
  if (tagged) {
    store32(p + 2, header.stag);
    store64(p + 6, header.offset);
  } else {
    store32(p + 2, header.invalidate_stag);
    store32(p + 6, header.queue);
    store32(p + 10, header.msn);
    store32(p + 14, header.message_offset);
  }
  return bytes;
}

bool parse_read_request(std::span<const uint8_t> payload, ReadRequest& request) {
  if (payload.size() < kReadRequestBytes) return false;
  const uint8_t* p = payload.data();
  request = ReadRequest{load32(p), load64(p + 4), load32(p + 12), load32(p + 16),
                        load64(p + 20)};
  return true;
}

void write_read_request(const ReadRequest& request,
                        std::span<uint8_t, kReadRequestBytes> out) {
  uint8_t* p = out.data();
  store32(p, request.sink_stag);
  store64(p + 4, request.sink_offset);
  store32(p + 12, request.size);
  store32(p + 16, request.source_stag);
  store64(p + 20, request.source_offset);
}

// Layer(4) EType(4) ErrCode(8) M D R reserved(13): M (a DDP segment length
// follows) is never set by softrdma, which sends no marker-framed copy.
bool parse_terminate(std::span<const uint8_t> payload, Terminate& terminate) {
  if (payload.size() < kTerminateControlBytes) return false;
  const uint32_t word = load32(payload.data());
  terminate = Terminate{};
  terminate.layer = TerminateLayer((word >> 28) & 0xf);
  terminate.error_type = uint8_t((word >> 24) & 0xf);
  terminate.error_code = uint8_t(word >> 16);
  terminate.has_ddp_header = (word & 0x4000) != 0;
  terminate.has_rdmap_header = (word & 0x2000) != 0;
  return uint8_t(terminate.layer) <= uint8_t(TerminateLayer::kMpa);
}

void write_terminate(const Terminate& terminate,
                     std::span<uint8_t, kTerminateControlBytes> out) {
  const uint32_t word = uint32_t(uint8_t(terminate.layer) & 0xf) << 28 |
                        uint32_t(terminate.error_type & 0xf) << 24 |
                        uint32_t(terminate.error_code) << 16 |
                        (terminate.has_ddp_header ? 0x4000u : 0) |
                        (terminate.has_rdmap_header ? 0x2000u : 0);
  store32(out.data(), word);
}

}  // namespace softrdma::wire::iwarp
