// A peer that dies ends its connections at the survivor in bounded time (issue
// 14, defect 10; docs/decisions/rdma-cm.md "A peer that dies",
// docs/decisions/rsockets.md). With the kernel's rdma_cm the kernel sends a dead
// process's DREQs; softrdma has two ways to learn it instead:
// - a peer process of this host is watched (a pidfd): its exit ends the
//   connection at once, as its DREQ would (KilledClient* tests);
// - a peer that does not answer — on another host it may have died; here a
//   stopped process (SIGSTOP) stands for it, since a killed one of this host is
//   seen through its pidfd first — is found by the QP: work the survivor posts,
//   or an rsocket's keepalive, is never acknowledged, the QP enters Error after
//   its retries and the connection ends (Unanswering* and Keepalive* tests).
// No timing is asserted: each wait has a hang guard of 30 s and the time
// measured is printed ("[ bound ]").
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rdmacm/peer_process.h"
#include "support/eventually.h"

namespace softrdma::rdmacm::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The status of the first completion of `cq` within 30 s, or -1.
int first_completion(ibv_cq* cq) {
  ibv_wc wc{};
  const bool polled = softrdma::testing_support::eventually(
      [&] { return ibv_poll_cq(cq, 1, &wc) == 1; }, std::chrono::seconds(30));
  return polled ? int(wc.status) : -1;
}

// An rsocket listening on 127.0.0.1:`port`; `send_buffer` (SO_SNDBUF, set before
// binding, as accepted sockets inherit it) when not 0. -1 on failure.
int rsocket_listener(uint16_t port, int send_buffer = 0) {
  sockaddr_in address = ipv4("127.0.0.1", port);
  const int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return -1;
  if ((send_buffer != 0 && rsetsockopt(listener, SOL_SOCKET, SO_SNDBUF, &send_buffer,
                                       sizeof send_buffer) != 0) ||
      rbind(listener, as_sockaddr(address), sizeof address) != 0 || rlisten(listener, 4) != 0) {
    rclose(listener);
    return -1;
  }
  return listener;
}

// The server's first look at its receive side grants the client credits (a
// control message). Done while the client answers, and followed by 200 ms of
// rpoll (the client writes nothing) for that message to be acknowledged, so that
// afterwards nothing is outstanding and what ends the stream is what the test is
// about: the keepalive, or the flush when the client's exit is seen. Should the
// acknowledgement come later, that message's failure ends the stream instead,
// with the same result: never a false failure.
void settle(int fd) {
  char byte;
  ASSERT_EQ(rrecv(fd, &byte, 1, MSG_DONTWAIT), -1);
  ASSERT_EQ(errno, EAGAIN);
  pollfd idle{fd, POLLIN, 0};
  ASSERT_EQ(rpoll(&idle, 1, 200), 0);
}

// On one host nothing needs to be posted: the server's agent watches the client
// process (a pidfd) and its exit ends the connection as the kernel's rdma_cm
// would, with the client's DREQ.
TEST(PeerDeath, KilledClientOfAnIdleServerIsDisconnected) {
  CmServer server;
  ASSERT_NE(server.listen_id, nullptr);
  PeerProcess client("cm", server.port);
  ASSERT_TRUE(server.accept());
  ASSERT_EQ(client.line(), "connected");
  client.kill_now();
  const auto start = Clock::now();
  EXPECT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);
  std::printf("[ bound ] killed client, idle server, one host: DISCONNECTED after %.3f s\n",
              seconds_since(start));
  // The connection's QP is in Error, as after a DREQ: posted work is flushed.
  ASSERT_TRUE(server.post_send());
  EXPECT_EQ(first_completion(server.conn->send_cq), IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(server.quiet());
}

