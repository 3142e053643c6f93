// Helpers of the status segment tests: a scratch directory, child processes, the
// files a process left.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace softrdma::runtime::testing_support {

// A directory of its own under /tmp, removed with everything in it.
class TempDirectory {
 public:
  TempDirectory() {
    char name[] = "/tmp/softrdma-status-test.XXXXXX";
    path_ = mkdtemp(name) != nullptr ? name : "";
  }
  ~TempDirectory() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Keeps what a test deliberately never frees reachable (LeakSanitizer is not what
// is tested).
inline void* forgotten = nullptr;
inline void forget(void* p) { forgotten = p; }

// The exit code of a child, or -1 when it did not exit (a signal killed it).
inline int exit_code_of(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The status segments of `pid` in `directory`, by name.
inline std::vector<std::string> segments_of(pid_t pid, const std::string& directory) {
  std::vector<std::string> found;
  const std::string prefix = "softrdma-" + std::to_string(pid) + "-";
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
  }
  return found;
}

}  // namespace softrdma::runtime::testing_support
