// The cost of one hand-over between processes sharing an address (issue 27,
// docs/decisions/host-rnic.md): send + receive through transport/udp/handover.h,
// beside the floor it is compared with in the same run, a UDP datagram sent and
// received over loopback (what a packet costs that reaches its owner's socket).
// One process plays both ends; bursts of 1 and 8 packets of 1 and 4 KiB, each
// packet its own datagram (send) and a burst in one (queue + flush, as the
// transport hands over what one receive brought).
//
//   ninja -C build handover_bench && build/bench/handover_bench
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "transport/udp/handover.h"
#include "wire/ip_udp.h"

namespace {

using softrdma::transport::udp::Handover;

const softrdma::wire::Gid kSource = softrdma::wire::gid_from_ipv4(0x0a000001);
const softrdma::wire::Gid kDestination = softrdma::wire::gid_from_ipv4(0x7f000002);

// Arguments: packet size, burst, and 1 when the burst is queued and flushed as one
// datagram (0: a send each).
void BM_HandOver(benchmark::State& state) {
  const size_t size = size_t(state.range(0)), burst = size_t(state.range(1));
  const bool batched = state.range(2) != 0;
  const std::string group = "handover-bench/" + std::to_string(getpid());
  std::string why;
  auto from = Handover::open(group, 3, why);
  auto to = Handover::open(group, 7, why);
  if (!from || !to) {
    state.SkipWithError(why.c_str());
    return;
  }
  const std::vector<uint8_t> packet(size, 0x5a);
  Handover::Received got[Handover::kRing];
  for (auto _ : state) {
    for (size_t i = 0; i < burst; ++i) {
      const bool sent = batched ? from->queue(7, kSource, 0xc001, kDestination, packet)
                                : from->send(7, kSource, 0xc001, kDestination, packet);
      if (!sent) state.SkipWithError("send failed");
    }
    if (batched && from->flush().sent != burst) state.SkipWithError("flush failed");
    for (size_t in = 0; in < burst;) in += to->receive(std::span(got, burst - in));
  }
  state.SetItemsProcessed(int64_t(state.iterations() * burst));
}

void BM_UdpLoopbackFloor(benchmark::State& state) {
  const size_t size = size_t(state.range(0)), burst = size_t(state.range(1));
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at);
  socklen_t length = sizeof at;
  getsockname(fd, reinterpret_cast<sockaddr*>(&at), &length);
  const int big = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  const std::vector<uint8_t> packet(size, 0x5a);
  std::vector<uint8_t> sink(65536);
  for (auto _ : state) {
    for (size_t i = 0; i < burst; ++i)
      sendto(fd, packet.data(), size, 0, reinterpret_cast<sockaddr*>(&at), sizeof at);
    for (size_t i = 0; i < burst; ++i) recv(fd, sink.data(), sink.size(), 0);
  }
  state.SetItemsProcessed(int64_t(state.iterations() * burst));
  close(fd);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t size : {1024, 4096})
    for (int64_t burst : {1, 8}) b->Args({size, burst});
}

void SizesAndBatching(benchmark::internal::Benchmark* b) {
  for (int64_t size : {1024, 4096}) {
    for (int64_t burst : {1, 8}) b->Args({size, burst, 0});
    b->Args({size, 8, 1});
  }
}

BENCHMARK(BM_HandOver)->Apply(SizesAndBatching);
BENCHMARK(BM_UdpLoopbackFloor)->Apply(Sizes);

}  // namespace

BENCHMARK_MAIN();
