// TcpStreams (transport/stream.h): connections over the kernel's TCP on loopback,
// as the iWARP family will use them — accepted and completed connections
// reported by poll(), bytes in order, writes that never block, the ends and
// failures of a connection reported, and rx_fd() readable when poll() has work.
#include "transport/tcp/tcp_streams.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/eventually.h"
#include "support/loopback_listener.h"
#include "transport/fake/fake_network.h"

namespace softrdma::transport::tcp {
namespace {

Gid loopback(uint8_t last) { return fake::ipv4_gid(127, 0, 0, last); }

// Waits (rx_fd, at most ~10 s: a liveness guard, not a timing assertion) until
// `streams` reports an event of `kind`, and returns it; kClosed with error -1 if
// none came.
StreamEvent wait_for(TcpStreams& streams, StreamEvent::Kind kind) {
  std::array<StreamEvent, 16> events;
  for (int round = 0; round < 1000; ++round) {
    pollfd p{streams.rx_fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    const size_t n = streams.poll(events);
    for (size_t i = 0; i < n; ++i)
      if (events[i].kind == kind) return events[i];
  }
  return StreamEvent{kNoStream, StreamEvent::kClosed, 0, -1};
}

std::string read_all(TcpStreams& streams, StreamId id, size_t want) {
  std::string got;
  std::array<uint8_t, 4096> buffer;
  for (int round = 0; round < 1000 && got.size() < want; ++round) {
    wait_for(streams, StreamEvent::kReadable);
    const ssize_t n = streams.read(id, buffer);
    if (n < 0) break;
    got.append(reinterpret_cast<char*>(buffer.data()), size_t(n));
  }
  return got;
}

// `child`'s main thread is in a sleep call: after its last write, only the
// atexit wait of tcp_streams_close.cc makes one (/proc/PID/syscall: proc(5)).
bool waits_in_exit(pid_t child) {
  std::ifstream syscall_file("/proc/" + std::to_string(child) + "/syscall");
  long number = -1;  // "running" when on a CPU: not a number
  if (!(syscall_file >> number)) return false;
  return number == SYS_clock_nanosleep || number == SYS_nanosleep;  // names, not sleeps
}

// The child of ExitWaitsWhileTheDrivingThreadHoldsAFin: connects to `port`, lets
// a thread drive its streams as the progress loop does, disconnects, says so on
// `exiting`, and exits.
[[noreturn]] void run_exiting_client(uint16_t port, int exiting) {
  std::string why;
  const int64_t hour = 3600'000'000'000;
  auto streams = TcpStreams::open(loopback(2), why, {hour, 10'000'000'000, true});
  int err = 0;
  const StreamId c = streams ? streams->connect(loopback(1), port, err) : kNoStream;
  if (c == kNoStream || wait_for(*streams, StreamEvent::kConnected).stream != c) _exit(2);
  streams->close(c, StreamTransport::CloseMode::kAfterPeer);
  std::thread([&streams] {  // the progress loop; the process ends with it running
    for (;;) {
      std::array<StreamEvent, 4> events;
      pollfd p{streams->rx_fd(), POLLIN, 0};
      ::poll(&p, 1, 10);
      streams->poll(events);
    }
  }).detach();
  const char byte = 1;
  if (::write(exiting, &byte, 1) != 1) _exit(3);
  std::exit(0);
}

class TcpStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    server_ = TcpStreams::open(loopback(1), why);
    client_ = TcpStreams::open(loopback(2), why);
    ASSERT_NE(server_, nullptr) << why;
    ASSERT_NE(client_, nullptr) << why;
    port_ = server_->listen(0);
    ASSERT_GT(port_, 0) << std::strerror(-port_);
  }

  // A connection: its id on the client and on the server.
  void connect_pair(StreamId& at_client, StreamId& at_server) {
    int err = 0;
    at_client = client_->connect(loopback(1), uint16_t(port_), err);
    ASSERT_NE(at_client, kNoStream) << std::strerror(err);
    const StreamEvent accepted = wait_for(*server_, StreamEvent::kAccepted);
    ASSERT_EQ(accepted.kind, StreamEvent::kAccepted);
    EXPECT_EQ(accepted.port, port_);
    at_server = accepted.stream;
    const StreamEvent connected = wait_for(*client_, StreamEvent::kConnected);
    ASSERT_EQ(connected.stream, at_client);
  }

  std::unique_ptr<TcpStreams> server_, client_;
  int port_ = 0;
};

TEST_F(TcpStreamsTest, BytesCrossInOrderBothWays) {
  StreamId c = kNoStream, s = kNoStream;
  connect_pair(c, s);
  Gid peer{};
  uint16_t peer_port = 0;
  ASSERT_TRUE(server_->peer_of(s, peer, peer_port));
  EXPECT_EQ(peer, loopback(2)) << "the client connects from its own address";
  char head[] = "MPA ID Req Frame", body[] = " and a payload";
  const iovec parts[] = {{head, std::strlen(head)}, {body, std::strlen(body)}};
  ASSERT_EQ(client_->write(c, parts), ssize_t(std::strlen(head) + std::strlen(body)));
  EXPECT_EQ(read_all(*server_, s, 30), "MPA ID Req Frame and a payload");
  char answer[] = "reply";
  const iovec back[] = {{answer, 5}};
  ASSERT_EQ(server_->write(s, back), 5);
  EXPECT_EQ(read_all(*client_, c, 5), "reply");
}

// TCP's flow control holds what the peer does not read: write() takes part and
// returns, never blocking the engine.
TEST_F(TcpStreamsTest, AWriteThePeerDoesNotReadIsTakenInPartAndNeverBlocks) {
  StreamId c = kNoStream, s = kNoStream;
  connect_pair(c, s);
  std::vector<uint8_t> big(64u << 20, 0x5a);
  const iovec part{big.data(), big.size()};
  size_t taken = 0;
  for (int i = 0; i < 8; ++i) {
    const ssize_t n = client_->write(c, {&part, 1});
    ASSERT_GE(n, 0);
    taken += size_t(n);
  }
  EXPECT_LT(taken, 8 * big.size());
}

TEST_F(TcpStreamsTest, ThePeersCloseEndsTheStreamAfterItsBytes) {
  StreamId c = kNoStream, s = kNoStream;
  connect_pair(c, s);
  char last[] = "last";
  const iovec parts[] = {{last, 4}};
  ASSERT_EQ(client_->write(c, parts), 4);
  client_->close(c, StreamTransport::CloseMode::kNow);
  EXPECT_EQ(read_all(*server_, s, 4), "last");
  std::array<uint8_t, 16> buffer;
  ssize_t n = 0;
  for (int i = 0; i < 100 && n == 0; ++i) {
    wait_for(*server_, StreamEvent::kReadable);
    n = server_->read(s, buffer);
  }
  EXPECT_EQ(n, kEndOfStream);
  EXPECT_EQ(client_->read(c, buffer), -EBADF) << "a closed id is unknown";
}

// A stream closed with bytes it never read still ends with a FIN, not a reset:
// the peer reads the end of the stream (a reset would fail its last SEND).
TEST_F(TcpStreamsTest, ACloseWithUnreadBytesEndsTheStreamWithoutAReset) {
  StreamId c, s;
  connect_pair(c, s);
  const char early[] = "unread";
  const iovec part{const_cast<char*>(early), 6};
  ASSERT_EQ(server_->write(s, std::span(&part, 1)), 6);
  for (int i = 0; i < 100; ++i) {  // the bytes reach the client's socket
    StreamEvent events[4];
    if (client_->poll(events) > 0) break;
    pollfd p{client_->rx_fd(), POLLIN, 0};
    ::poll(&p, 1, 1);
  }
  client_->close(c, StreamTransport::CloseMode::kNow);
  ASSERT_EQ(server_->write(s, std::span(&part, 1)), 6);  // after the close, too
  uint8_t buffer[16];
  ssize_t n = 0;
  for (int i = 0; i < 1000 && n == 0; ++i) {
    StreamEvent events[4];
    server_->poll(events);
    client_->poll(events);  // drains what the closing stream still gets
    n = server_->read(s, buffer);
    pollfd p[2] = {{client_->rx_fd(), POLLIN, 0}, {server_->rx_fd(), POLLIN, 0}};
    if (n == 0) ::poll(p, 2, 1);
  }
  EXPECT_EQ(n, kEndOfStream);  // a reset would be -ECONNRESET
}

// Polls `closing` (whose streams are closing) and reads `s` on `peer` until the
// end of the stream or an error (at most ~10 s: a liveness guard); what read()
// answered last.
ssize_t read_until_end(TcpStreams& peer, StreamId s, TcpStreams& closing) {
  std::array<uint8_t, 64> buffer;
  ssize_t n = 0;
  for (int i = 0; i < 1000 && n >= 0; ++i) {
    std::array<StreamEvent, 4> events;
    pollfd p{closing.rx_fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    closing.poll(events);
    peer.poll(events);
    n = peer.read(s, buffer);
  }
  return n;
}

// A disconnect (kAfterPeer) holds its FIN while the peer still talks: the peer's
// last message is taken, and its sender does not see the end before it closes
// its own side (Linux siw fails a SEND it already wrote when the FIN overtakes it).
TEST_F(TcpStreamsTest, ADisconnectHoldsItsFinUntilThePeerEndsItsSide) {
  std::string why;
  const int64_t hour = 3600'000'000'000;
  client_ = TcpStreams::open(loopback(2), why, {hour, hour});  // only the peer's FIN
  ASSERT_NE(client_, nullptr) << why;
  StreamId c, s;
  connect_pair(c, s);
  client_->close(c, StreamTransport::CloseMode::kAfterPeer);
  const char last[] = "last";
  const iovec part{const_cast<char*>(last), 4};
  ASSERT_EQ(server_->write(s, std::span(&part, 1)), 4);
  std::array<uint8_t, 16> buffer;
  for (int i = 0; i < 50; ++i) {  // a FIN sent at the close would arrive meanwhile
    std::array<StreamEvent, 4> events;
    pollfd p{client_->rx_fd(), POLLIN, 0};
    ::poll(&p, 1, 4);
    client_->poll(events);  // drains "last"
    ASSERT_EQ(server_->read(s, buffer), 0) << "the end came before the peer closed";
  }
  server_->close(s, StreamTransport::CloseMode::kNow);
  // The server's FIN lets the client's leave (with its close, nothing being
  // unread), which ends the server's closing socket in turn.
  for (int i = 0; i < 1000 && client_->closing_streams() + server_->closing_streams() > 0; ++i) {
    std::array<StreamEvent, 4> events;
    pollfd p[2] = {{client_->rx_fd(), POLLIN, 0}, {server_->rx_fd(), POLLIN, 0}};
    ::poll(p, 2, 10);
    client_->poll(events);
    server_->poll(events);
  }
  EXPECT_EQ(client_->closing_streams(), 0u);
  EXPECT_EQ(server_->closing_streams(), 0u);
}

// A peer that is silent gets the FIN once it has been quiet a while: the timer
// wakes the loop sleeping on rx_fd, and the peer reads the end, not a reset.
TEST_F(TcpStreamsTest, ADisconnectFromAQuietPeerEndsWithAFinAfterTheQuietSpell) {
  StreamId c, s;
  connect_pair(c, s);
  client_->close(c, StreamTransport::CloseMode::kAfterPeer);
  EXPECT_EQ(client_->closing_streams(), 1u);
  pollfd p{client_->rx_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1) << "the closing timer never woke rx_fd";
  EXPECT_EQ(read_until_end(*server_, s, *client_), kEndOfStream);
}

// A process that ends its device while a disconnect holds its FIN still ends the
// stream with a FIN.
TEST_F(TcpStreamsTest, DestroyingTheTransportLetsAHeldFinLeave) {
  StreamId c, s;
  connect_pair(c, s);
  client_->close(c, StreamTransport::CloseMode::kAfterPeer);
  client_.reset();
  std::array<uint8_t, 16> buffer;
  ssize_t n = 0;
  for (int i = 0; i < 1000 && n == 0; ++i) {
    std::array<StreamEvent, 4> events;
    pollfd p{server_->rx_fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    server_->poll(events);
    n = server_->read(s, buffer);
  }
  EXPECT_EQ(n, kEndOfStream);
}

// A process that exits right after its disconnect (perftest) still holds the FIN:
// exit() waits while the thread that drives the streams sends it, here once the
// peer's own FIN came (the quiet spell is made endless).
TEST(TcpStreamsExitTest, ExitWaitsWhileTheDrivingThreadHoldsAFin) {
  sockaddr_in at;
  const int listener = testing_support::listen_on_loopback(at);
  ASSERT_GE(listener, 0);
  int exiting[2];
  ASSERT_EQ(::pipe(exiting), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) run_exiting_client(ntohs(at.sin_port), exiting[1]);  // never returns
  const int peer = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  char byte = 0;
  ASSERT_EQ(::read(exiting[0], &byte, 1), 1) << "the child did not reach exit()";
  // Expect: the child's main thread waits inside exit() (the atexit wait of
  // tcp_streams_close.cc sleeps between looks); a child that did not wait ends.
  EXPECT_TRUE(testing_support::eventually([&] { return waits_in_exit(child); }))
      << "the child's main thread never slept in exit()";
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), 0) << "exit() did not wait for the held FIN";
  char buffer[16];
  EXPECT_EQ(::recv(peer, buffer, sizeof buffer, MSG_DONTWAIT), -1) << "the FIN was not held";
  ::shutdown(peer, SHUT_WR);  // the peer's FIN: the child's leaves, then it exits
  pollfd p{peer, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1);
  EXPECT_EQ(::recv(peer, buffer, sizeof buffer, 0), 0) << "a FIN, not a reset";
  int status = -1;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(peer);
  ::close(listener);
  ::close(exiting[0]);
  ::close(exiting[1]);
}

// The child of the KilledProcess tests: connects to `port`, closes the stream
// first when `disconnect` (a held FIN: kAfterPeer, quiet spell endless), says
// so on `ready`, and waits to be killed.
[[noreturn]] void run_client_until_killed(uint16_t port, bool disconnect, int ready) {
  std::string why;
  const int64_t hour = 3600'000'000'000;
  auto streams = TcpStreams::open(loopback(2), why, {hour, hour, false});
  int err = 0;
  const StreamId c = streams ? streams->connect(loopback(1), port, err) : kNoStream;
  if (c == kNoStream || wait_for(*streams, StreamEvent::kConnected).stream != c) _exit(2);
  if (disconnect) streams->close(c, StreamTransport::CloseMode::kAfterPeer);
  const char byte = 1;
  if (::write(ready, &byte, 1) != 1) _exit(3);
  for (;;) ::pause();
}

// What the peer's recv answers once the child (run_client_until_killed) is
// SIGKILLed: 0 for a FIN, -errno for a reset.
ssize_t peer_sees_after_kill(bool disconnect) {
  sockaddr_in at;
  const int listener = testing_support::listen_on_loopback(at);
  int ready[2];
  if (listener < 0 || ::pipe(ready) != 0) return -1000;
  const pid_t child = ::fork();
  if (child == 0) run_client_until_killed(ntohs(at.sin_port), disconnect, ready[1]);
  const int peer = ::accept(listener, nullptr, nullptr);
  char byte = 0;
  ssize_t seen = -1000;
  if (peer >= 0 && ::read(ready[0], &byte, 1) == 1) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    pollfd p{peer, POLLIN, 0};
    char buffer[16];
    if (::poll(&p, 1, 10'000) == 1) {
      seen = ::recv(peer, buffer, sizeof buffer, 0);
      if (seen < 0) seen = -errno;
    }
  } else {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  for (int fd : {peer, listener, ready[0], ready[1]})
    if (fd >= 0) ::close(fd);
  return seen;
}

// A process killed with a stream up (its kernel closes the socket): the peer
// sees a reset, not the FIN of an orderly close, and so can tell a lost peer
// from one that disconnected (issue 27, rsockets' ECONNRESET over iWARP).
TEST(TcpStreamsExitTest, AProcessKilledWithAStreamUpResetsIt) {
  EXPECT_EQ(peer_sees_after_kill(false), -ECONNRESET);
}

// A stream the process closed itself ends with a FIN even if the process is
// killed before that FIN left: its disconnect was orderly.
TEST(TcpStreamsExitTest, AProcessKilledAfterItsDisconnectStillSendsAFin) {
  EXPECT_EQ(peer_sees_after_kill(true), 0);
}

TEST_F(TcpStreamsTest, AConnectionNobodyTakesIsReportedClosedWithItsError) {
  server_->stop_listening(uint16_t(port_));
  int err = 0;
  const StreamId c = client_->connect(loopback(1), uint16_t(port_), err);
  ASSERT_NE(c, kNoStream) << std::strerror(err);
  const StreamEvent closed = wait_for(*client_, StreamEvent::kClosed);
  EXPECT_EQ(closed.stream, c);
  EXPECT_EQ(closed.error, ECONNREFUSED);
  char byte = 0;
  const iovec part{&byte, 1};
  EXPECT_LT(client_->write(c, {&part, 1}), 0);
}

TEST_F(TcpStreamsTest, ListeningTwiceOnAPortIsRefused) {
  EXPECT_EQ(server_->listen(uint16_t(port_)), -EADDRINUSE);
  const int other = server_->listen(0);
  EXPECT_GT(other, 0);
  EXPECT_NE(other, port_);
}

}  // namespace
}  // namespace softrdma::transport::tcp
