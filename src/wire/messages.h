// The builders' side of the opcode table (IBA 9.2, Table 38): which operation a
// packet of a message is, from what the message is and where the packet sits in
// it. A QP adds its transport's base (RC 0x00, UC 0x20, UD 0x60, XRC 0xa0) and the
// roles never name one transport's opcodes (STYLE.md: no opcode if-chains).
#pragma once

#include <array>
#include <cstdint>

#include "wire/opcodes.h"

namespace softrdma::wire {

// What a message carries, as far as its opcodes differ.
enum class MessageKind : uint8_t { kSend, kSendImm, kSendInv, kWrite, kWriteImm, kReadResponse };
inline constexpr size_t kMessageKinds = 6;

// Where a packet sits in its message (IBA 9.2.1 / 9.7.4.1.1).
enum class Position : uint8_t { kFirst, kMiddle, kLast, kOnly };

constexpr Position position_of(uint32_t index, uint32_t packets) {
  if (packets <= 1) return Position::kOnly;
  if (index == 0) return Position::kFirst;
  return index + 1 == packets ? Position::kLast : Position::kMiddle;
}

inline constexpr std::array<std::array<uint8_t, 4>, kMessageKinds> kMessageOperations = {{
    {op::kSendFirst, op::kSendMiddle, op::kSendLast, op::kSendOnly},
    {op::kSendFirst, op::kSendMiddle, op::kSendLastImm, op::kSendOnlyImm},
    {op::kSendFirst, op::kSendMiddle, op::kSendLastInv, op::kSendOnlyInv},
    {op::kWriteFirst, op::kWriteMiddle, op::kWriteLast, op::kWriteOnly},
    {op::kWriteFirst, op::kWriteMiddle, op::kWriteLastImm, op::kWriteOnlyImm},
    {op::kReadResponseFirst, op::kReadResponseMiddle, op::kReadResponseLast,
     op::kReadResponseOnly},
}};

// The operation (low 5 bits of the opcode) of packet `index` of `packets`.
constexpr uint8_t message_operation(MessageKind kind, uint32_t index, uint32_t packets) {
  return kMessageOperations[size_t(kind)][size_t(position_of(index, packets))];
}

// The table says what it means: every entry is valid on RC, and its flags agree
// with the position it was chosen for.
constexpr bool message_table_agrees() {
  for (const auto& row : kMessageOperations) {
    for (size_t p = 0; p < 4; ++p) {
      const OpcodeInfo& info = kOpcodes[op::kRc | row[p]];
      if (!info.valid()) return false;
      const bool first = info.is(kOpFirst), last = info.is(kOpLast);
      if (first != (p == 0 || p == 3) || last != (p == 2 || p == 3)) return false;
    }
  }
  return true;
}
static_assert(message_table_agrees());

}  // namespace softrdma::wire
