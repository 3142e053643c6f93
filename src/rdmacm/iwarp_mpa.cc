#include "rdmacm/iwarp_mpa.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "wire/iwarp/fields.h"

namespace softrdma::rdmacm::iwarp {

namespace w = wire::iwarp;

namespace {

// RFC 5044 §7.1's start frame header, by its fields (wire/iwarp/fields.h).
namespace start = w::mpa_start;

size_t pd_length_of(const uint8_t* header) {
  return size_t(wire::load_field(header, start::kPrivateDataLength));
}

// The key of the frame expected, checked on what arrived so far: a non-MPA peer
// is known by its first wrong byte, with no wait for the rest.
bool key_matches(std::span<const uint8_t> bytes, bool reply) {
  const char* key = reply ? w::kMpaReplyKey : w::kMpaRequestKey;
  return std::memcmp(bytes.data(), key, std::min(bytes.size(), w::kMpaKeyBytes)) == 0;
}

// Writes `frame` and sets Linux's enhanced flag when it carries IRD/ORD.
size_t write_frame(const MpaStart& frame, std::span<uint8_t> out) {
  const size_t n = w::write_mpa_start(frame, out);
  if (n != 0 && frame.enhanced) wire::store_field(out.data(), start::kEnhanced, 1);
  return n;
}

// The RFC 6581 §5 word of a reply: the same peer-to-peer mode as the request,
// the one RTR kind chosen, this side's IRD and ORD.
MpaEnhanced reply_word(const MpaEnhanced& request, const Agreement& agreed) {
  MpaEnhanced e;
  e.peer_to_peer = request.peer_to_peer;
  e.rtr_send = agreed.rtr == RtrKind::kSend;
  e.rtr_write = agreed.rtr == RtrKind::kWrite;
  e.rtr_read = agreed.rtr == RtrKind::kRead;
  e.ird = agreed.ird;
  e.ord = agreed.ord;
  return e;
}

// A reply or a rejection of `request`: same revision, CRC as requested (siw
// keeps the request's C in its rejection too).
size_t write_answer(const StartFrameReader& request, const MpaStart& answer,
                    std::span<uint8_t> out) {
  MpaStart frame = answer;
  frame.reply = true;
  const uint8_t revision = request.frame().revision;
  // A revision-2 request without the enhanced flag: answered as siw does, with
  // revision 2 and no IRD/ORD word.
  frame.revision = request.enhanced() ? 2 : 1;
  const size_t n = write_frame(frame, out);
  if (n != 0) wire::store_field(out.data(), start::kRevision, revision);
  return n;
}

}  // namespace

const char* to_string(ReadStatus status) {
  switch (status) {
    case ReadStatus::kDone: return "done";
    case ReadStatus::kNeedMore: return "need more";
    case ReadStatus::kClosed: return "closed";
    case ReadStatus::kBadKey: return "not an MPA peer";
    case ReadStatus::kBadFrame: return "bad frame";
    case ReadStatus::kTooLong: return "private data too long";
  }
  return "?";
}

StartFrameReader& StartFrameReader::operator=(const StartFrameReader& other) {
  if (this == &other) return *this;
  reply_ = other.reply_;
  bytes_ = other.bytes_;
  have_ = other.have_;
  frame_ = other.frame_;
  if (!frame_.private_data.empty()) {
    const size_t at = size_t(frame_.private_data.data() - other.bytes_.data());
    frame_.private_data = std::span<const uint8_t>(bytes_).subspan(at, frame_.private_data.size());
  }
  return *this;
}

ReadStatus StartFrameReader::read(int fd) {
  for (;;) {
    size_t want = w::kMpaStartHeaderBytes;
    if (have_ >= want) {
      const size_t pd_length = pd_length_of(bytes_.data());
      if (pd_length > kMaxPrivateData) return ReadStatus::kTooLong;
      want += pd_length;
    }
    if (have_ == want) return parse();
    // Never past `want`: what follows the frame is the engine's.
    const ssize_t n = recv(fd, bytes_.data() + have_, want - have_, MSG_DONTWAIT);
    if (n == 0) return ReadStatus::kClosed;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? ReadStatus::kNeedMore : ReadStatus::kClosed;
    }
    have_ += size_t(n);
    if (!key_matches(std::span(bytes_).first(have_), reply_)) return ReadStatus::kBadKey;
  }
}

ReadStatus StartFrameReader::parse() {
  // Linux reads revision 2 as RFC 6581's only with its enhanced flag; without
  // it the private data is all the ULP's, as in revision 1.
  const uint8_t revision = uint8_t(wire::load_field(bytes_.data(), start::kRevision));
  const bool plain_revision_2 =
      revision == 2 && wire::load_field(bytes_.data(), start::kEnhanced) == 0;
  std::array<uint8_t, kMaxFrameBytes>& b = bytes_;
  if (plain_revision_2) wire::store_field(b.data(), start::kRevision, 1);
  size_t used = 0;
  const w::MpaParse result = w::parse_mpa_start(std::span(b).first(have_), reply_, frame_, used);
  wire::store_field(b.data(), start::kRevision, revision);
  switch (result) {
    case w::MpaParse::kDone: break;
    case w::MpaParse::kBadKey: return ReadStatus::kBadKey;
    case w::MpaParse::kTooLong: return ReadStatus::kTooLong;
    case w::MpaParse::kNeedMore:  // cannot be: the whole frame is here
    case w::MpaParse::kBadRevision:
    case w::MpaParse::kBadEnhanced: return ReadStatus::kBadFrame;
  }
  frame_.revision = revision;
  return ReadStatus::kDone;
}

