// The BTH opcode table of the InfiniBand Architecture (IBA Vol 1, 9.2 and
// Table 38/39): which headers each packet carries, at what offset, and what the
// packet means. Parsing, building and validation all read this table; no opcode
// if-chains elsewhere (STYLE.md).
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>
#include <string_view>

namespace softrdma::wire {

// Headers in the order IBA 9.2 places them after the BTH.
enum class Header : uint8_t {
  kBth,
  kRdeth,
  kDeth,
  kXrceth,
  kReth,
  kAtomicEth,
  kAeth,
  kAtomicAckEth,
  kImmDt,
  kIeth,
  kCount,
};
inline constexpr size_t kNumHeaders = static_cast<size_t>(Header::kCount);

inline constexpr std::array<uint8_t, kNumHeaders> kHeaderBytes = {
    12,  // BTH
    4,   // RDETH
    8,   // DETH
    4,   // XRCETH
    16,  // RETH
    28,  // AtomicETH
    4,   // AETH
    8,   // AtomicAckETH
    4,   // ImmDt
    4,   // IETH
};
inline constexpr size_t kBthBytes = 12;
inline constexpr size_t kIcrcBytes = 4;

using HeaderSet = uint16_t;
constexpr HeaderSet header_bit(Header h) { return HeaderSet(1u << static_cast<unsigned>(h)); }

// What a packet means, independent of which headers carry it.
enum OpFlag : uint32_t {
  kOpRequest = 1u << 0,   // sent by a requester
  kOpResponse = 1u << 1,  // sent by a responder (ACK, READ response, ATOMIC ACK)
  kOpFirst = 1u << 2,     // first packet of a message
  kOpMiddle = 1u << 3,
  kOpLast = 1u << 4,      // last packet of a message
  kOpSend = 1u << 5,
  kOpWrite = 1u << 6,
  kOpReadRequest = 1u << 7,
  kOpReadResponse = 1u << 8,
  kOpAtomic = 1u << 9,     // COMPARE_SWAP or FETCH_ADD request
  kOpAck = 1u << 10,       // ACKNOWLEDGE
  kOpAtomicAck = 1u << 11, // ATOMIC ACKNOWLEDGE
  kOpImmediate = 1u << 12,
  kOpInvalidate = 1u << 13,
  kOpPayload = 1u << 14,   // may carry payload bytes
  kOpRc = 1u << 15,
  kOpUc = 1u << 16,
  kOpRd = 1u << 17,
  kOpUd = 1u << 18,
  kOpXrc = 1u << 19,
  kOpCompareSwap = 1u << 20,
  kOpFetchAdd = 1u << 21,
  kOpConsumesRecv = 1u << 22,  // the responder takes a receive WQE at its last packet
  kOpAtomicWrite = 1u << 23,   // RDMA ATOMIC WRITE (IBA 1.5, 9.4.6): 8 bytes stored at once
  kOpSack = 1u << 24,          // softrdma's selective acknowledgement (kRcSack below)
  kOpCnp = 1u << 25,           // RoCEv2 Congestion Notification Packet (op::kCnp)
};
inline constexpr uint32_t kOpOnly = kOpFirst | kOpLast;

struct OpcodeInfo {
  std::string_view name;  // empty: not a valid opcode
  HeaderSet headers = 0;
  uint32_t flags = 0;
  uint8_t header_bytes = 0;  // BTH plus every extension header
  std::array<uint8_t, kNumHeaders> offset{};

