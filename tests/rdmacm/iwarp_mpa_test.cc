// The MPA start-frame exchange of rdma_cm over iWARP (src/rdmacm/iwarp_mpa.h),
// step by step over a loopback TCP connection: the initiator's request, the
// exact reading of a frame, the responder's choice, its reply or rejection,
// and the initiator's reading of the reply. Linux siw's behaviour is the
// reference where RFC 5044/6581 leave room.
#include "rdmacm/iwarp_mpa.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "support/eventually.h"

namespace softrdma::rdmacm::iwarp {
namespace {

using wire::iwarp::kMpaReplyKey;
using wire::iwarp::kMpaRequestKey;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string text_of(std::span<const uint8_t> b) { return {b.begin(), b.end()}; }

// A connected loopback TCP pair, both ends non-blocking.
struct TcpPair {
  int client = -1, server = -1;
  TcpPair() {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof a;
    bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(listener, 1);
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &length);
    client = socket(AF_INET, SOCK_STREAM, 0);
    connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a);
    server = accept(listener, nullptr, nullptr);
    close(listener);
    for (int fd : {client, server}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  ~TcpPair() {
    close(client);
    close(server);
  }
  void client_sends(std::span<const uint8_t> b) const {
    const int waiting = readable(server);
    ASSERT_EQ(send_frame(client, b), 0);
    // The reader never blocks: wait until the bytes are in the server's socket.
    ASSERT_TRUE(testing_support::eventually(
        [&] { return readable(server) >= waiting + int(b.size()); }));
  }
  // Bytes the socket holds unread (FIONREAD, tcp(7)).
  static int readable(int fd) {
    int bytes = 0;
    return ioctl(fd, FIONREAD, &bytes) == 0 ? bytes : -1;
  }
};

// A frame header by hand: key, flags, revision, PD_Length (RFC 5044 §7.1).
std::vector<uint8_t> header(const char* key, uint8_t flags, uint8_t revision, uint16_t pd_length) {
  std::vector<uint8_t> h(key, key + 16);
  h.push_back(flags);
  h.push_back(revision);
  h.push_back(uint8_t(pd_length >> 8));
  h.push_back(uint8_t(pd_length));
  return h;
}

std::vector<uint8_t> request_bytes(const Offer& offer, const std::string& data) {
  std::array<uint8_t, kMaxFrameBytes> out;
  const size_t n = write_request(offer, bytes_of(data), out);
  return {out.begin(), out.begin() + long(n)};
}

// The responder's reader of `request`, read from a fresh connection.
StartFrameReader received_request(const Offer& offer, const std::string& data) {
  TcpPair pair;
  pair.client_sends(request_bytes(offer, data));
  StartFrameReader reader(/*reply=*/false);
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kDone);
  return reader;
}

StartFrameReader reread_as_reply(std::span<const uint8_t> frame) {
  TcpPair pair;
  pair.client_sends(frame);
  StartFrameReader reader(/*reply=*/true);
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kDone);
  return reader;
}

TEST(IwarpMpa, RequestIsRevisionTwoWithLinuxsEnhancedFlagIrdOrdAndRtrOffer) {
  // siw's initiator writes revision 2, flag 0x10, the IRD/ORD word with
  // peer-to-peer and the WRITE and READ RTRs offered, then the ULP's data.
  const std::vector<uint8_t> b = request_bytes({.ird = 4, .ord = 2}, "hello");
  ASSERT_EQ(b.size(), 20u + 4 + 5);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 16), "MPA ID Req Frame");
  EXPECT_EQ(b[16], 0x10);  // no M, no C, no R; enhanced
  EXPECT_EQ(b[17], 2);
  EXPECT_EQ(b[18] << 8 | b[19], 9);
  EXPECT_EQ(b[20] << 8 | b[21], 0x8000 | 4);  // peer-to-peer, IRD 4
  EXPECT_EQ(b[22] << 8 | b[23], 0xc000 | 2);  // WRITE and READ RTR, ORD 2
  EXPECT_EQ(std::string(b.begin() + 24, b.end()), "hello");
}

