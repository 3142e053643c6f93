// QPNs in blocks, for the processes that share one host address as one RNIC
// (issue 27, docs/decisions/host-rnic.md): a QPN's top bits name its block, and a
// block belongs to one process, so a QPN alone says which process owns the QP. The
// kernel's steering program (transport/udp/reuseport_steering.h) reads the block
// from the BTH's DestQP; the engine hands out QPNs from its process's blocks.
#pragma once

#include <cstdint>

namespace softrdma::wire {

// 1023 blocks of 16 384 QPNs (IBA 9.2: DestQP is 24 bits). Block 0 holds QPN 0
// and 1 (IBA 3.5.1) and is nobody's. A process that needs more QPs takes more
// blocks (issue 6 asks for 65 536 RC QPs in one process).
inline constexpr unsigned kQpnBlockShift = 14;
inline constexpr uint32_t kQpnsPerBlock = 1u << kQpnBlockShift;
inline constexpr uint32_t kQpnBlocks = 1u << (24 - kQpnBlockShift);
inline constexpr uint32_t kMaxQpnBlock = kQpnBlocks - 1;

constexpr uint32_t qpn_block(uint32_t qpn) { return (qpn & 0xffffff) >> kQpnBlockShift; }
constexpr uint32_t first_qpn_of_block(uint32_t block) { return block << kQpnBlockShift; }

}  // namespace softrdma::wire