// perftest's control connection at exit: the QP rdma_create_qp gave the id is
// destroyed with ibv_destroy_qp(3), not rdma_destroy_qp(3), and the id stays
// connected. The agent moved id->qp to Error when the peer exited (or its DREQ
// came): a freed QP, and the server of conformance.ib_read_bw.rdma_cm_R died of
// SIGSEGV after its report. Now the id forgets the QP when it is destroyed (id->qp
// is null, as after rdma_destroy_qp) and the agent leaves it alone. A QP of the
// application's own, made right after, usually gets the freed one's memory: a
// dangling id->qp would move that one to Error instead of crashing.
TEST(PeerDeath, QpDestroyedWithoutItsIdIsNotTouchedWhenThePeerExits) {
  CmServer server;
  ASSERT_NE(server.listen_id, nullptr);
  PeerProcess client("cm", server.port);
  ASSERT_TRUE(server.accept());
  ASSERT_EQ(client.line(), "connected");
  ibv_qp* destroyed = server.conn->qp;
  ASSERT_EQ(ibv_destroy_qp(destroyed), 0);
  EXPECT_EQ(server.conn->qp, nullptr);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.send_cq = attr.recv_cq = server.conn->send_cq;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ibv_qp* mine = ibv_create_qp(server.conn->pd, &attr);
  ASSERT_NE(mine, nullptr) << std::strerror(errno);
  std::printf("[ note ] the application's new QP %s the destroyed one's memory\n",
              mine == destroyed ? "has" : "does not have");
  client.kill_now();
  EXPECT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);
  ibv_qp_attr now{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(mine, &now, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(now.qp_state, IBV_QPS_RESET);
  EXPECT_EQ(ibv_destroy_qp(mine), 0);
  server.conn->qp = nullptr;  // (dangling if the id kept it: not for ~CmServer)
  EXPECT_TRUE(server.quiet());
}

// The client stops answering; the server then sends to it. By the wire the SEND
// is never acknowledged and the QP exhausts its retries (IBV_WC_RETRY_EXC_ERR);
// on the same-host path the server places it in the stopped client's posted
// receive, as an RNIC would (docs/decisions/same-host.md "SENDs"), and the QP's
// idle probe, which the stopped process does not answer, ends it. Either way the
// server's id gets DISCONNECTED once. The DREQ the server sends then as a courtesy
// (IBA 12.9.6) ends the client's connection too once it runs again, instead of
// leaving it to find out from its own QP.
TEST(PeerDeath, UnansweringClientWithWorkOutstandingIsDisconnected) {
  CmServer server;
  ASSERT_NE(server.listen_id, nullptr);
  PeerProcess client("cm", server.port);
  ASSERT_TRUE(server.accept());
  ASSERT_EQ(client.line(), "connected");
  client.stop();
  const auto start = Clock::now();
  ASSERT_TRUE(server.post_send());
  EXPECT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);
  std::printf("[ bound ] unanswering client, SEND outstanding: DISCONNECTED after %.3f s\n",
              seconds_since(start));
  const char* transport = std::getenv("SOFTRDMA_TRANSPORT");
  const bool by_wire = transport != nullptr && std::strcmp(transport, "udp") == 0;
  EXPECT_EQ(first_completion(server.conn->send_cq),
            by_wire ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS);
  // The application's own disconnect changes nothing more: one event only.
  EXPECT_EQ(rdma_disconnect(server.conn), 0);
  EXPECT_TRUE(server.quiet());
  client.resume();
  EXPECT_EQ(client.line(), "disconnected");
}

