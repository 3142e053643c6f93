// The hold a responder reports in its timed acknowledgements (op::kRcTimedAck, and
// after the bitmap of a SACK on a connection that agreed on it): how long the
// newest packet the acknowledgement answers had been in the responder's host, from
// its arrival (the kernel's receive timestamp) to the acknowledgement's leaving.
// A busy or descheduled responder, and the responder's own coalescing of ACKs,
// add that much to the requester's round trip without any queue of the network
// growing; Swift (SIGCOMM 2020, §3.2) takes the remote host's delay off the round
// trip in the same way, from its NIC timestamps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace softrdma::wire {

// Nanoseconds, 32 bits big-endian: 4.29 s at most (saturated).
inline constexpr size_t kAckHoldBytes = 4;

inline void write_ack_hold(std::span<uint8_t, kAckHoldBytes> out, int64_t hold_ns) {
  const uint32_t v = hold_ns <= 0 ? 0 : hold_ns >= int64_t(UINT32_MAX) ? UINT32_MAX
                                                                       : uint32_t(hold_ns);
  out[0] = uint8_t(v >> 24);
  out[1] = uint8_t(v >> 16);
  out[2] = uint8_t(v >> 8);
  out[3] = uint8_t(v);
}

inline int64_t read_ack_hold(std::span<const uint8_t, kAckHoldBytes> in) {
  return int64_t(uint32_t(in[0]) << 24 | uint32_t(in[1]) << 16 | uint32_t(in[2]) << 8 | in[3]);
}

}  // namespace softrdma::wire
