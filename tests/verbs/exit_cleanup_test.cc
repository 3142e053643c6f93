// Issue 14 defect 9: a process that exits normally leaves no status segment in
// /dev/shm, whether or not it closed its device (softrdma's librdmacm never
// closes the one it opens; runtime/status_registry.h).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

ibv_context* forgotten_context = nullptr;  // reachable: LeakSanitizer is not tested here

std::vector<std::string> segments_of(pid_t pid) {
  std::vector<std::string> found;
  const std::string prefix = "softrdma-" + std::to_string(pid) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
  }
  return found;
}

// A child opens the device, makes a QP (so its segment has a row), tells the
// parent its segment exists, and exits without closing anything.
TEST(ExitCleanup, ADeviceNeverClosedLeavesNoSegment) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n < 1) _exit(2);
    forgotten_context = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (forgotten_context == nullptr) _exit(3);
    const char seen = segments_of(getpid()).size() == 1 ? 'y' : 'n';
    if (write(fds[1], &seen, 1) != 1) _exit(4);
    std::exit(0);  // as a return from main: the device is still open
  }
  close(fds[1]);
  char seen = 0;
  EXPECT_EQ(read(fds[0], &seen, 1), 1);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(seen, 'y') << "while it ran, the child had its segment";
  EXPECT_TRUE(segments_of(child).empty()) << "the exited child left its segment";
}

}  // namespace
}  // namespace softrdma::verbs::testing
