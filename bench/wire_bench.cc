// Cost of the ICRC per packet: computing it (every packet sent and received) and
// solving for the IPv4 Identification (packets from senders other than softrdma).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "wire/icrc.h"
#include "wire/packet.h"
#include "wire/test_packets.h"

namespace {

using namespace softrdma::wire;

// A SEND_ONLY whose UDP payload is `bytes` long in total (headers, pad, ICRC).
std::vector<uint8_t> packet_of_size(size_t bytes, const IpUdpInfo& info) {
  std::mt19937_64 rng(bytes);
  std::vector<uint8_t> p = testing::random_packet(rng, op::kRcSendOnly, bytes - kBthBytes - kIcrcBytes);
  write_icrc(info, p);
  return p;
}

IpUdpInfo bench_info(uint16_t id) {
  IpUdpInfo info;
  info.src = gid_from_ipv4(0x0a4d0002);
  info.dst = gid_from_ipv4(0x0a4d0003);
  info.src_port = 0xc001;
  info.ipv4_id = id;
  return info;
}

void BM_ComputeIcrc(benchmark::State& state) {
  const IpUdpInfo info = bench_info(0);
  const std::vector<uint8_t> p = packet_of_size(size_t(state.range(0)), info);
  for (auto _ : state) benchmark::DoNotOptimize(compute_icrc(info, p));
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK(BM_ComputeIcrc)->RangeMultiplier(2)->Range(64, 4096);

// softrdma's own packets: ID 0 with DF, found by the fast path (one CRC pass).
void BM_SolveIcrcFastPath(benchmark::State& state) {
  const IpUdpInfo info = bench_info(0);
  const std::vector<uint8_t> p = packet_of_size(size_t(state.range(0)), info);
  for (auto _ : state) benchmark::DoNotOptimize(solve_icrc_ipv4(info, p));
}
BENCHMARK(BM_SolveIcrcFastPath)->RangeMultiplier(4)->Range(64, 4096);

// Soft-RoCE's packets: an unknown ID, DF set (one CRC pass + the solve).
void BM_SolveIcrcUnknownId(benchmark::State& state) {
  const std::vector<uint8_t> p = packet_of_size(size_t(state.range(0)), bench_info(0xf351));
  const IpUdpInfo received = bench_info(0);
  for (auto _ : state) benchmark::DoNotOptimize(solve_icrc_ipv4(received, p));
}
BENCHMARK(BM_SolveIcrcUnknownId)->RangeMultiplier(4)->Range(64, 4096);

// Segment 5 of a GSO send (ID 5, DF), guessed right by the receiver (udp_rx.cc:
// the segment's index in its datagram): one CRC pass, no solve.
void BM_SolveIcrcLikelyId(benchmark::State& state) {
  const std::vector<uint8_t> p = packet_of_size(size_t(state.range(0)), bench_info(5));
  const IpUdpInfo received = bench_info(0);
  for (auto _ : state) benchmark::DoNotOptimize(solve_icrc_ipv4(received, p, 5));
}
BENCHMARK(BM_SolveIcrcLikelyId)->RangeMultiplier(4)->Range(64, 4096);

// Garbage: both DF candidates tried and rejected (the worst case).
void BM_SolveIcrcRejects(benchmark::State& state) {
  std::vector<uint8_t> p = packet_of_size(size_t(state.range(0)), bench_info(0xf351));
  p[20] ^= 0x10;
  const IpUdpInfo received = bench_info(0);
  for (auto _ : state) benchmark::DoNotOptimize(solve_icrc_ipv4(received, p));
}
BENCHMARK(BM_SolveIcrcRejects)->RangeMultiplier(4)->Range(64, 4096);

}  // namespace

BENCHMARK_MAIN();
