// DDP segments' and RDMAP messages' headers through the field tables
// (wire/iwarp/fields.h) and RDMAP's opcode table (wire/iwarp/opcodes.h): no
// offset is written here.
#include "wire/iwarp/ddp_rdmap.h"

#include <cstring>

namespace softrdma::wire::iwarp {

namespace {

// Reserved bits are sent as zero (RFC 5041 §5.1, RFC 5040 §4.1) and not checked
// on arrival, as the RFCs' "ignored on receive" has it.
void clear(uint8_t* header, Header h) { std::memset(header, 0, header_bytes(h)); }

}  // namespace

// RFC 5041 §7.2 / RFC 5040 §7.2: a version this side does not speak, an opcode it
// does not know, and a buffer model that is not the opcode's are each refused
// with the error the responder's Terminate names (receive.cc).
DdpParse parse_ddp(std::span<const uint8_t> ulpdu, DdpHeader& header, size_t& header_bytes) {
  if (ulpdu.size() < iwarp::header_bytes(Header::kControl)) return DdpParse::kTooShort;
  const uint8_t* p = ulpdu.data();
  if (load_field(p, control::kDdpVersion) != kDdpVersion) return DdpParse::kBadDdpVersion;
  if (load_field(p, control::kRdmapVersion) != kRdmapVersion) return DdpParse::kBadRdmapVersion;
  const RdmapOpcode opcode = RdmapOpcode(load_field(p, control::kOpcode));
  const RdmapOpInfo& info = rdmap_info(opcode);
  if (!info.valid() || (load_field(p, control::kTagged) != 0) != info.tagged)
    return DdpParse::kBadOpcode;
  header = DdpHeader{};
  header.opcode = opcode;
  header.last = load_field(p, control::kLast) != 0;
  header_bytes = info.ddp_bytes;
  if (ulpdu.size() < header_bytes) return DdpParse::kTooShort;
  if (info.tagged) {
    const uint8_t* t = p + info.at(Header::kTagged);
    header.stag = uint32_t(load_field(t, tagged::kStag));
    header.offset = load_field(t, tagged::kOffset);
  } else {
    const uint8_t* u = p + info.at(Header::kUntagged);
    header.invalidate_stag = uint32_t(load_field(u, untagged::kInvalidateStag));
    header.queue = uint32_t(load_field(u, untagged::kQueue));
    header.msn = uint32_t(load_field(u, untagged::kMsn));
    header.message_offset = uint32_t(load_field(u, untagged::kMessageOffset));
  }
  return DdpParse::kDone;
}

size_t write_ddp(const DdpHeader& header, std::span<uint8_t> out) {
  const RdmapOpInfo& info = rdmap_info(header.opcode);
  if (!info.valid() || out.size() < info.ddp_bytes) return 0;
  uint8_t* p = out.data();
  clear(p, Header::kControl);
  store_field(p, control::kTagged, info.tagged);
  store_field(p, control::kLast, header.last);
  store_field(p, control::kDdpVersion, kDdpVersion);
  store_field(p, control::kRdmapVersion, kRdmapVersion);
  store_field(p, control::kOpcode, uint8_t(header.opcode));
  if (info.tagged) {
    uint8_t* t = p + info.at(Header::kTagged);
    store_field(t, tagged::kStag, header.stag);
    store_field(t, tagged::kOffset, header.offset);
  } else {
    uint8_t* u = p + info.at(Header::kUntagged);
    store_field(u, untagged::kInvalidateStag, header.invalidate_stag);
    store_field(u, untagged::kQueue, header.queue);
    store_field(u, untagged::kMsn, header.msn);
    store_field(u, untagged::kMessageOffset, header.message_offset);
  }
  return info.ddp_bytes;
}

bool parse_read_request(std::span<const uint8_t> payload, ReadRequest& request) {
  if (payload.size() < kReadRequestBytes) return false;
  const uint8_t* p = payload.data();
  request = ReadRequest{uint32_t(load_field(p, read_request::kSinkStag)),
                        load_field(p, read_request::kSinkOffset),
                        uint32_t(load_field(p, read_request::kSize)),
                        uint32_t(load_field(p, read_request::kSourceStag)),
                        load_field(p, read_request::kSourceOffset)};
  return true;
}

void write_read_request(const ReadRequest& request,
                        std::span<uint8_t, kReadRequestBytes> out) {
  uint8_t* p = out.data();
  store_field(p, read_request::kSinkStag, request.sink_stag);
  store_field(p, read_request::kSinkOffset, request.sink_offset);
  store_field(p, read_request::kSize, request.size);
  store_field(p, read_request::kSourceStag, request.source_stag);
  store_field(p, read_request::kSourceOffset, request.source_offset);
}

// M (a DDP segment length follows) is never set by softrdma, which sends no
// marker-framed copy, and is ignored on arrival, as the headers D and R announce.
bool parse_terminate(std::span<const uint8_t> payload, Terminate& t) {
  if (payload.size() < kTerminateControlBytes) return false;
  const uint8_t* p = payload.data();
  t = Terminate{};
  t.layer = TerminateLayer(load_field(p, terminate::kLayer));
  t.error_type = uint8_t(load_field(p, terminate::kErrorType));
  t.error_code = uint8_t(load_field(p, terminate::kErrorCode));
  t.has_ddp_header = load_field(p, terminate::kHasDdpHeader) != 0;
  t.has_rdmap_header = load_field(p, terminate::kHasRdmapHeader) != 0;
  return uint8_t(t.layer) <= uint8_t(TerminateLayer::kMpa);
}

void write_terminate(const Terminate& t,
                     std::span<uint8_t, kTerminateControlBytes> out) {
  uint8_t* p = out.data();
  clear(p, Header::kTerminate);
  store_field(p, terminate::kLayer, uint8_t(t.layer));
  store_field(p, terminate::kErrorType, t.error_type);
  store_field(p, terminate::kErrorCode, t.error_code);
  store_field(p, terminate::kHasDdpHeader, t.has_ddp_header);
  store_field(p, terminate::kHasRdmapHeader, t.has_rdmap_header);
}

}  // namespace softrdma::wire::iwarp
