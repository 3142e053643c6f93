// The peers of rdmacm_test's PeerDeath tests (peer_death_test.cc): a process
// that connects to (or accepts from) IPV4:PORT and prints "connected"; the test
// kills (SIGKILL) or stops (SIGSTOP) one end.
//   rdmacm_test_peer cm IPV4 PORT         an rdma_cm RC connection with a QP; then
//                                         "disconnected" on RDMA_CM_EVENT_DISCONNECTED
//   rdmacm_test_peer rsocket IPV4 PORT    a stream rsocket that never reads; it waits
//                                         for its stdin to close
//   rdmacm_test_peer cm-server IPV4 PORT  accepts one rdma_cm connection, then as `cm`
//   rdmacm_test_peer rsocket-server IPV4 PORT
//                                         accepts one rsocket and blocks in rrecv; prints
//                                         "rrecv <ret> <errno name>" when it returns; with
//                                         PEER_KEEPALIVE=1 in its environment, after
//                                         SO_KEEPALIVE with TCP_KEEPIDLE 1 s
//   rdmacm_test_peer bind-loopback IPV4 PORT
//                                         (loopback_bind_test.cc) binds an id to
//                                         127.0.0.1 and says whether it has a device
//                                         ("bound: device" / "bound: no device"), listens
//                                         on it ("listening"), then resolves IPV4:PORT
//                                         from another such id ("resolved: ...")
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <string>

namespace {

sockaddr_in server_address(const char* address, const char* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(std::atoi(port)));
  inet_pton(AF_INET, address, &a.sin_addr);
  return a;
}

bool expect_event(rdma_event_channel* channel, rdma_cm_event_type type) {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) return false;
  const bool ok = event->event == type;
  if (!ok) std::fprintf(stderr, "peer: %s, expected %s\n", rdma_event_str(event->event), rdma_event_str(type));
  rdma_ack_cm_event(event);
  return ok;
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

// ESTABLISHED was delivered: report it, then wait for the end.
int connected_until_disconnected(rdma_event_channel* channel, rdma_cm_id* id) {
  say("connected");
  if (!expect_event(channel, RDMA_CM_EVENT_DISCONNECTED)) return 1;
  say("disconnected");
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(channel);
  return 0;
}

ibv_qp_init_attr qp_attributes() {
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  return attr;
}

int cm_server(const char* address, const char* port) {
  sockaddr_in local = server_address(address, port);
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  if (channel == nullptr || rdma_create_id(channel, &listener, nullptr, RDMA_PS_TCP) != 0 ||
      rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&local)) != 0 || rdma_listen(listener, 4) != 0)
    return 1;
  say("listening");
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0 || event->event != RDMA_CM_EVENT_CONNECT_REQUEST) return 1;
  rdma_cm_id* id = event->id;
  rdma_ack_cm_event(event);
  ibv_qp_init_attr attr = qp_attributes();
  if (rdma_create_qp(id, nullptr, &attr) != 0) return 1;
  rdma_conn_param param{};
  param.retry_count = 7;
  if (rdma_accept(id, &param) != 0 || !expect_event(channel, RDMA_CM_EVENT_ESTABLISHED)) return 1;
  return connected_until_disconnected(channel, id);
}

int rsocket_server(const char* address, const char* port) {
  sockaddr_in local = server_address(address, port);
  int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0 || rbind(listener, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      rlisten(listener, 4) != 0)
    return 1;
  say("listening");
  int fd = raccept(listener, nullptr, nullptr);
  if (fd < 0) return 1;
  if (const char* keepalive = std::getenv("PEER_KEEPALIVE"); keepalive != nullptr && *keepalive == '1') {
    int one = 1;
    if (rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one) != 0 ||
        rsetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0)
      return 1;
  }
  char byte;
  // The first look grants the client credits (a control message), while it lives;
  // 200 ms of rpoll on a socket the client never writes to let that message be
  // acknowledged, so that the rrecv below has nothing outstanding (an idle
  // survivor). Only the probe tests need that: should the acknowledgement come
  // later, the stream ends by that message's retries, earlier than by the probe.
  if (rrecv(fd, &byte, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN) return 1;
  pollfd idle{fd, POLLIN, 0};
  if (rpoll(&idle, 1, 200) != 0) return 1;
  say("connected");
  const ssize_t n = rrecv(fd, &byte, 1, 0);
  std::printf("rrecv %zd %s\n", n, n < 0 ? strerrorname_np(errno) : "-");
  std::fflush(stdout);
  rclose(fd);
  rclose(listener);
  return 0;
}

int cm_client(const char* address, const char* port) {
  sockaddr_in server = server_address(address, port);
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  if (channel == nullptr || rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) return 1;
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&server), 5000) != 0 ||
      !expect_event(channel, RDMA_CM_EVENT_ADDR_RESOLVED))
    return 1;
  if (rdma_resolve_route(id, 5000) != 0 || !expect_event(channel, RDMA_CM_EVENT_ROUTE_RESOLVED))
    return 1;
  ibv_qp_init_attr attr = qp_attributes();
  if (rdma_create_qp(id, nullptr, &attr) != 0) return 1;
  ibv_recv_wr wr{}, *bad = nullptr;  // a SEND from the server has a place to land
  if (ibv_post_recv(id->qp, &wr, &bad) != 0) return 1;
  rdma_conn_param param{};
  param.retry_count = 7;
  if (rdma_connect(id, &param) != 0 || !expect_event(channel, RDMA_CM_EVENT_ESTABLISHED)) return 1;
  return connected_until_disconnected(channel, id);
}

int rsocket_client(const char* address, const char* port) {
  sockaddr_in server = server_address(address, port);
  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || rconnect(fd, reinterpret_cast<sockaddr*>(&server), sizeof server) != 0) return 1;
  say("connected");
  char c;
  while (read(0, &c, 1) > 0) {
  }
  rclose(fd);
  return 0;
}

const char* has_device(const rdma_cm_id* id) { return id->verbs != nullptr ? "device" : "no device"; }

int bind_loopback(const char* address, const char* port) {
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id *listener = nullptr, *active = nullptr;
  if (channel == nullptr || rdma_create_id(channel, &listener, nullptr, RDMA_PS_TCP) != 0 ||
      rdma_create_id(channel, &active, nullptr, RDMA_PS_TCP) != 0)
    return 1;
  sockaddr_in loopback = server_address("127.0.0.1", "0");
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&loopback)) != 0) return 1;
  std::printf("bound: %s\n", has_device(listener));
  if (rdma_listen(listener, 8) != 0) return 1;
  say("listening");
  sockaddr_in destination = server_address(address, port);
  if (rdma_bind_addr(active, reinterpret_cast<sockaddr*>(&loopback)) != 0 ||
      rdma_resolve_addr(active, nullptr, reinterpret_cast<sockaddr*>(&destination), 5000) != 0 ||
      !expect_event(channel, RDMA_CM_EVENT_ADDR_RESOLVED))
    return 1;
  std::printf("resolved: %s\n", has_device(active));
  std::fflush(stdout);
  rdma_destroy_id(active);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(channel);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s cm|rsocket|cm-server|rsocket-server IPV4 PORT\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "cm") return cm_client(argv[2], argv[3]);
  if (mode == "rsocket") return rsocket_client(argv[2], argv[3]);
  if (mode == "cm-server") return cm_server(argv[2], argv[3]);
  if (mode == "rsocket-server") return rsocket_server(argv[2], argv[3]);
  if (mode == "bind-loopback") return bind_loopback(argv[2], argv[3]);
  return 2;
}