size_t write_request(const Offer& offer, std::span<const uint8_t> private_data,
                     std::span<uint8_t> out) {
  if (private_data.size() > kMaxUlpData) return 0;
  MpaStart frame;
  frame.crc = offer.crc;
  frame.revision = 2;
  MpaEnhanced e;
  e.peer_to_peer = offer.peer_to_peer;
  // RFC 6581 §5: the RTR messages the initiator can send; as siw, a zero-length
  // WRITE or READ (a SEND would take a receive the peer's ULP posted for itself).
  e.rtr_write = e.rtr_read = offer.peer_to_peer;
  e.ird = std::min(offer.ird, w::kMpaMaxIrdOrd);
  e.ord = std::min(offer.ord, w::kMpaMaxIrdOrd);
  frame.enhanced = e;
  frame.private_data = private_data;
  return write_frame(frame, out);
}

Agreement answer(const StartFrameReader& request, uint16_t ird, uint16_t ord, uint16_t max_ird,
                 uint16_t max_ord) {
  Agreement a;
  a.crc = request.frame().crc;
  a.ird = std::min(ird, max_ird);
  a.ord = std::min(ord, max_ord);
  if (!request.enhanced()) return a;
  const MpaEnhanced& e = *request.frame().enhanced;
  // RFC 6581 §5: no more READs in flight than the peer's IRD takes; and room
  // for as many as its ORD will send (siw's relaxed negotiation raises the IRD).
  a.ord = std::min(a.ord, e.ird);
  a.ird = std::min(std::max(a.ird, e.ord), max_ird);
  if (e.peer_to_peer) {
    // siw's preference; it proposes a WRITE also when nothing was offered.
    a.rtr = e.rtr_write ? RtrKind::kWrite
            : e.rtr_read ? RtrKind::kRead
            : e.rtr_send ? RtrKind::kSend
                         : RtrKind::kWrite;
    // A zero-length READ is served from the IRD (RFC 6581 §5).
    if (a.rtr == RtrKind::kRead) a.ird = std::max<uint16_t>(a.ird, 1);
  }
  return a;
}

size_t write_reply(const StartFrameReader& request, const Agreement& agreed,
                   std::span<const uint8_t> private_data, std::span<uint8_t> out) {
  if (private_data.size() > (request.enhanced() ? kMaxUlpData : kMaxPrivateData)) return 0;
  MpaStart frame;
  frame.crc = agreed.crc;
  if (request.enhanced()) frame.enhanced = reply_word(*request.frame().enhanced, agreed);
  frame.private_data = private_data;
  return write_answer(request, frame, out);
}

size_t write_reject(const StartFrameReader& request, std::span<const uint8_t> private_data,
                    std::span<uint8_t> out) {
  if (private_data.size() > (request.enhanced() ? kMaxUlpData : kMaxPrivateData)) return 0;
  MpaStart frame;
  frame.reject = true;  // RFC 5044 §7.1: R
  frame.crc = request.frame().crc;
  if (request.enhanced()) frame.enhanced = MpaEnhanced{};
  frame.private_data = private_data;
  return write_answer(request, frame, out);
}

std::optional<Agreement> settle(const Offer& offer, const StartFrameReader& reply,
                                uint16_t max_ird) {
  const MpaStart& f = reply.frame();
  if (f.markers) return std::nullopt;  // RFC 5044 §7.1: we asked for none
  Agreement a;
  a.crc = f.crc || offer.crc;  // either side asking for CRC makes both use it
  a.ird = offer.ird;
  a.ord = offer.ord;
  if (!reply.enhanced()) {
    if (offer.peer_to_peer) return std::nullopt;  // no RTR agreed: siw ends it too
    return a;
  }
  const MpaEnhanced& e = *f.enhanced;
  // RFC 6581 §5: the responder's ORD must fit our IRD (siw: "insufficient IRD"
  // only past the device's maximum), our ORD fit its IRD.
  if (e.ord > max_ird) return std::nullopt;
  a.ird = std::max(a.ird, e.ord);
  a.ord = std::min(a.ord, e.ird);
  if (!offer.peer_to_peer) return a;
  // The RTR kind it chose must be one we offered (WRITE or READ).
  if (e.rtr_write)
    a.rtr = RtrKind::kWrite;
  else if (e.rtr_read)
    a.rtr = RtrKind::kRead;
  else
    return std::nullopt;
  if (a.rtr == RtrKind::kRead) a.ord = std::max<uint16_t>(a.ord, 1);
  return a;
}

int send_frame(int fd, std::span<const uint8_t> frame, std::chrono::milliseconds patience) {
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (!frame.empty()) {
    const ssize_t n = send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      frame = frame.subspan(size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) return ETIMEDOUT;
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, int(left.count()));
  }
  return 0;
}

}  // namespace softrdma::rdmacm::iwarp
