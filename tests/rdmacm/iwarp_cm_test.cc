// rdma_cm over iWARP through the public API (docs/decisions/iwarp-cm.md), with a
// raw TCP socket of the test as the peer: what a listener makes of an MPA
// request and of a non-MPA client, what rdma_reject sends, what rdma_connect
// sends and makes of a rejection or a refused port. No connection here reaches
// the engine (softrdma_iwarp_attach): rping over iWARP covers that. Part of
// rdmacm_iwarp_api_test, whose device is the iWARP one (iwarp_device.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdmacm/connecting.h"
#include "rdmacm/iwarp_device.h"

namespace softrdma::rdmacm::testing {
namespace {



// Reads exactly n bytes within 10 s (a hang guard; no timing is asserted); what
// came, shorter if the peer closed.
std::string read_exactly(int fd, size_t n) {
  std::string out;
  while (out.size() < n) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) break;
    char buffer[512];
    const ssize_t got = recv(fd, buffer, std::min(sizeof buffer, n - out.size()), 0);
    if (got <= 0) break;
    out.append(buffer, size_t(got));
  }
  return out;
}

int tcp_connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = ipv4("127.0.0.1", port);
  if (connect(fd, as_sockaddr(a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// RFC 5044 §7.1 / RFC 6581 §5 by hand: a revision-2 request with Linux's
// enhanced flag, IRD 3 and ORD 5, peer-to-peer offering WRITE and READ.
std::string mpa_request(const std::string& data) {
  std::string f = "MPA ID Req Frame";
  const size_t pd = 4 + data.size();
  f += {char(0x10), char(2), char(pd >> 8), char(pd & 0xff)};
  f += {char(0x80), char(3), char(0xc0), char(5)};
  return f + data;
}

struct Listener {
  Side side;
  uint16_t port = free_port();
  Listener() {
    EXPECT_EQ(rdma_create_id(side.channel, &side.id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in a = ipv4("127.0.0.1", port);
    EXPECT_EQ(rdma_bind_addr(side.id, as_sockaddr(a)), 0);
    EXPECT_EQ(rdma_listen(side.id, 4), 0);
  }
};

TEST(Iwarp, AnMpaRequestBecomesConnectRequestAndRejectSendsRWithPrivateData) {
  ASSERT_IWARP_DEVICE();
  Listener server;
  const int peer = tcp_connect(server.port);
  ASSERT_GE(peer, 0);
  const std::string request = mpa_request("hi there");
  ASSERT_EQ(send(peer, request.data(), request.size(), 0), ssize_t(request.size()));
  rdma_cm_event* event = expect_event(server.side.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->listen_id, server.side.id);
  EXPECT_EQ(std::string(static_cast<const char*>(event->param.conn.private_data),
                        event->param.conn.private_data_len),
            "hi there");
  // rdma_cm(7)'s view: what the peer will issue (its ORD) we serve.
  EXPECT_EQ(event->param.conn.responder_resources, 5);
  EXPECT_EQ(event->param.conn.initiator_depth, 3);
  rdma_cm_id* child = event->id;
  EXPECT_EQ(ntohs(rdma_get_src_port(child)), server.port);
  rdma_ack_cm_event(event);
  ASSERT_EQ(rdma_reject(child, "no", 2), 0);
  const std::string reply = read_exactly(peer, 20 + 4 + 2);
  ASSERT_EQ(reply.size(), 26u);
  EXPECT_EQ(reply.substr(0, 16), "MPA ID Rep Frame");
  EXPECT_TRUE(reply[16] & 0x20);  // R
  EXPECT_EQ(reply.substr(24), "no");
  EXPECT_EQ(read_exactly(peer, 1), "");  // then the connection closes
  close(peer);
  rdma_destroy_id(child);
}

TEST(Iwarp, ANonMpaClientIsClosedAndNoRequestIsDelivered) {
  ASSERT_IWARP_DEVICE();
  Listener server;
  const int peer = tcp_connect(server.port);
  ASSERT_GE(peer, 0);
  const std::string http = "GET / HTTP/1.1\r\n\r\n";
  send(peer, http.data(), http.size(), MSG_NOSIGNAL);
  EXPECT_EQ(read_exactly(peer, 1), "");
  pollfd p{server.side.channel->fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 100), 0);
  close(peer);
}

// The active side against a TCP server of the test that plays the responder.
struct RawServer {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  uint16_t port = 0;
  RawServer() {
    sockaddr_in a = ipv4("127.0.0.1", 0);
    socklen_t length = sizeof a;
    bind(listener, as_sockaddr(a), sizeof a);
    listen(listener, 1);
    getsockname(listener, as_sockaddr(a), &length);
    port = ntohs(a.sin_port);
  }
  ~RawServer() { close(listener); }
};

void resolve_with_qp(Side& client, uint16_t port) {
  ASSERT_EQ(rdma_create_id(client.channel, &client.id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in a = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_resolve_addr(client.id, nullptr, as_sockaddr(a), 2000), 0);
  rdma_ack_cm_event(expect_event(client.channel, RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_EQ(rdma_resolve_route(client.id, 2000), 0);
  rdma_ack_cm_event(expect_event(client.channel, RDMA_CM_EVENT_ROUTE_RESOLVED));
  ibv_qp_init_attr attr = rc_attr();
  ASSERT_EQ(rdma_create_qp(client.id, nullptr, &attr), 0);
}

TEST(Iwarp, ConnectSendsARevisionTwoRequestAndAnMpaRejectIsRejected) {
  ASSERT_IWARP_DEVICE();
  RawServer server;
  Side client;
  resolve_with_qp(client, server.port);
  rdma_conn_param param{};
  param.private_data = "abc";
  param.private_data_len = 3;
  param.responder_resources = 1;
  param.initiator_depth = 1;
  ASSERT_EQ(rdma_connect(client.id, &param), 0);
  const int peer = accept(server.listener, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  const std::string request = read_exactly(peer, 20 + 4 + 3);
  ASSERT_EQ(request.size(), 27u);
  EXPECT_EQ(request.substr(0, 16), "MPA ID Req Frame");
  EXPECT_EQ(uint8_t(request[16]), 0x10);  // enhanced; no CRC by default
  EXPECT_EQ(request[17], 2);
  EXPECT_TRUE(uint8_t(request[20]) & 0x80);            // peer-to-peer
  EXPECT_EQ(uint8_t(request[22]) & 0xc0, 0xc0);        // WRITE and READ RTR offered
  EXPECT_EQ(request.substr(24), "abc");
  std::string reject = "MPA ID Rep Frame";
  reject += {char(0x30), char(2), char(0), char(4 + 4)};
  reject += {char(0), char(0), char(0), char(0)};
  reject += "full";
  send(peer, reject.data(), reject.size(), 0);
  rdma_cm_event* event = expect_event(client.channel, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->status, -ECONNRESET);  // siw's status for an MPA reject
  EXPECT_EQ(std::string(static_cast<const char*>(event->param.conn.private_data),
                        event->param.conn.private_data_len),
            "full");
  rdma_ack_cm_event(event);
  close(peer);
}

TEST(Iwarp, AConnectToAPortNobodyListensOnIsRejectedWithEconnrefused) {
  ASSERT_IWARP_DEVICE();
  uint16_t port = 0;
  {
    RawServer closed;  // a port just free
    port = closed.port;
  }
  Side client;
  resolve_with_qp(client, port);
  rdma_conn_param param{};
  ASSERT_EQ(rdma_connect(client.id, &param), 0);
  rdma_cm_event* event = expect_event(client.channel, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->status, -ECONNREFUSED);  // cma_iw_handler: REJECTED
  rdma_ack_cm_event(event);
}

// perftest's rdma_cm retry (its client destroys the ids and the channel after a
// REJECTED and starts again, the QP left to the last): each id whose connect was
// refused goes with its socket, and the next ids connect as the first did. Run
// under ASan, a socket or event the agent kept of a destroyed id shows here.
TEST(Iwarp, RefusedConnectsDestroyedAndMadeAgainInALoopLeaveNothingBehind) {
  ASSERT_IWARP_DEVICE();
  uint16_t port = 0;
  {
    RawServer closed;
    port = closed.port;
  }
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    auto* side = new Side;
    resolve_with_qp(*side, port);
    ibv_qp* qp = side->id->qp;
    rdma_conn_param param{};
    ASSERT_EQ(rdma_connect(side->id, &param), 0);
    rdma_cm_event* event = expect_event(side->channel, RDMA_CM_EVENT_REJECTED);
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(event->status, -ECONNREFUSED);
    rdma_ack_cm_event(event);
    // The id first, its QP after (perftest 4.5-0.17 never destroys it before).
    ASSERT_EQ(rdma_destroy_id(side->id), 0);
    side->id = nullptr;
    delete side;
    ASSERT_EQ(ibv_destroy_qp(qp), 0);
  }
  // A connect destroyed while TCP is still coming up (nobody answers the SYN
  // soon on a port that listens with a full backlog) goes the same way.
  RawServer full;
  const int filler = tcp_connect(full.port);
  ASSERT_GE(filler, 0);
  for (int round = 0; round < 5; ++round) {
    Side side;
    resolve_with_qp(side, full.port);
    rdma_conn_param param{};
    ASSERT_EQ(rdma_connect(side.id, &param), 0);
    pollfd p{side.channel->fd, POLLIN, 0};
    poll(&p, 1, 20);
  }
  close(filler);
}

// perftest -R: the server ends its first listener and listens again on the same
// port after a handshake; a client quicker than that second rdma_listen is
// REJECTED with -ECONNREFUSED (a bound id is not a listening one: the kernel's
// iw_cm listens at rdma_listen too), and its next try reaches the listener.
TEST(Iwarp, AConnectBeforeTheSecondListenIsRefusedAndTheNextOneArrives) {
  ASSERT_IWARP_DEVICE();
  const uint16_t port = free_port();
  {
    Side first;  // perftest's control listener, ended before the handshake
    ASSERT_EQ(rdma_create_id(first.channel, &first.id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in a = ipv4("0.0.0.0", port);
    ASSERT_EQ(rdma_bind_addr(first.id, as_sockaddr(a)), 0);
    ASSERT_EQ(rdma_listen(first.id, 1), 0);
  }
  Side server;
  ASSERT_EQ(rdma_create_id(server.channel, &server.id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in a = ipv4("0.0.0.0", port);
  ASSERT_EQ(rdma_bind_addr(server.id, as_sockaddr(a)), 0);
  {
    Side early;
    resolve_with_qp(early, port);
    rdma_conn_param param{};
    ASSERT_EQ(rdma_connect(early.id, &param), 0);
    rdma_cm_event* event = expect_event(early.channel, RDMA_CM_EVENT_REJECTED);
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(event->status, -ECONNREFUSED);
    rdma_ack_cm_event(event);
  }
  ASSERT_EQ(rdma_listen(server.id, 1), 0);
  errno = 0;
  EXPECT_EQ(rdma_listen(server.id, 1), -1);  // once per id: no second TCP listener
  EXPECT_EQ(errno, EINVAL);
  Side late;
  resolve_with_qp(late, port);
  rdma_conn_param param{};
  ASSERT_EQ(rdma_connect(late.id, &param), 0);
  rdma_cm_event* request = expect_event(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  rdma_cm_id* child = request->id;
  rdma_ack_cm_event(request);
  ASSERT_EQ(rdma_reject(child, nullptr, 0), 0);
  rdma_cm_event* rejected = expect_event(late.channel, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(rejected, nullptr);
  EXPECT_EQ(rejected->status, -ECONNRESET);  // an MPA reject this time
  rdma_ack_cm_event(rejected);
  rdma_destroy_id(child);
}

// A listener destroyed and made again on its port at once (perftest's control
// listener, then its data listener): one TCP listener at any time, and the new
// one takes the connections.
// TCP sockets of the host listening on `port` (/proc/net/tcp and tcp6, state 0A).
int listening_on(uint16_t port) {
  int count = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    FILE* f = fopen(table, "r");
    if (f == nullptr) continue;
    char line[512];
    while (fgets(line, sizeof line, f) != nullptr) {
      char local[128], remote[128], state[8];
      if (sscanf(line, "%*s %127s %127s %7s", local, remote, state) != 3) continue;
      const char* colon = strrchr(local, ':');
      if (colon != nullptr && strtoul(colon + 1, nullptr, 16) == port &&
          strcmp(state, "0A") == 0)
        ++count;
    }
    fclose(f);
  }
  return count;
}

TEST(Iwarp, AListenerDestroyedAndMadeAgainOnItsPortIsTheOnlyOneListening) {
  ASSERT_IWARP_DEVICE();
  const uint16_t port = free_port();
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE(round);
    Side server;
    ASSERT_EQ(rdma_create_id(server.channel, &server.id, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in a = ipv4("0.0.0.0", port);
    ASSERT_EQ(rdma_bind_addr(server.id, as_sockaddr(a)), 0);
    ASSERT_EQ(rdma_listen(server.id, 1), 0);
    EXPECT_EQ(listening_on(port), 1);
    const int peer = tcp_connect(port);
    ASSERT_GE(peer, 0);
    const std::string request = mpa_request("r");
    ASSERT_EQ(send(peer, request.data(), request.size(), 0), ssize_t(request.size()));
    rdma_cm_event* event = expect_event(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(event->listen_id, server.id);
    rdma_cm_id* child = event->id;
    rdma_ack_cm_event(event);
    rdma_destroy_id(child);
    close(peer);
    ASSERT_EQ(rdma_destroy_id(server.id), 0);
    server.id = nullptr;
    EXPECT_EQ(listening_on(port), 0);  // at once: the retired socket is shut down
  }
}

TEST(Iwarp, InitQpAttrGivesTheKernelsIwarpAttributes) {
  ASSERT_IWARP_DEVICE();
  Side client;
  ASSERT_EQ(rdma_create_id(client.channel, &client.id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in a = ipv4("127.0.0.1", 0);
  ASSERT_EQ(rdma_bind_addr(client.id, as_sockaddr(a)), 0);
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(rdma_init_qp_attr(client.id, &attr, &mask), 0);
  EXPECT_TRUE(mask & IBV_QP_ACCESS_FLAGS);
  EXPECT_TRUE(attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
  EXPECT_TRUE(attr.qp_access_flags & IBV_ACCESS_REMOTE_READ);
  EXPECT_FALSE(attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC);  // no RFC 7306
  attr.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(rdma_init_qp_attr(client.id, &attr, &mask), 0);
  EXPECT_EQ(mask, 0);  // the connection manager moves it (iwcm_init_qp_rts_attr)
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
