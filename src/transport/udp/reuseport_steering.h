// Steering in a SO_REUSEPORT group of UDP 4791 sockets, one per process of the
// host on one address (docs/decisions/host-rnic.md): a classic BPF program sends
// each RoCEv2 packet to the socket of the process whose slot its destination QPN
// carries, and a probe to the index it names, so that each socket can learn its
// index in the group (the kernel tells nobody; it changes when a member leaves).
//
// Classic BPF, not eBPF: SO_ATTACH_REUSEPORT_CBPF needs no privilege, eBPF does.
// The program sees the UDP payload at offset 0: the BTH (IBA 9.2).
#pragma once

#include <linux/filter.h>

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "wire/qpn_blocks.h"

namespace softrdma::transport::udp {

// A QPN's slot is its block (wire/qpn_blocks.h): block 0 (QPN 0 and 1) is nobody's.
inline constexpr unsigned kSlotShift = wire::kQpnBlockShift;
inline constexpr uint32_t kMaxSlot = wire::kMaxQpnBlock;
inline constexpr uint32_t slot_of_qpn(uint32_t qpn) { return wire::qpn_block(qpn); }

// IBA 9.2.1: BTH opcodes 110xxxxx and 111xxxxx are manufacturer specific. A probe
// is sent to the host's own address and never leaves it.
inline constexpr uint8_t kProbeOpcode = 0xF7;
inline constexpr size_t kProbeBytes = 16;  // opcode, 3 zero bytes, index (be32), nonce (be64)

// One member of the group: the slot it serves and its socket's index in the group.
struct SlotIndex {
  uint32_t slot = 0;
  uint32_t index = 0;
};

// The program: a probe to the index it carries; a packet whose destination QPN's
// slot is a member's to that member's index; anything else (QP1's MADs, a slot
// nobody serves) to an index beyond the group, which makes the kernel hash it to
// some member (that member hands it over). At most kMaxMembers members.
inline constexpr size_t kMaxMembers = (BPF_MAXINSNS - 8) / 2;
std::vector<sock_filter> steering_program(std::span<const SlotIndex> members);

// Attaches `program` to the reuseport group `fd` belongs to (any member may; the
// group keeps one program). 0 or -errno.
int attach_steering(int fd, std::span<const sock_filter> program);

std::array<uint8_t, kProbeBytes> make_probe(uint32_t index, uint64_t nonce);
// A probe of `nonce`: true, with the index it was sent to. False for anything else
// (a probe of another round, another host's packet that looks like one).
bool read_probe(std::span<const uint8_t> payload, uint64_t nonce, uint32_t& index);

}  // namespace softrdma::transport::udp
