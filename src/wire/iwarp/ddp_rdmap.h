// DDP (RFC 5041 §5) and RDMAP (RFC 5040 §4) headers, as they begin each ULPDU
// that MPA frames (mpa.h). A control half-word — DDP's Tagged and Last flags and
// version, RDMAP's version and opcode — then the buffer model's header:
//   tagged   (RDMA WRITE, READ response): STag, Tagged Offset;
//   untagged (SENDs, READ request, Terminate): RsvdULP (the STag a SEND with
//            Invalidate names), Queue Number, Message Sequence Number, Message
//            Offset; a READ request and a Terminate carry their own header after.
// Opcodes of RFC 7306 (immediate data, atomics) are not accepted: softrdma does
// not offer them over iWARP (siw does not either).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace softrdma::wire::iwarp {

enum class RdmapOpcode : uint8_t {
  kWrite = 0,
  kReadRequest = 1,
  kReadResponse = 2,
  kSend = 3,
  kSendInvalidate = 4,
  kSendSolicited = 5,
  kSendSolicitedInvalidate = 6,
  kTerminate = 7,
};

// RFC 5040 §5.1: the untagged queues.
inline constexpr uint32_t kQueueSend = 0, kQueueReadRequest = 1, kQueueTerminate = 2;
inline constexpr uint8_t kDdpVersion = 1, kRdmapVersion = 1;
inline constexpr size_t kTaggedHeaderBytes = 14, kUntaggedHeaderBytes = 18;
inline constexpr size_t kReadRequestBytes = 28;  // after the untagged header
inline constexpr size_t kTerminateControlBytes = 4;

constexpr bool is_tagged(RdmapOpcode op) {
  return op == RdmapOpcode::kWrite || op == RdmapOpcode::kReadResponse;
}

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
