// RDMAP's opcode table (RFC 5040 §4.1 Figure 4, "RDMA Usage of DDP Fields"), as
// IBA's is (wire/opcodes.h, STYLE.md): for each opcode, which headers of
// wire/iwarp/fields.h its DDP segments carry and at what offset, the buffer model
// (tagged or untagged, RFC 5041 §4) and the untagged queue it uses (RFC 5040
// §5.1). Parsing and building (ddp_rdmap.cc) read this table; no opcode if-chains.
// Opcodes of RFC 7306 (immediate data, atomics) are not in it: softrdma does not
// offer them over iWARP (siw does not either), so they parse as unknown.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "wire/iwarp/fields.h"

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
inline constexpr size_t kNumRdmapOpcodes = 16;  // RFC 5040 §4.1: a 4-bit field

// RFC 5040 §5.1: the untagged queues.
inline constexpr uint32_t kQueueSend = 0, kQueueReadRequest = 1, kQueueTerminate = 2;
inline constexpr uint32_t kNoQueue = ~0u;  // a tagged message's

using HeaderSet = uint16_t;
constexpr HeaderSet header_bit(Header h) { return HeaderSet(1u << unsigned(h)); }

struct RdmapOpInfo {
  std::string_view name;  // empty: not an opcode softrdma accepts
  HeaderSet headers = 0;
  bool tagged = false;
  uint32_t queue = kNoQueue;
  uint8_t ddp_bytes = 0;     // control and buffer-model header: the DDP header
  uint8_t header_bytes = 0;  // and RDMAP's own header after it (READ request, Terminate)
  std::array<uint8_t, kNumHeaders> offset{};

  constexpr bool valid() const { return !name.empty(); }
  constexpr bool has(Header h) const { return (headers & header_bit(h)) != 0; }
  constexpr size_t at(Header h) const { return offset[size_t(h)]; }
};

namespace detail {

struct RdmapShape {
  RdmapOpcode opcode;
  std::string_view name;
  bool tagged;
  uint32_t queue;
  HeaderSet rdmap;  // RDMAP's header after DDP's, if any
};

// RFC 5040 §4.1 Figure 4.
inline constexpr std::array<RdmapShape, 8> kShapes = {{
    {RdmapOpcode::kWrite, "RDMA_WRITE", true, kNoQueue, 0},
    {RdmapOpcode::kReadRequest, "RDMA_READ_REQUEST", false, kQueueReadRequest,
     header_bit(Header::kReadRequest)},
    {RdmapOpcode::kReadResponse, "RDMA_READ_RESPONSE", true, kNoQueue, 0},
    {RdmapOpcode::kSend, "SEND", false, kQueueSend, 0},
    {RdmapOpcode::kSendInvalidate, "SEND_WITH_INVALIDATE", false, kQueueSend, 0},
    {RdmapOpcode::kSendSolicited, "SEND_WITH_SE", false, kQueueSend, 0},
    {RdmapOpcode::kSendSolicitedInvalidate, "SEND_WITH_SE_AND_INVALIDATE", false, kQueueSend, 0},
    {RdmapOpcode::kTerminate, "TERMINATE", false, kQueueTerminate,
     header_bit(Header::kTerminate)},
}};

constexpr RdmapOpInfo make_info(const RdmapShape& s) {
  RdmapOpInfo info;
  info.name = s.name;
  info.tagged = s.tagged;
  info.queue = s.queue;
  const Header model = s.tagged ? Header::kTagged : Header::kUntagged;
  info.headers = HeaderSet(header_bit(Header::kControl) | header_bit(model) | s.rdmap);
  uint8_t at = 0;
  for (Header h : {Header::kControl, model, Header::kReadRequest, Header::kTerminate}) {
    if (!info.has(h)) continue;
    info.offset[size_t(h)] = at;
    at = uint8_t(at + header_bytes(h));
    if (h == model) info.ddp_bytes = at;
  }
  info.header_bytes = at;
  return info;
}

constexpr std::array<RdmapOpInfo, kNumRdmapOpcodes> make_table() {
  std::array<RdmapOpInfo, kNumRdmapOpcodes> table{};
  for (const RdmapShape& s : kShapes) table[size_t(s.opcode)] = make_info(s);
  return table;
}

}  // namespace detail

inline constexpr std::array<RdmapOpInfo, kNumRdmapOpcodes> kRdmapOpcodes = detail::make_table();

constexpr const RdmapOpInfo& rdmap_info(RdmapOpcode op) {
  return kRdmapOpcodes[size_t(op) & (kNumRdmapOpcodes - 1)];
}

// RFC 5041 §5.1: a tagged header is 14 bytes, an untagged one 18.
inline constexpr size_t kTaggedHeaderBytes = rdmap_info(RdmapOpcode::kWrite).ddp_bytes;
inline constexpr size_t kUntaggedHeaderBytes = rdmap_info(RdmapOpcode::kSend).ddp_bytes;
inline constexpr size_t kReadRequestBytes = header_bytes(Header::kReadRequest);
inline constexpr size_t kTerminateControlBytes = header_bytes(Header::kTerminate);
static_assert(kTaggedHeaderBytes == 14 && kUntaggedHeaderBytes == 18);
static_assert(rdmap_info(RdmapOpcode::kReadRequest).at(Header::kReadRequest) == 18);
static_assert(rdmap_info(RdmapOpcode::kReadRequest).header_bytes == 18 + 28);
static_assert(rdmap_info(RdmapOpcode::kTerminate).at(Header::kTerminate) == 18);
static_assert(rdmap_info(RdmapOpcode::kReadResponse).at(Header::kTagged) == 2);
static_assert(!kRdmapOpcodes[8].valid() && !kRdmapOpcodes[15].valid());

constexpr bool is_tagged(RdmapOpcode op) { return rdmap_info(op).tagged; }

}  // namespace softrdma::wire::iwarp
