// The peer that dies, for rdmacm_test's PeerDeath tests (peer_death_test.cc): a
// client process that connects to 127.0.0.1:PORT and prints "connected", then is
// killed (SIGKILL) or stopped (SIGSTOP) by the test.
//   rdmacm_test_peer cm PORT       an rdma_cm RC connection with a QP; afterwards
//                                  prints "disconnected" on RDMA_CM_EVENT_DISCONNECTED
//   rdmacm_test_peer rsocket PORT  a stream rsocket that never reads; it waits
//                                  for its stdin to close
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

sockaddr_in server_address(const char* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(std::atoi(port)));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
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

int cm_client(const char* port) {
  sockaddr_in server = server_address(port);
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  if (channel == nullptr || rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) return 1;
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&server), 5000) != 0 ||
      !expect_event(channel, RDMA_CM_EVENT_ADDR_RESOLVED))
    return 1;
  if (rdma_resolve_route(id, 5000) != 0 || !expect_event(channel, RDMA_CM_EVENT_ROUTE_RESOLVED))
    return 1;
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, nullptr, &attr) != 0) return 1;
  ibv_recv_wr wr{}, *bad = nullptr;  // a SEND from the server has a place to land
  if (ibv_post_recv(id->qp, &wr, &bad) != 0) return 1;
  rdma_conn_param param{};
  param.retry_count = 7;
  if (rdma_connect(id, &param) != 0 || !expect_event(channel, RDMA_CM_EVENT_ESTABLISHED)) return 1;
  say("connected");
  if (!expect_event(channel, RDMA_CM_EVENT_DISCONNECTED)) return 1;
  say("disconnected");
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(channel);
  return 0;
}

int rsocket_client(const char* port) {
  sockaddr_in server = server_address(port);
  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || rconnect(fd, reinterpret_cast<sockaddr*>(&server), sizeof server) != 0) return 1;
  say("connected");
  char c;
  while (read(0, &c, 1) > 0) {
  }
  rclose(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "cm") == 0) return cm_client(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "rsocket") == 0) return rsocket_client(argv[2]);
  std::fprintf(stderr, "usage: %s cm|rsocket PORT\n", argv[0]);
  return 2;
}
