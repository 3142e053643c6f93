// The MPA start-frame exchange of an iWARP connection (RFC 5044 §7.1, RFC 6581
// §5), as librdmacm's connection manager runs it on a TCP socket before it hands
// the socket to the engine (wire/iwarp/handoff.h; docs/decisions/iwarp-cm.md).
// The steps are small and separate so that each can be tested on a socket pair:
// write the initiator's request, read a start frame exactly to its end, choose
// the responder's answer, settle what a reply agreed.
//
// What Linux siw (drivers/infiniband/sw/siw/siw_cm.c) does, which these steps
// follow so that the two interoperate:
// - Revision 2 frames carry a flag outside RFC 5044's three, 0x10 of the flags
//   byte ("enhanced"): with it the private data begins with RFC 6581's IRD/ORD
//   word. siw's initiator refuses a revision-2 reply without it; its responder
//   reads a revision-2 request without it as revision-1 data.
// - PD_Length is at most 256 (RDMA_MAX_PRIVATE_DATA), not RFC 5044's 512: siw
//   drops a start frame with more.
// - Its responder picks the zero-length WRITE as the RTR when offered, else the
//   READ; its initiator (peer_to_peer off by default) offers none.
// - CRC: off unless asked (mpa_crc_required, mpa_crc_strict are false); a
//   request with C gets a reply with C, and both sides use it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wire/iwarp/handoff.h"
#include "wire/iwarp/mpa.h"

namespace softrdma::rdmacm::iwarp {

using wire::iwarp::MpaEnhanced;
using wire::iwarp::MpaStart;
using wire::iwarp::RtrKind;

// RDMA_MAX_PRIVATE_DATA: the most PD_Length siw takes, and so the most we send.
inline constexpr size_t kMaxPrivateData = 256;
// What rdma_cm's caller may give with a revision-2 frame (the rest is IRD/ORD).
inline constexpr size_t kMaxUlpData = kMaxPrivateData - wire::iwarp::kMpaEnhancedBytes;
inline constexpr size_t kMaxFrameBytes = wire::iwarp::kMpaStartHeaderBytes + kMaxPrivateData;
// siw's: the responder waits 5 s for the request once TCP is up, the initiator
// 10 s for the reply (siw_cm.h MPAREP_TIMEOUT, MPAREQ_TIMEOUT).
inline constexpr std::chrono::milliseconds kRequestTimeout{5000};
inline constexpr std::chrono::milliseconds kReplyTimeout{10000};

enum class ReadStatus : uint8_t {
  kDone,
  kNeedMore,  // nothing more to read now; the frame is not whole yet
  kClosed,    // the peer closed (or reset) before the frame was whole
  kBadKey,    // not the key expected: not an MPA peer
  kBadFrame,  // a bad revision, or revision 2 without room for IRD/ORD
  kTooLong,   // PD_Length above kMaxPrivateData
};
const char* to_string(ReadStatus status);

// Reads one start frame from a non-blocking socket: the 20-byte header, then
// exactly PD_Length bytes, never a byte further (FPDUs may follow right behind).
class StartFrameReader {
 public:
  explicit StartFrameReader(bool reply = false) : reply_(reply) {}
  // A copy's frame points into the copy's own bytes.
  StartFrameReader(const StartFrameReader& other) { *this = other; }
  StartFrameReader& operator=(const StartFrameReader& other);
  ReadStatus read(int fd);
  // After kDone: the frame (its private data points into this reader) and
  // whether it carried RFC 6581's IRD/ORD (revision 2 and the enhanced flag).
  const MpaStart& frame() const { return frame_; }
  bool enhanced() const { return frame_.enhanced.has_value(); }

 private:
  ReadStatus parse();

  bool reply_;
  std::array<uint8_t, kMaxFrameBytes> bytes_{};
  size_t have_ = 0;
  MpaStart frame_{};
};

// The initiator's request (RFC 6581 §5): its IRD/ORD, CRC, and peer-to-peer
// with the RTR messages it can send.
struct Offer {
  uint16_t ird = 0;
  uint16_t ord = 0;
  bool crc = false;
  bool peer_to_peer = true;
};
// The request frame into `out` (kMaxFrameBytes); its length, 0 if the private
// data is longer than kMaxUlpData.
size_t write_request(const Offer& offer, std::span<const uint8_t> private_data,
                     std::span<uint8_t> out);

// What both sides settled, as the engine takes it (IwarpHandoff).
struct Agreement {
  bool crc = false;
  RtrKind rtr = RtrKind::kNone;
  uint16_t ird = 0;  // this side's
  uint16_t ord = 0;
};

// The responder's choice for a request, from what its application accepts with
// (rdma_accept's responder_resources and initiator_depth as IRD and ORD) and
// the device's limits: CRC as requested (RFC 5044 §7.1: a C in the request
// makes both use CRC), the RTR kind among those offered (WRITE, else READ,
// else SEND), IRD/ORD clamped (RFC 6581 §5: no more reads issued than the peer
// takes; as siw's relaxed negotiation, enough IRD for the reads it will issue).
Agreement answer(const StartFrameReader& request, uint16_t ird, uint16_t ord, uint16_t max_ird,
                 uint16_t max_ord);
// The reply (accepting, with `agreed`) or the rejection (R set) of `request`,
// with the same revision; its length, 0 when the private data is too long.
size_t write_reply(const StartFrameReader& request, const Agreement& agreed,
                   std::span<const uint8_t> private_data, std::span<uint8_t> out);
size_t write_reject(const StartFrameReader& request, std::span<const uint8_t> private_data,
                    std::span<uint8_t> out);

// The initiator's reading of an accepting reply: what it settled, or nothing
// when the reply breaks the request (markers, no RTR of those offered, a
// revision-1 answer to peer-to-peer mode: siw ends those too).
std::optional<Agreement> settle(const Offer& offer, const StartFrameReader& reply,
                                uint16_t max_ird);

// Writes a whole start frame to a non-blocking socket (a fresh connection's
// send buffer has room; up to `patience` is waited for it otherwise). 0 or an errno.
int send_frame(int fd, std::span<const uint8_t> frame,
               std::chrono::milliseconds patience = std::chrono::milliseconds(1000));

}  // namespace softrdma::rdmacm::iwarp
