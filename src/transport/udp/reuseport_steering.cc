#include "transport/udp/reuseport_steering.h"

#include <sys/socket.h>

#include <cerrno>

namespace softrdma::transport::udp {

namespace {

// An index no group reaches (the kernel compares it with the group's size).
constexpr uint32_t kToTheHash = 0xffffffff;

sock_filter statement(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter jump(uint16_t code, uint32_t k, uint8_t if_true, uint8_t if_false) {
  return BPF_JUMP(code, k, if_true, if_false);
}

uint64_t read_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

}  // namespace

std::vector<sock_filter> steering_program(std::span<const SlotIndex> members) {
  std::vector<sock_filter> program;
  program.reserve(8 + 2 * members.size());
  // The probe first: its rule comes before any slot's, and its jump stays short.
  program.push_back(statement(BPF_LD | BPF_B | BPF_ABS, 0));               // BTH opcode
  program.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kProbeOpcode, 0, 2));
  program.push_back(statement(BPF_LD | BPF_W | BPF_ABS, 4));               // the index
  program.push_back(statement(BPF_RET | BPF_A, 0));
  // BTH bytes 5-7: the destination QP (IBA 9.2, big-endian as BPF loads words).
  program.push_back(statement(BPF_LD | BPF_W | BPF_ABS, 4));
  program.push_back(statement(BPF_ALU | BPF_AND | BPF_K, 0xffffff));
  program.push_back(statement(BPF_ALU | BPF_RSH | BPF_K, kSlotShift));
  // Slot 0 (QPN 0 and 1) never matches: no member serves it.
  for (size_t i = 0; i < members.size() && i < kMaxMembers; ++i) {
    program.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, members[i].slot, 0, 1));
    program.push_back(statement(BPF_RET | BPF_K, members[i].index));
  }
  program.push_back(statement(BPF_RET | BPF_K, kToTheHash));
  return program;
}

int attach_steering(int fd, std::span<const sock_filter> program) {
  sock_fprog fprog{uint16_t(program.size()), const_cast<sock_filter*>(program.data())};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fprog, sizeof fprog) != 0)
    return -errno;
  return 0;
}

std::array<uint8_t, kProbeBytes> make_probe(uint32_t index, uint64_t nonce) {
  std::array<uint8_t, kProbeBytes> probe{};
  probe[0] = kProbeOpcode;
  for (int i = 0; i < 4; ++i) probe[4 + i] = uint8_t(index >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) probe[8 + i] = uint8_t(nonce >> (56 - 8 * i));
  return probe;
}

bool read_probe(std::span<const uint8_t> payload, uint64_t nonce, uint32_t& index) {
  if (payload.size() != kProbeBytes || payload[0] != kProbeOpcode) return false;
  if (read_be64(payload.data() + 8) != nonce) return false;
  index = uint32_t(payload[4]) << 24 | uint32_t(payload[5]) << 16 | uint32_t(payload[6]) << 8 |
          payload[7];
  return true;
}

}  // namespace softrdma::transport::udp
