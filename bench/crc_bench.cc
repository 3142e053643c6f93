// Which CRC-32 library computes the ICRC (docs/decisions/icrc-library.md): zlib's
// crc32, ISA-L's crc32_gzip_refl and libdeflate_crc32 over plain buffers, and the
// whole ICRC of a packet (masked headers + payload, as compute_icrc does it) with
// each. Before timing anything it checks that the three give the same CRC, whole
// and continued in pieces, so a library with other init/xor conventions fails here.
// Run interleaved and repeated (one line):
//   build/bench/crc_bench --benchmark_repetitions=9
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <isa-l/crc.h>
#include <libdeflate.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "wire/icrc.h"
#include "wire/test_packets.h"

namespace {

using namespace softrdma::wire;

// All three continue a running value and start from 0, as zlib's crc32 does.
uint32_t zlib_crc(uint32_t crc, const uint8_t* p, size_t n) {
  return uint32_t(crc32_z(crc, p, n));
}
uint32_t isal_crc(uint32_t crc, const uint8_t* p, size_t n) {
  return crc32_gzip_refl(crc, p, n);
}
uint32_t deflate_crc(uint32_t crc, const uint8_t* p, size_t n) {
  return libdeflate_crc32(crc, p, n);
}
using CrcFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

std::vector<uint8_t> random_bytes(size_t n) {
  std::mt19937_64 rng(n);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

// Exits before any timing when a library disagrees with zlib (the reference the
// ICRC vectors were checked against), whole or in two pieces at every split.
void check_libraries_agree() {
  for (size_t n : {0, 1, 3, 15, 16, 63, 64, 255, 256, 1000, 1024, 4096, 65536}) {
    const std::vector<uint8_t> v = random_bytes(n);
    const uint32_t want = zlib_crc(0, v.data(), n);
    for (CrcFn f : {isal_crc, deflate_crc}) {
      for (size_t cut = 0; cut <= n; cut += (n < 300 ? 1 : 97)) {
        const uint32_t got = f(f(0, v.data(), cut), v.data() + cut, n - cut);
        if (got != want) {
          std::fprintf(stderr, "crc_bench: CRC mismatch at %zu bytes (cut %zu): %08x != %08x\n",
                       n, cut, got, want);
          std::exit(1);
        }
      }
    }
  }
  if (zlib_crc(0, reinterpret_cast<const uint8_t*>("123456789"), 9) != 0xcbf43926) {
    std::fprintf(stderr, "crc_bench: zlib fails the CRC-32 check value\n");
    std::exit(1);
  }
}

template <CrcFn f>
void BM_Crc(benchmark::State& state) {
  const std::vector<uint8_t> v = random_bytes(size_t(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(f(0, v.data(), v.size()));
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK_TEMPLATE(BM_Crc, zlib_crc)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096)->Arg(65536);
BENCHMARK_TEMPLATE(BM_Crc, isal_crc)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096)->Arg(65536);
BENCHMARK_TEMPLATE(BM_Crc, deflate_crc)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096)->Arg(65536);

IpUdpInfo bench_info() {
  IpUdpInfo info;
  info.src = gid_from_ipv4(0x0a4d0002);
  info.dst = gid_from_ipv4(0x0a4d0003);
  info.src_port = 0xc001;
  return info;
}

// A SEND_ONLY whose UDP payload is `bytes` long (headers, pad, ICRC), as wire_bench.
std::vector<uint8_t> packet_of_size(size_t bytes) {
  std::mt19937_64 rng(bytes);
  return testing::random_packet(rng, op::kRcSendOnly, bytes - kBthBytes - kIcrcBytes);
}

// compute_icrc's two CRC calls, with library f: masked headers, then the rest.
template <CrcFn f>
uint32_t icrc_with(const IpUdpInfo& info, std::span<const uint8_t> p) {
  std::array<uint8_t, kIcrcPrefixMaxBytes> prefix;
  const size_t n = write_icrc_prefix(info, p.first<kBthBytes>(), p.size(), prefix);
  const uint32_t crc = f(0, prefix.data(), n);
  return f(crc, p.data() + kBthBytes, p.size() - kBthBytes - kIcrcBytes);
}

template <CrcFn f>
void BM_Icrc(benchmark::State& state) {
  const IpUdpInfo info = bench_info();
  const std::vector<uint8_t> p = packet_of_size(size_t(state.range(0)));
  if (icrc_with<f>(info, p) != compute_icrc(info, p)) {
    state.SkipWithError("ICRC differs from compute_icrc");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(icrc_with<f>(info, p));
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK_TEMPLATE(BM_Icrc, zlib_crc)->Arg(64)->Arg(4096);
BENCHMARK_TEMPLATE(BM_Icrc, isal_crc)->Arg(64)->Arg(4096);
BENCHMARK_TEMPLATE(BM_Icrc, deflate_crc)->Arg(64)->Arg(4096);

// What softrdma runs: wire::compute_icrc through wire::crc32_update.
void BM_IcrcWire(benchmark::State& state) {
  const IpUdpInfo info = bench_info();
  const std::vector<uint8_t> p = packet_of_size(size_t(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(compute_icrc(info, p));
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK(BM_IcrcWire)->Arg(64)->Arg(4096);

}  // namespace

int main(int argc, char** argv) {
  check_libraries_agree();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
