// One engine counter of a process as `softrdma status` prints it ("process PID
// ..." blocks, "engine.NAME VALUE" lines), for tests that check what an engine
// did without reaching into it.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace softrdma::testing_support {

// `name`'s value in process `pid`'s block of `tool status` (which prints only
// counters that are not zero: 0 when the block has no such line); UINT64_MAX
// when the tool or the block is missing.
inline uint64_t engine_counter(const char* tool, pid_t pid, const std::string& name) {
  std::string out;
  if (FILE* p = popen((std::string(tool) + " status 2>&1").c_str(), "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof buffer, p)) out.append(buffer, n);
    pclose(p);
  }
  const size_t block = out.find("process " + std::to_string(pid) + " ");
  if (block == std::string::npos) return UINT64_MAX;
  const size_t next = out.find("\nprocess ", block);
  const size_t at = out.find("engine." + name + " ", block);
  if (at == std::string::npos || at > next) return 0;
  return std::strtoull(out.c_str() + at + name.size() + 8, nullptr, 10);
}

}  // namespace softrdma::testing_support
