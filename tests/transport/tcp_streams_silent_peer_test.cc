// A peer that goes silent (docs/decisions/iwarp.md, "A peer that goes silent"):
// its host gone without its FIN or RST reaching us, as when the guest of the
// interop case siw.rping.S65535.loss2 halted right after its FIN was dropped.
// TCP alone never notices that on an idle connection; TcpStreams' keepalive and
// TCP_USER_TIMEOUT (PeerLiveness) must end the stream.
//
// The sockets live in a network namespace of their own, made by unshare(2) in a
// helper thread (a namespace belongs to a thread, and a socket keeps the one it
// was made in): no other program sees it, and it needs no name. Once the
// connection is up its loopback goes down, so nothing more passes either way: the
// peer's socket is still open, but nothing it could say arrives. Needs
// CAP_SYS_ADMIN for unshare; skipped with the reason otherwise.
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "transport/fake/fake_network.h"
#include "transport/tcp/tcp_streams.h"

namespace softrdma::transport::tcp {
namespace {

Gid loopback(uint8_t last) { return fake::ipv4_gid(127, 0, 0, last); }

// Sets the loopback interface of `control`'s namespace up or down; 0 or an errno.
int set_loopback(int control, bool up) {
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(control, SIOCGIFFLAGS, &request) != 0) return errno;
  request.ifr_flags = short(up ? request.ifr_flags | IFF_UP : request.ifr_flags & ~IFF_UP);
  return ::ioctl(control, SIOCSIFFLAGS, &request) == 0 ? 0 : errno;
}

// Waits on rx_fd for an event of `kind` (at most `limit`: a guard against hanging,
// not a timing assertion); kClosed with error -1 if none came.
StreamEvent wait_for(TcpStreams& streams, StreamEvent::Kind kind, std::chrono::seconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  std::array<StreamEvent, 16> events;
  while (std::chrono::steady_clock::now() < give_up) {
    pollfd p{streams.rx_fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    const size_t n = streams.poll(events);
    for (size_t i = 0; i < n; ++i)
      if (events[i].kind == kind) return events[i];
  }
  return StreamEvent{kNoStream, StreamEvent::kClosed, 0, -1};
}

class TcpStreamsSilentPeerTest : public ::testing::Test {
 protected:
  // In a thread of its own: a new network namespace with its loopback up, the
  // streams listening there, and the peer's socket connecting to them.
  void SetUp() override {
    std::string skip, why;
    std::thread([&] {
      if (::unshare(CLONE_NEWNET) != 0) {
        skip = std::string("needs CAP_SYS_ADMIN for a network namespace: unshare: ") +
               std::strerror(errno);
        return;
      }
      control_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (int err = set_loopback(control_, true)) {
        why = std::string("lo up: ") + std::strerror(err);
        return;
      }
      streams_ = TcpStreams::open(loopback(1), why, {}, kLiveness);
      const int port = streams_ ? streams_->listen(0) : -EINVAL;
      if (port <= 0) {
        why += " listen: " + std::string(std::strerror(-port));
        return;
      }
      peer_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(uint16_t(port));
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(peer_, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0)
        why = std::string("connect: ") + std::strerror(errno);
    }).join();
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(why.empty()) << why;
  }
  void TearDown() override {
    if (peer_ >= 0) ::close(peer_);
    if (control_ >= 0) ::close(control_);
  }

  // The shortest bound keepalive allows: 1 s idle, one probe, 2 s in all.
  static constexpr PeerLiveness kLiveness{1, 1};
  int control_ = -1, peer_ = -1;
  std::unique_ptr<TcpStreams> streams_;
};

// The connection is up and idle; then nothing of the peer arrives any more.
// Expect: the stream is reported closed with an error (ETIMEDOUT: TCP's own
// timeout; a route that failed may name itself) within about the bound. Before
// keepalive, no event ever came.
TEST_F(TcpStreamsSilentPeerTest, APeerThatFallsSilentEndsTheStreamWithinTheBound) {
  const StreamEvent accepted = wait_for(*streams_, StreamEvent::kAccepted, std::chrono::seconds(10));
  ASSERT_EQ(accepted.kind, StreamEvent::kAccepted);
  ASSERT_EQ(set_loopback(control_, false), 0);
  const auto start = std::chrono::steady_clock::now();
  const StreamEvent ended = wait_for(*streams_, StreamEvent::kClosed, std::chrono::seconds(30));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(ended.stream, accepted.stream) << "no end reported in 30 s";
  EXPECT_TRUE(ended.error == ETIMEDOUT || ended.error == EHOSTUNREACH ||
              ended.error == ENETUNREACH)
      << std::strerror(ended.error);
  std::printf("[ bound ] a silent peer ended the stream after %.3f s (%s; bound %d ms)\n",
              seconds, std::strerror(ended.error), kLiveness.bound_ms());
}

}  // namespace
}  // namespace softrdma::transport::tcp
