// DDP (RFC 5041 §5) and RDMAP (RFC 5040 §4) headers, as they begin each ULPDU
// that MPA frames (mpa.h). A control half-word — DDP's Tagged and Last flags and
// version, RDMAP's version and opcode — then the buffer model's header:
//   tagged   (RDMA WRITE, READ response): STag, Tagged Offset;
//   untagged (SENDs, READ request, Terminate): RsvdULP (the STag a SEND with
//            Invalidate names), Queue Number, Message Sequence Number, Message
//            Offset; a READ request and a Terminate carry their own header after.
// The fields are data (wire/iwarp/fields.h) and which headers each opcode
// carries is a table (wire/iwarp/opcodes.h); this is the structs the engine
// speaks in, and their parsing and building through those tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/iwarp/opcodes.h"

namespace softrdma::wire::iwarp {

inline constexpr uint8_t kDdpVersion = 1, kRdmapVersion = 1;

struct DdpHeader {
  RdmapOpcode opcode = RdmapOpcode::kSend;
  bool last = true;
  // Tagged.
  uint32_t stag = 0;
  uint64_t offset = 0;  // the Tagged Offset
  // Untagged.
  uint32_t invalidate_stag = 0;  // RsvdULP: SEND with Invalidate's STag
  uint32_t queue = kQueueSend;
  uint32_t msn = 0;
  uint32_t message_offset = 0;
};

enum class DdpParse : uint8_t {
  kDone,
  kTooShort,         // shorter than its header
  kBadDdpVersion,    // RFC 5041 §7.2: a DDP Terminate, version
  kBadRdmapVersion,  // RFC 5040 §7.2: an RDMAP Terminate, version
  kBadOpcode,        // unknown, or tagged where it must be untagged (or back)
};

// The header at the front of `ulpdu`; `header_bytes` is where the payload begins.
DdpParse parse_ddp(std::span<const uint8_t> ulpdu, DdpHeader& header, size_t& header_bytes);
// Writes the header; its length, or 0 when `out` is too short.
size_t write_ddp(const DdpHeader& header, std::span<uint8_t> out);

// RFC 5040 §4.4: what an RDMA READ request asks for.
struct ReadRequest {
  uint32_t sink_stag = 0;
  uint64_t sink_offset = 0;
  uint32_t size = 0;
  uint32_t source_stag = 0;
  uint64_t source_offset = 0;
};
bool parse_read_request(std::span<const uint8_t> payload, ReadRequest& request);
void write_read_request(const ReadRequest& request, std::span<uint8_t, kReadRequestBytes> out);

// RFC 5040 §4.8: a Terminate's control word: which layer found the error, its
// type and code (Linux siw's iwarp.h names the same values).
enum class TerminateLayer : uint8_t { kRdmap = 0, kDdp = 1, kMpa = 2 };
struct Terminate {
  TerminateLayer layer = TerminateLayer::kRdmap;
  uint8_t error_type = 0;  // 4 bits
  uint8_t error_code = 0;
  bool has_ddp_header = false;   // D: the offending DDP header follows
  bool has_rdmap_header = false; // R: the offending RDMAP header follows
};
bool parse_terminate(std::span<const uint8_t> payload, Terminate& terminate);
void write_terminate(const Terminate& terminate,
                     std::span<uint8_t, kTerminateControlBytes> out);

}  // namespace softrdma::wire::iwarp
