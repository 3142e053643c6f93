// What it costs to touch application memory safely (docs/decisions/memory-faults.md):
// plain memcpy, softrdma's guarded copy (sigsetjmp + a thread-local marker), and
// process_vm_readv on the own pid (a system call per copy), at the sizes of a
// packet's payload. A benchmark, not a test: compare the rows of one run.
#include <benchmark/benchmark.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "engine/guarded_memory.h"

namespace {

void BM_Memcpy(benchmark::State& state) {
  std::vector<uint8_t> src(size_t(state.range(0)), 1), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}

void BM_GuardedCopy(benchmark::State& state) {
  softrdma::engine::install_memory_fault_handler();
  std::vector<uint8_t> src(size_t(state.range(0)), 1), dst(src.size());
  for (auto _ : state) {
    bool ok = softrdma::engine::guarded_copy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(ok);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}

void BM_ProcessVmReadv(benchmark::State& state) {
  std::vector<uint8_t> src(size_t(state.range(0)), 1), dst(src.size());
  const pid_t self = getpid();
  for (auto _ : state) {
    iovec local{dst.data(), dst.size()}, remote{src.data(), src.size()};
    ssize_t n = process_vm_readv(self, &local, 1, &remote, 1, 0);
    benchmark::DoNotOptimize(n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}

void BM_GuardedAtomic(benchmark::State& state) {
  softrdma::engine::install_memory_fault_handler();
  alignas(8) uint64_t word = 0;
  for (auto _ : state) {
    uint64_t original = 0;
    bool ok = softrdma::engine::guarded_atomic(softrdma::engine::AtomicOp::kFetchAdd, &word,
                                               0, 1, original);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(original);
  }
}

void BM_PlainAtomic(benchmark::State& state) {
  alignas(8) uint64_t word = 0;
  for (auto _ : state) {
    uint64_t original = std::atomic_ref<uint64_t>(word).fetch_add(1);
    benchmark::DoNotOptimize(original);
  }
}

BENCHMARK(BM_Memcpy)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_GuardedCopy)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_ProcessVmReadv)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_PlainAtomic);
BENCHMARK(BM_GuardedAtomic);

}  // namespace

BENCHMARK_MAIN();