TEST(IwarpMpa, RequestWithCrcSetsC) {
  EXPECT_EQ(request_bytes({.crc = true}, "")[16], 0x40 | 0x10);
}

TEST(IwarpMpa, PrivateDataBeyond252BytesIsNotWritten) {
  // siw takes a PD_Length of 256 at most; 4 of them are IRD/ORD.
  std::array<uint8_t, kMaxFrameBytes> out;
  EXPECT_EQ(write_request({}, bytes_of(std::string(253, 'x')), out), 0u);
  EXPECT_EQ(write_request({}, bytes_of(std::string(252, 'x')), out), 20u + 256);
}

TEST(IwarpMpa, ReaderStopsAtTheFramesEndAndLeavesTheFpdusBehindIt) {
  // The initiator's first FPDU may follow its request in the same segment: the
  // reader takes the frame and not a byte more, for the engine.
  TcpPair pair;
  std::vector<uint8_t> b = request_bytes({.ird = 1, .ord = 1}, "pd");
  const std::string fpdu = "FPDUDATA";
  b.insert(b.end(), fpdu.begin(), fpdu.end());
  pair.client_sends(b);
  StartFrameReader reader(false);
  ASSERT_EQ(reader.read(pair.server), ReadStatus::kDone);
  EXPECT_EQ(text_of(reader.frame().private_data), "pd");
  EXPECT_TRUE(reader.enhanced());
  char rest[32] = {};
  EXPECT_EQ(recv(pair.server, rest, sizeof rest, 0), ssize_t(fpdu.size()));
  EXPECT_EQ(std::string(rest), fpdu);
}

TEST(IwarpMpa, ReaderWaitsForAFrameArrivingInPieces) {
  TcpPair pair;
  const std::vector<uint8_t> b = request_bytes({.ird = 3, .ord = 5}, "piecewise");
  StartFrameReader reader(false);
  pair.client_sends(std::span(b).first(7));
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kNeedMore);
  pair.client_sends(std::span(b).subspan(7, 16));
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kNeedMore);
  pair.client_sends(std::span(b).subspan(23));
  ASSERT_EQ(reader.read(pair.server), ReadStatus::kDone);
  EXPECT_EQ(text_of(reader.frame().private_data), "piecewise");
  EXPECT_EQ(reader.frame().enhanced->ird, 3);
  EXPECT_EQ(reader.frame().enhanced->ord, 5);
}

TEST(IwarpMpa, ASilentPeerLeavesTheReaderWaitingNotBlocked) {
  // The agent's deadline ends it (kRequestTimeout, siw's 5 s); the read itself
  // must return at once.
  TcpPair pair;
  StartFrameReader reader(false);
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kNeedMore);
  EXPECT_EQ(kRequestTimeout, std::chrono::seconds(5));
  EXPECT_EQ(kReplyTimeout, std::chrono::seconds(10));
}

TEST(IwarpMpa, ANonMpaPeerIsKnownByItsFirstWrongByte) {
  TcpPair pair;
  pair.client_sends(bytes_of("G"));  // an HTTP client, say
  StartFrameReader reader(false);
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kBadKey);
}

TEST(IwarpMpa, AReplyWhereARequestIsExpectedIsNotMpa) {
  TcpPair pair;
  pair.client_sends(header(kMpaReplyKey, 0, 1, 0));
  StartFrameReader reader(false);
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kBadKey);
}