  constexpr bool valid() const { return !name.empty(); }
  constexpr bool has(Header h) const { return (headers & header_bit(h)) != 0; }
  constexpr bool is(uint32_t f) const { return (flags & f) == f; }
  constexpr bool any(uint32_t f) const { return (flags & f) != 0; }
};

// IBA 9.2.1: opcode = transport (bits 7..5) | operation (bits 4..0).
namespace op {
inline constexpr uint8_t kRc = 0x00, kUc = 0x20, kRd = 0x40, kUd = 0x60, kXrc = 0xa0;
inline constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02,
                         kSendLastImm = 0x03, kSendOnly = 0x04, kSendOnlyImm = 0x05,
                         kWriteFirst = 0x06, kWriteMiddle = 0x07, kWriteLast = 0x08,
                         kWriteLastImm = 0x09, kWriteOnly = 0x0a, kWriteOnlyImm = 0x0b,
                         kReadRequest = 0x0c, kReadResponseFirst = 0x0d,
                         kReadResponseMiddle = 0x0e, kReadResponseLast = 0x0f,
                         kReadResponseOnly = 0x10, kAcknowledge = 0x11,
                         kAtomicAcknowledge = 0x12, kCompareSwap = 0x13, kFetchAdd = 0x14,
                         kSendLastInv = 0x16, kSendOnlyInv = 0x17, kAtomicWrite = 0x1d;

inline constexpr uint8_t kRcSendFirst = kRc | kSendFirst;
inline constexpr uint8_t kRcSendMiddle = kRc | kSendMiddle;
inline constexpr uint8_t kRcSendLast = kRc | kSendLast;
inline constexpr uint8_t kRcSendLastImm = kRc | kSendLastImm;
inline constexpr uint8_t kRcSendOnly = kRc | kSendOnly;
inline constexpr uint8_t kRcSendOnlyImm = kRc | kSendOnlyImm;
inline constexpr uint8_t kRcWriteFirst = kRc | kWriteFirst;
inline constexpr uint8_t kRcWriteMiddle = kRc | kWriteMiddle;
inline constexpr uint8_t kRcWriteLast = kRc | kWriteLast;
inline constexpr uint8_t kRcWriteLastImm = kRc | kWriteLastImm;
inline constexpr uint8_t kRcWriteOnly = kRc | kWriteOnly;
inline constexpr uint8_t kRcWriteOnlyImm = kRc | kWriteOnlyImm;
inline constexpr uint8_t kRcReadRequest = kRc | kReadRequest;
inline constexpr uint8_t kRcReadResponseFirst = kRc | kReadResponseFirst;
inline constexpr uint8_t kRcReadResponseMiddle = kRc | kReadResponseMiddle;
inline constexpr uint8_t kRcReadResponseLast = kRc | kReadResponseLast;
inline constexpr uint8_t kRcReadResponseOnly = kRc | kReadResponseOnly;
inline constexpr uint8_t kRcAcknowledge = kRc | kAcknowledge;
inline constexpr uint8_t kRcAtomicAcknowledge = kRc | kAtomicAcknowledge;
inline constexpr uint8_t kRcCompareSwap = kRc | kCompareSwap;
inline constexpr uint8_t kRcFetchAdd = kRc | kFetchAdd;
inline constexpr uint8_t kRcSendLastInv = kRc | kSendLastInv;
inline constexpr uint8_t kRcSendOnlyInv = kRc | kSendOnlyInv;
inline constexpr uint8_t kUdSendOnly = kUd | kSendOnly;
inline constexpr uint8_t kUdSendOnlyImm = kUd | kSendOnlyImm;
// IBA 9.2.1 Table 38: opcodes 0xC0-0xFF are manufacturer specific. softrdma's
// selective acknowledgement, sent only on an RC connection whose two ends agreed
// on selective repeat (docs/decisions/selective-repeat.md), so no peer of another
// kind ever sees it: an AETH that acknowledges like an ACK (BTH PSN: the last in
// order), then a bitmap of the PSNs received beyond the first missing one
// (wire/sack.h).
inline constexpr uint8_t kRcSack = 0xc1;
// softrdma's timed acknowledgement, on an RC connection whose two ends agreed on
// it (ECE, docs/decisions/congestion-control.md "Host delay"): an ACK (AETH
// included, acknowledging as an ACK does) followed by how long the responder had
// held the newest packet it answers (wire/ack_hold.h), which the requester's
// delay control takes off its round trip. A SACK on such a connection carries the
// same hold after its bitmap.
inline constexpr uint8_t kRcTimedAck = 0xc2;
// RoCEv2 Annex A17.9.3: the Congestion Notification Packet, in the CNP transport
// (0x80): a BTH (DestQP: the QP whose packets arrived marked CE; BECN set; PSN 0)
// and 16 reserved bytes, sent by the receiver of CE-marked packets to their sender,
// which slows down (DCQCN, docs/decisions/congestion-control.md). It belongs to no
// IBA transport: any QP type may receive it.
inline constexpr uint8_t kCnp = 0x81;
inline constexpr size_t kCnpReservedBytes = 16;
}  // namespace op

namespace detail {

struct OperationShape {
  uint8_t operation;  // low 5 bits of the opcode
  std::string_view name;
  HeaderSet headers;  // extension headers besides BTH (and DETH/RDETH by transport)
  uint32_t flags;
};

inline constexpr HeaderSet kNone = 0;
constexpr HeaderSet H(Header h) { return header_bit(h); }

// IBA Table 38: the operations and their headers, transport-independent.
inline constexpr std::array<OperationShape, 24> kOperations = {{
    {op::kSendFirst, "SEND_FIRST", kNone, kOpRequest | kOpSend | kOpFirst | kOpPayload},
    {op::kSendMiddle, "SEND_MIDDLE", kNone, kOpRequest | kOpSend | kOpMiddle | kOpPayload},
    {op::kSendLast, "SEND_LAST", kNone,
     kOpRequest | kOpSend | kOpLast | kOpPayload | kOpConsumesRecv},
    {op::kSendLastImm, "SEND_LAST_WITH_IMMEDIATE", H(Header::kImmDt),
     kOpRequest | kOpSend | kOpLast | kOpPayload | kOpImmediate | kOpConsumesRecv},
    {op::kSendOnly, "SEND_ONLY", kNone,
     kOpRequest | kOpSend | kOpOnly | kOpPayload | kOpConsumesRecv},
    {op::kSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", H(Header::kImmDt),
     kOpRequest | kOpSend | kOpOnly | kOpPayload | kOpImmediate | kOpConsumesRecv},
    {op::kWriteFirst, "RDMA_WRITE_FIRST", H(Header::kReth),
     kOpRequest | kOpWrite | kOpFirst | kOpPayload},
    {op::kWriteMiddle, "RDMA_WRITE_MIDDLE", kNone,
     kOpRequest | kOpWrite | kOpMiddle | kOpPayload},
    {op::kWriteLast, "RDMA_WRITE_LAST", kNone, kOpRequest | kOpWrite | kOpLast | kOpPayload},
    {op::kWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", H(Header::kImmDt),
     kOpRequest | kOpWrite | kOpLast | kOpPayload | kOpImmediate | kOpConsumesRecv},
    {op::kWriteOnly, "RDMA_WRITE_ONLY", H(Header::kReth),
     kOpRequest | kOpWrite | kOpOnly | kOpPayload},
    {op::kWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", H(Header::kReth) | H(Header::kImmDt),
     kOpRequest | kOpWrite | kOpOnly | kOpPayload | kOpImmediate | kOpConsumesRecv},
    {op::kReadRequest, "RDMA_READ_REQUEST", H(Header::kReth),
     kOpRequest | kOpReadRequest | kOpOnly},
    {op::kReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", H(Header::kAeth),
     kOpResponse | kOpReadResponse | kOpFirst | kOpPayload},
    {op::kReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", kNone,
     kOpResponse | kOpReadResponse | kOpMiddle | kOpPayload},
    {op::kReadResponseLast, "RDMA_READ_RESPONSE_LAST", H(Header::kAeth),
     kOpResponse | kOpReadResponse | kOpLast | kOpPayload},
    {op::kReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", H(Header::kAeth),
     kOpResponse | kOpReadResponse | kOpOnly | kOpPayload},
    {op::kAcknowledge, "ACKNOWLEDGE", H(Header::kAeth), kOpResponse | kOpAck | kOpOnly},
    {op::kAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", H(Header::kAeth) | H(Header::kAtomicAckEth),
     kOpResponse | kOpAtomicAck | kOpOnly},
    {op::kCompareSwap, "COMPARE_SWAP", H(Header::kAtomicEth),
     kOpRequest | kOpAtomic | kOpCompareSwap | kOpOnly},
    {op::kFetchAdd, "FETCH_ADD", H(Header::kAtomicEth),
     kOpRequest | kOpAtomic | kOpFetchAdd | kOpOnly},
    {op::kSendLastInv, "SEND_LAST_WITH_INVALIDATE", H(Header::kIeth),
     kOpRequest | kOpSend | kOpLast | kOpPayload | kOpInvalidate | kOpConsumesRecv},
    {op::kSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", H(Header::kIeth),
     kOpRequest | kOpSend | kOpOnly | kOpPayload | kOpInvalidate | kOpConsumesRecv},
    // IBA 1.5 (9.2 Table 38, 9.4.6): RETH and an 8-byte payload, acknowledged by an ACK.
    {op::kAtomicWrite, "ATOMIC_WRITE", H(Header::kReth),
     kOpRequest | kOpAtomicWrite | kOpOnly | kOpPayload},
}};

struct TransportShape {
  uint8_t base;
  std::string_view prefix;
  uint32_t flag;
  HeaderSet extra;      // on every packet: DETH for UD, RDETH+DETH for RD
  HeaderSet request_extra;  // on requests only: XRCETH for XRC (IBA A14; responses
                            // go to the XRC send QP, which needs no SRQ number)
  uint32_t operations;  // bit i set: operation i exists on this transport
};

constexpr uint32_t ops_mask(std::initializer_list<uint8_t> ops) {
  uint32_t m = 0;
  for (uint8_t o : ops) m |= 1u << o;
  return m;
}

// IBA Table 39: which operations each transport service has.
inline constexpr uint32_t kRcOps = (0x00ffffffu & ~(1u << 0x15)) | (1u << op::kAtomicWrite);
inline constexpr uint32_t kUcOps = ops_mask({op::kSendFirst, op::kSendMiddle, op::kSendLast,
                                             op::kSendLastImm, op::kSendOnly, op::kSendOnlyImm,
                                             op::kWriteFirst, op::kWriteMiddle, op::kWriteLast,
                                             op::kWriteLastImm, op::kWriteOnly,
                                             op::kWriteOnlyImm});
inline constexpr uint32_t kUdOps = ops_mask({op::kSendOnly, op::kSendOnlyImm});

inline constexpr std::array<TransportShape, 4> kTransports = {{
    {op::kRc, "RC_", kOpRc, kNone, kNone, kRcOps},
    {op::kUc, "UC_", kOpUc, kNone, kNone, kUcOps},
    {op::kUd, "UD_", kOpUd, H(Header::kDeth), kNone, kUdOps},
    // XRC has every RC operation (IBA Table 39).
    {op::kXrc, "XRC_", kOpXrc, kNone, H(Header::kXrceth), kRcOps},
}};

// Names must outlive the table: build "RC_SEND_FIRST" etc. into static storage.
struct NameStore {
  std::array<std::array<char, 48>, 256> text{};
};

constexpr NameStore make_names() {
  NameStore s{};
  for (const auto& t : kTransports) {
    for (const auto& o : kOperations) {
      auto& dst = s.text[t.base | o.operation];
      size_t n = 0;
      for (char c : t.prefix) dst[n++] = c;
      for (char c : o.name) dst[n++] = c;
    }
  }
  return s;
}
inline constexpr NameStore kNames = make_names();

constexpr std::string_view name_at(size_t opcode) {
  const auto& t = kNames.text[opcode];
  size_t n = 0;
  while (n < t.size() && t[n] != '\0') ++n;
  return std::string_view(t.data(), n);
}

constexpr OpcodeInfo make_info(uint8_t opcode, const TransportShape& t,
                               const OperationShape& o) {
  OpcodeInfo info{};
  info.name = name_at(opcode);
  const HeaderSet extra = (o.flags & kOpRequest) ? HeaderSet(t.extra | t.request_extra) : t.extra;
  info.headers = HeaderSet(header_bit(Header::kBth) | extra | o.headers);
  info.flags = o.flags | t.flag;
  uint8_t at = 0;
  for (size_t h = 0; h < kNumHeaders; ++h) {
    if (info.headers & (1u << h)) {
      info.offset[h] = at;
      at = uint8_t(at + kHeaderBytes[h]);
    }
  }
  info.header_bytes = at;
  return info;
}

constexpr std::array<OpcodeInfo, 256> make_opcode_table() {
  std::array<OpcodeInfo, 256> table{};
  for (const auto& t : kTransports) {
    for (const auto& o : kOperations) {
      if (t.operations & (1u << o.operation)) {
        uint8_t opcode = uint8_t(t.base | o.operation);
        table[opcode] = make_info(opcode, t, o);
      }
    }
  }
  OpcodeInfo sack{};
  sack.name = "SOFTRDMA_SACK";
  sack.headers = HeaderSet(header_bit(Header::kBth) | header_bit(Header::kAeth));
  sack.flags = kOpResponse | kOpSack | kOpPayload | kOpRc | kOpOnly;
  sack.offset[size_t(Header::kAeth)] = uint8_t(kBthBytes);
  sack.header_bytes = uint8_t(kBthBytes + kHeaderBytes[size_t(Header::kAeth)]);
  table[op::kRcSack] = sack;
  OpcodeInfo timed_ack = sack;
  timed_ack.name = "SOFTRDMA_TIMED_ACK";
  timed_ack.flags = kOpResponse | kOpAck | kOpPayload | kOpRc | kOpOnly;
  table[op::kRcTimedAck] = timed_ack;
  OpcodeInfo cnp{};
  cnp.name = "CNP";
  cnp.headers = header_bit(Header::kBth);
  cnp.flags = kOpCnp | kOpPayload;  // its reserved bytes are its payload
  cnp.header_bytes = uint8_t(kBthBytes);
  table[op::kCnp] = cnp;
  return table;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodes = detail::make_opcode_table();

constexpr const OpcodeInfo& opcode_info(uint8_t opcode) { return kOpcodes[opcode]; }

static_assert(kOpcodes[op::kRcWriteOnly].offset[size_t(Header::kReth)] == kBthBytes);
static_assert(kOpcodes[op::kRcWriteOnlyImm].offset[size_t(Header::kImmDt)] == kBthBytes + 16);
static_assert(kOpcodes[op::kRcAtomicAcknowledge].header_bytes == 12 + 4 + 8);
static_assert(kOpcodes[op::kRcCompareSwap].header_bytes == 12 + 28);
static_assert(kOpcodes[op::kUdSendOnlyImm].offset[size_t(Header::kImmDt)] == kBthBytes + 8);
static_assert(kOpcodes[op::kRcSendOnly].name == "RC_SEND_ONLY");
static_assert(!kOpcodes[0x15].valid() && !kOpcodes[op::kUd | op::kSendFirst].valid());
static_assert(!kOpcodes[op::kUc | op::kReadRequest].valid());
static_assert(kOpcodes[op::kXrc | op::kWriteOnly].offset[size_t(Header::kReth)] == kBthBytes + 4);
static_assert(kOpcodes[op::kXrc | op::kAcknowledge].header_bytes == kBthBytes + 4);
static_assert(kOpcodes[op::kXrc | op::kSendOnly].name == "XRC_SEND_ONLY");

}  // namespace softrdma::wire
