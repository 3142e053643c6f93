// A peer killed with SIGKILL ends its connections at the survivor in bounded time
// (issue 14, defect 10; docs/decisions/rdma-cm.md "A peer that dies",
// docs/decisions/rsockets.md). With the kernel's rdma_cm the kernel sends a dead
// process's DREQs; a softrdma process has nobody to do that, so the survivor learns
// it from its own QP: the work it posts to the dead peer is never acknowledged,
// its QP enters Error, and the rdma_cm connection ends (DISCONNECTED) — or, for an
// rsocket with SO_KEEPALIVE, the keepalive is that work. No timing is asserted:
// each wait has a hang guard of 30 s and the time measured is printed.
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "rdmacm/peer_process.h"

namespace softrdma::rdmacm::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The status of the first completion of `cq` within 30 s, or -1.
int first_completion(ibv_cq* cq) {
  const auto start = Clock::now();
  ibv_wc wc{};
  while (seconds_since(start) < 30) {
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc.status;
    usleep(1000);
  }
  return -1;
}

// The server's first look at its receive side grants the client credits (a
// control message). Done while the client lives, so that after its death nothing
// but the keepalive goes out: that is what must end the stream.
void settle(int fd) {
  char byte;
  ASSERT_EQ(rrecv(fd, &byte, 1, MSG_DONTWAIT), -1);
  ASSERT_EQ(errno, EAGAIN);
}

// The client dies; the server then sends to it. The SEND is never acknowledged,
// the QP exhausts its retries, and the server's rdma_cm id gets DISCONNECTED once,
// as the dead client's DREQ would have given it.
TEST(PeerDeath, KilledClientWithWorkOutstandingIsDisconnected) {
  CmServer server;
  ASSERT_NE(server.listen_id, nullptr);
  PeerProcess client("cm", server.port);
  ASSERT_TRUE(server.accept());
  ASSERT_EQ(client.line(), "connected");
  client.kill_now();
  const auto start = Clock::now();
  ASSERT_TRUE(server.post_send());
  EXPECT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);
  std::printf("[ bound ] killed client, SEND outstanding: DISCONNECTED after %.3f s\n",
              seconds_since(start));
  EXPECT_EQ(first_completion(server.conn->send_cq), IBV_WC_RETRY_EXC_ERR);
  // The application's own disconnect changes nothing more: one event only.
  EXPECT_EQ(rdma_disconnect(server.conn), 0);
  EXPECT_TRUE(server.quiet());
}

// A client that is only stopped (alive, not answering) looks dead to the server,
// whose connection ends; the DREQ the server sends then as a courtesy ends the
// client's connection too once it runs again (IBA 12.9.6), instead of leaving it
// to find out from its own QP.
TEST(PeerDeath, StoppedClientGetsTheSurvivorsDreq) {
  CmServer server;
  ASSERT_NE(server.listen_id, nullptr);
  PeerProcess client("cm", server.port);
  ASSERT_TRUE(server.accept());
  ASSERT_EQ(client.line(), "connected");
  client.stop();
  ASSERT_TRUE(server.post_send());
  EXPECT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);
  client.resume();
  EXPECT_EQ(client.line(), "disconnected");
}

// An rsocket server with SO_KEEPALIVE (period 1 s) blocked in rrecv on a client
// that was killed: its keepalive WRITE goes unanswered and rrecv returns -1 with
// ECONNRESET (rather than blocking for ever, as before keepalives existed).
TEST(PeerDeath, KeepaliveEndsABlockedReadFromAKilledPeer) {
  const uint16_t port = free_port();
  sockaddr_in address = ipv4("127.0.0.1", port);
  int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  ASSERT_EQ(rbind(listener, as_sockaddr(address), sizeof address), 0);
  ASSERT_EQ(rlisten(listener, 4), 0);
  PeerProcess client("rsocket", port);
  int server = raccept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0) << std::strerror(errno);
  ASSERT_EQ(client.line(), "connected");
  int one = 1;
  ASSERT_EQ(rsetsockopt(server, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one), 0);
  ASSERT_EQ(rsetsockopt(server, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), 0);
  settle(server);
  client.kill_now();
  const auto start = Clock::now();
  char byte;
  EXPECT_EQ(rrecv(server, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  std::printf("[ bound ] killed rsocket client, keepalive 1 s: rrecv ended after %.3f s\n",
              seconds_since(start));
  pollfd fds{server, POLLIN | POLLOUT, 0};
  EXPECT_EQ(rpoll(&fds, 1, 0), 1);
  EXPECT_TRUE(fds.revents & POLLERR);
  EXPECT_EQ(rsend(server, "x", 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  rclose(server);
  rclose(listener);
}

// An rsocket server whose client stopped reading fills the client's receive
// buffer, then blocks in rsend waiting for credits; the client is killed. The
// keepalive goes unanswered and rsend returns -1 with ECONNRESET.
TEST(PeerDeath, KeepaliveEndsASendWaitingForCredits) {
  const uint16_t port = free_port();
  sockaddr_in address = ipv4("127.0.0.1", port);
  int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  int big = 1 << 20;  // more send buffer than the client's 128 KiB receive buffer
  ASSERT_EQ(rsetsockopt(listener, SOL_SOCKET, SO_SNDBUF, &big, sizeof big), 0);
  ASSERT_EQ(rbind(listener, as_sockaddr(address), sizeof address), 0);
  ASSERT_EQ(rlisten(listener, 4), 0);
  PeerProcess client("rsocket", port);
  int server = raccept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0) << std::strerror(errno);
  ASSERT_EQ(client.line(), "connected");
  int one = 1;
  ASSERT_EQ(rsetsockopt(server, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one), 0);
  ASSERT_EQ(rsetsockopt(server, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), 0);
  std::vector<char> chunk(16384, 'x');
  size_t sent = 0;
  for (;;) {  // until the credits the client gave are used up
    ssize_t n = rsend(server, chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (n < 0) break;
    sent += size_t(n);
    ASSERT_LT(sent, size_t(64) << 20) << "the client never stopped granting credits";
  }
  ASSERT_EQ(errno, EAGAIN);
  settle(server);
  client.kill_now();
  const auto start = Clock::now();
  EXPECT_EQ(rsend(server, chunk.data(), chunk.size(), 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  std::printf("[ bound ] killed rsocket client, keepalive 1 s: rsend ended after %.3f s\n",
              seconds_since(start));
  rclose(server);
  rclose(listener);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
