// Floors for the same-host path (issue 15), the best two processes of this machine
// can do without any RDMA stack (bench/compare.py runs them beside the peers):
//   pingpong N     two processes take turns on one cache line of shared memory:
//                  the one-way latency of a message between processes (median of
//                  batches of N/100 round trips, RTT/2)
//   memcpy MiB     one core copying a 1 MiB buffer: the bandwidth one copy allows
//   cma SIZE N     process_vm_writev(2) of SIZE bytes into a child process: what one
//                  cross-memory-attach call costs (µs) and moves (Gb/s)
// Output: one "name value" line per figure.
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Round trips through one shared cache line: the parent writes an odd value, the
// child answers with the next even one.
int pingpong(long trips) {
  auto* line = static_cast<std::atomic<uint64_t>*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (line == MAP_FAILED) return 1;
  new (line) std::atomic<uint64_t>(0);
  const pid_t child = fork();
  if (child == 0) {
    for (uint64_t expect = 1; expect < uint64_t(2 * trips); expect += 2) {
      while (line->load(std::memory_order_acquire) != expect) {
      }
      line->store(expect + 1, std::memory_order_release);
    }
    _exit(0);
  }
  const long batch = std::max(1L, trips / 100);
  std::vector<double> one_way_us;
  uint64_t value = 0;
  for (long done = 0; done + batch <= trips; done += batch) {
    const auto t0 = Clock::now();
    for (long i = 0; i < batch; ++i) {
      line->store(++value, std::memory_order_release);
      while (line->load(std::memory_order_acquire) != value + 1) {
      }
      ++value;
    }
    one_way_us.push_back(seconds_since(t0) * 1e6 / double(batch) / 2);
  }
  waitpid(child, nullptr, 0);
  std::sort(one_way_us.begin(), one_way_us.end());
  std::printf("shm_pingpong_one_way_us %.4f\n", one_way_us[one_way_us.size() / 2]);
  return 0;
}

int copy_bandwidth(int mib) {
  const size_t size = size_t(1) << 20;
  std::vector<char> src(size, 1), dst(size, 0);
  const long copies = long(mib);
  const auto t0 = Clock::now();
  for (long i = 0; i < copies; ++i) {
    std::memcpy(dst.data(), src.data(), size);
    asm volatile("" : : "r"(dst.data()) : "memory");
  }
  std::printf("memcpy_1MiB_gbps %.2f\n", double(size) * double(copies) * 8 / seconds_since(t0) / 1e9);
  return 0;
}

int cma(size_t size, long calls) {
  std::vector<char> src(size, 7);
  // The child's buffer is at the same address as the parent's copy (fork).
  auto* target = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  int go[2];
  if (target == MAP_FAILED || pipe(go) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    char b;
    (void)!read(go[0], &b, 1);
    _exit(0);
  }
  iovec local{src.data(), size};
  iovec remote{target, size};
  const auto t0 = Clock::now();
  for (long i = 0; i < calls; ++i)
    if (process_vm_writev(child, &local, 1, &remote, 1, 0) != ssize_t(size)) return 2;
  const double s = seconds_since(t0);
  (void)!write(go[1], "x", 1);
  waitpid(child, nullptr, 0);
  std::printf("cma_%zu_us %.4f\ncma_%zu_gbps %.2f\n", size, s * 1e6 / double(calls), size,
              double(size) * double(calls) * 8 / s / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "pingpong" && argc == 3) return pingpong(std::atol(argv[2]));
  if (mode == "memcpy" && argc == 3) return copy_bandwidth(std::atoi(argv[2]));
  if (mode == "cma" && argc == 4) return cma(size_t(std::atol(argv[2])), std::atol(argv[3]));
  std::fprintf(stderr, "usage: shm_floor pingpong TRIPS | memcpy MIB | cma SIZE CALLS\n");
  return 2;
}
