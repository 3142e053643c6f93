// A second process for rdmacm_test: binds and listens an rdma_cm id on the
// address and port given (argv[1], argv[2]), prints "ready <GID>" with the GID its
// device uses for that address, then waits until its stdin closes. A test reads
// the line, resolves the address from its own process, and expects that GID.
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IPV4 PORT\n", argv[0]);
    return 2;
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(std::atoi(argv[2])));
  if (inet_pton(AF_INET, argv[1], &address.sin_addr) != 1) return 2;
  rdma_event_channel* channel = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  if (channel == nullptr || rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) return 1;
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&address)) != 0) {
    std::printf("bind-error %d\n", errno);
    return 1;
  }
  if (rdma_listen(id, 8) != 0) return 1;
  // The GID its device gives the loopback: index 1, the IPv4-mapped entry.
  ibv_gid gid{};
  if (ibv_query_gid(id->verbs, 1, 1, &gid) != 0) return 1;
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  std::printf("ready %s\n", text);
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  rdma_destroy_id(id);
  rdma_destroy_event_channel(channel);
  return 0;
}