// An rsocket server with SO_KEEPALIVE (period 1 s) blocked in rrecv on a client
// that stopped answering: its keepalive WRITE goes unanswered and rrecv returns
// -1 with ECONNRESET (rather than blocking for ever, as before keepalives).
TEST(PeerDeath, KeepaliveEndsABlockedReadFromAnUnansweringPeer) {
  const uint16_t port = free_port();
  const int listener = rsocket_listener(port);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  PeerProcess client("rsocket", port);
  int server = raccept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0) << std::strerror(errno);
  ASSERT_EQ(client.line(), "connected");
  int one = 1;
  ASSERT_EQ(rsetsockopt(server, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one), 0);
  ASSERT_EQ(rsetsockopt(server, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), 0);
  settle(server);
  client.stop();
  const auto start = Clock::now();
  char byte;
  EXPECT_EQ(rrecv(server, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  std::printf("[ bound ] unanswering rsocket client, keepalive 1 s: rrecv ended after %.3f s\n",
              seconds_since(start));
  pollfd fds{server, POLLIN | POLLOUT, 0};
  EXPECT_EQ(rpoll(&fds, 1, 0), 1);
  EXPECT_TRUE(fds.revents & POLLERR);
  EXPECT_EQ(rsend(server, "x", 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  rclose(server);
  rclose(listener);
}

// An rsocket server blocked in rrecv, without keepalives, on a client of this host
// that is killed: the client's exit ends the connection (its QP to Error), and
// rrecv returns -1 with ECONNRESET, not 0: the peer did not close, it died.
TEST(PeerDeath, KilledClientEndsAnIdleBlockedReadOnOneHost) {
  const uint16_t port = free_port();
  const int listener = rsocket_listener(port);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  PeerProcess client("rsocket", port);
  int server = raccept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0) << std::strerror(errno);
  ASSERT_EQ(client.line(), "connected");
  settle(server);
  client.kill_now();
  const auto start = Clock::now();
  char byte;
  EXPECT_EQ(rrecv(server, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  std::printf("[ bound ] killed rsocket client, no keepalive, one host: rrecv ended after %.3f s\n",
              seconds_since(start));
  rclose(server);
  rclose(listener);
}

// Issue 27 finding 2: after SO_ERROR was read (and so cleared), the reset stream
// is still an error: rrecv and rsend answer -1 with errno ECONNRESET on every
// call, never -1 with errno untouched (docs/decisions/rsockets.md "A peer that dies").
TEST(PeerDeath, ResetStaysAnErrorAfterSoErrorWasRead) {
  const uint16_t port = free_port();
  const int listener = rsocket_listener(port);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  PeerProcess client("rsocket", port);
  int server = raccept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0) << std::strerror(errno);
  ASSERT_EQ(client.line(), "connected");
  settle(server);
  client.kill_now();
  char byte;
  EXPECT_EQ(rrecv(server, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  int err = 0;
  socklen_t len = sizeof err;
  EXPECT_EQ(rgetsockopt(server, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, ECONNRESET);
  EXPECT_EQ(rgetsockopt(server, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, 0);  // read once, as getsockopt(2)
  for (int call = 0; call < 2; ++call) {
    errno = 0;
    EXPECT_EQ(rrecv(server, &byte, 1, 0), -1);
    EXPECT_EQ(errno, ECONNRESET);
    errno = 0;
    EXPECT_EQ(rsend(server, "x", 1, 0), -1);
    EXPECT_EQ(errno, ECONNRESET);
  }
  pollfd fds{server, POLLIN, 0};
  EXPECT_EQ(rpoll(&fds, 1, 0), 1);
  EXPECT_TRUE(fds.revents & POLLERR);
  rclose(server);
  rclose(listener);
}

// An rsocket server whose client does not read fills the client's receive
// buffer, then blocks in rsend waiting for credits; the client stops answering.
// The keepalive goes unanswered and rsend returns -1 with ECONNRESET.
TEST(PeerDeath, KeepaliveEndsASendWaitingForCreditsFromAnUnansweringPeer) {
  const uint16_t port = free_port();
  // More send buffer than the client's 128 KiB receive buffer.
  const int listener = rsocket_listener(port, 1 << 20);
  ASSERT_GE(listener, 0) << std::strerror(errno);
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
  client.stop();
  const auto start = Clock::now();
  EXPECT_EQ(rsend(server, chunk.data(), chunk.size(), 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  std::printf("[ bound ] unanswering rsocket client, keepalive 1 s: rsend ended after %.3f s\n",
              seconds_since(start));
  rclose(server);
  rclose(listener);
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