TEST(IwarpMpa, APeerThatClosesMidFrameIsClosed) {
  TcpPair pair;
  const std::vector<uint8_t> h = header(kMpaRequestKey, 0x10, 2, 8);
  pair.client_sends(std::span(h).first(12));
  shutdown(pair.client, SHUT_WR);
  pollfd end{pair.server, POLLRDHUP, 0};  // the FIN has reached the server
  ASSERT_EQ(poll(&end, 1, 10'000), 1);
  StartFrameReader reader(false);
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kClosed);
}

TEST(IwarpMpa, PdLengthAbove256IsRefusedBeforeItsDataIsRead) {
  TcpPair pair;
  pair.client_sends(header(kMpaRequestKey, 0x10, 2, 257));
  StartFrameReader reader(false);
  EXPECT_EQ(reader.read(pair.server), ReadStatus::kTooLong);
}

TEST(IwarpMpa, RevisionThreeAndAShortEnhancedWordAreBadFrames) {
  TcpPair three, short_word;
  three.client_sends(header(kMpaRequestKey, 0, 3, 0));
  short_word.client_sends(header(kMpaRequestKey, 0x10, 2, 2));
  short_word.client_sends(bytes_of("ab"));
  StartFrameReader a(false), b(false);
  EXPECT_EQ(a.read(three.server), ReadStatus::kBadFrame);
  EXPECT_EQ(b.read(short_word.server), ReadStatus::kBadFrame);
}

TEST(IwarpMpa, RevisionTwoWithoutTheEnhancedFlagIsAllUlpData) {
  // siw's responder reads it so: no IRD/ORD word, the private data whole.
  TcpPair pair;
  std::vector<uint8_t> b = header(kMpaRequestKey, 0, 2, 4);
  for (char ch : std::string("abcd")) b.push_back(uint8_t(ch));
  pair.client_sends(b);
  StartFrameReader reader(false);
  ASSERT_EQ(reader.read(pair.server), ReadStatus::kDone);
  EXPECT_FALSE(reader.enhanced());
  EXPECT_EQ(reader.frame().revision, 2);
  EXPECT_EQ(text_of(reader.frame().private_data), "abcd");
}

TEST(IwarpMpa, ACopiedReaderKeepsItsOwnPrivateData) {
  StartFrameReader copy;
  {
    StartFrameReader original = received_request({.ird = 1, .ord = 1}, "kept");
    copy = original;
  }
  EXPECT_EQ(text_of(copy.frame().private_data), "kept");
}

TEST(IwarpMpa, ResponderPicksTheRtrAsSiwDoes) {
  // Offered WRITE and READ (siw's, ours): WRITE.
  StartFrameReader both = received_request({.ird = 1, .ord = 1}, "");
  EXPECT_EQ(answer(both, 1, 1, 16, 16).rtr, RtrKind::kWrite);
  // READ only (cxgb4's default): READ, with an IRD to serve it.
  TcpPair pair;
  std::vector<uint8_t> b = header(kMpaRequestKey, 0x10, 2, 4);
  for (uint8_t x : {0x80, 0x00, 0x40, 0x01}) b.push_back(x);  // p2p; READ RTR, ORD 1
  pair.client_sends(b);
  StartFrameReader read_only(false);
  ASSERT_EQ(read_only.read(pair.server), ReadStatus::kDone);
  const Agreement a = answer(read_only, 0, 0, 16, 16);
  EXPECT_EQ(a.rtr, RtrKind::kRead);
  EXPECT_EQ(a.ird, 1);
  // No peer-to-peer: no RTR.
  StartFrameReader plain = received_request({.ird = 1, .ord = 1, .peer_to_peer = false}, "");
  EXPECT_EQ(answer(plain, 1, 1, 16, 16).rtr, RtrKind::kNone);
}

TEST(IwarpMpa, ResponderClampsItsDepthsToThePeersAndTheDevice) {
  // The peer serves 2 READs and issues 8 (RFC 6581 §5): we issue at most 2 and
  // raise our IRD to 8, within the device's maximum (siw's relaxed negotiation).
  StartFrameReader request = received_request({.ird = 2, .ord = 8}, "");
  Agreement a = answer(request, 4, 16, 16, 16);
  EXPECT_EQ(a.ord, 2);
  EXPECT_EQ(a.ird, 8);
  a = answer(request, 4, 16, 6, 16);
  EXPECT_EQ(a.ird, 6);
}

TEST(IwarpMpa, ReplyCarriesCrcAsRequestedTheChosenRtrAndTheDepths) {
  StartFrameReader request = received_request({.ird = 2, .ord = 3, .crc = true}, "req");
  const Agreement agreed = answer(request, 3, 2, 16, 16);
  EXPECT_TRUE(agreed.crc);  // RFC 5044 §7.1: C asked, C used
  std::array<uint8_t, kMaxFrameBytes> out;
  const size_t n = write_reply(request, agreed, bytes_of("rep"), out);
  ASSERT_NE(n, 0u);
  EXPECT_EQ(out[16], 0x40 | 0x10);  // C and enhanced; no R
  const StartFrameReader reply = reread_as_reply(std::span(out).first(n));
  ASSERT_TRUE(reply.enhanced());
  const MpaEnhanced& e = *reply.frame().enhanced;
  EXPECT_TRUE(e.peer_to_peer);
  EXPECT_TRUE(e.rtr_write);
  EXPECT_FALSE(e.rtr_read);  // one kind, the one chosen
  EXPECT_EQ(e.ird, 3);
  EXPECT_EQ(e.ord, 2);
  EXPECT_EQ(text_of(reply.frame().private_data), "rep");
}

TEST(IwarpMpa, RejectionHasRAndThePrivateData) {
  StartFrameReader request = received_request({.ird = 1, .ord = 1}, "");
  std::array<uint8_t, kMaxFrameBytes> out;
  const size_t n = write_reject(request, bytes_of("busy"), out);
  const StartFrameReader reply = reread_as_reply(std::span(out).first(n));
  EXPECT_TRUE(reply.frame().reject);
  EXPECT_EQ(reply.frame().revision, 2);
  EXPECT_EQ(text_of(reply.frame().private_data), "busy");
}

TEST(IwarpMpa, InitiatorTakesTheRtrChosenAndTheDepthsAgreed) {
  const Offer offer{.ird = 4, .ord = 4};
  StartFrameReader request = received_request(offer, "");
  std::array<uint8_t, kMaxFrameBytes> out;
  // The responder's device serves 2 READs at most: its reply's IRD is 2.
  const size_t n = write_reply(request, answer(request, 2, 1, 2, 16), {}, out);
  const auto agreed = settle(offer, reread_as_reply(std::span(out).first(n)), 16);
  ASSERT_TRUE(agreed.has_value());
  EXPECT_EQ(agreed->rtr, RtrKind::kWrite);
  EXPECT_EQ(agreed->ord, 2);  // no more READs than the responder serves
  EXPECT_EQ(agreed->ird, 4);
  EXPECT_FALSE(agreed->crc);
}

TEST(IwarpMpa, InitiatorRefusesAReplyWithNoRtrItOffered) {
  // As siw: peer-to-peer asked, the reply names no WRITE or READ.
  TcpPair pair;
  std::vector<uint8_t> b = header(kMpaReplyKey, 0x10, 2, 4);
  for (uint8_t x : {0xc0, 0x01, 0x00, 0x01}) b.push_back(x);  // p2p, SEND RTR; no WRITE/READ
  pair.client_sends(b);
  StartFrameReader reply(true);
  ASSERT_EQ(reply.read(pair.server), ReadStatus::kDone);
  EXPECT_FALSE(settle({.ird = 1, .ord = 1}, reply, 16).has_value());
}

TEST(IwarpMpa, InitiatorRefusesARevisionOneReplyToPeerToPeer) {
  TcpPair pair;
  pair.client_sends(header(kMpaReplyKey, 0, 1, 0));
  StartFrameReader reply(true);
  ASSERT_EQ(reply.read(pair.server), ReadStatus::kDone);
  EXPECT_FALSE(settle({.ird = 1, .ord = 1}, reply, 16).has_value());
  const auto plain = settle({.ird = 1, .ord = 1, .peer_to_peer = false}, reply, 16);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->rtr, RtrKind::kNone);
}

TEST(IwarpMpa, InitiatorRefusesAResponderOrdBeyondItsDevice) {
  // RFC 6581 §5 "insufficient IRD": the responder would issue more READs than
  // this device can serve.
  StartFrameReader request = received_request({.ird = 64, .ord = 1}, "");
  std::array<uint8_t, kMaxFrameBytes> out;
  const size_t n = write_reply(request, answer(request, 0, 64, 64, 64), {}, out);
  EXPECT_FALSE(settle({.ird = 64, .ord = 1}, reread_as_reply(std::span(out).first(n)), 16));
}

}  // namespace
}  // namespace softrdma::rdmacm::iwarp
