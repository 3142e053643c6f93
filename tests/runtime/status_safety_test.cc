// Issue 14 defect 8: another local user must not make a softrdma process write
// through a link it planted, adopt a file it planted, or read its QPs; and a
// reader must neither follow links, believe foreign files, nor remove what is not
// its own (docs/decisions/status-segment-safety.md). The planting is done at the
// very name the device will use, as an attacker would.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/open_device.h"
#include "runtime/status_segment.h"
#include "runtime/status_test_support.h"

namespace softrdma::runtime {
namespace {

using testing_support::TempDirectory;

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, text.data(), text.size()), ssize_t(text.size()));
  fchmod(fd, mode);
  close(fd);
}

// The name this process's device will take.
std::string usual_segment_path() {
  return "/dev/shm/softrdma-" + std::to_string(getpid()) + "-softrdma0";
}

uid_t nobody_uid() {
  const passwd* pw = getpwnam("nobody");
  return pw != nullptr ? pw->pw_uid : uid_t(65534);
}

// Opens the device while something else holds its segment's name: it works, with
// a segment under another name, and says so.
void expect_device_opens_beside(const std::string& planted) {
  ::testing::internal::CaptureStderr();
  std::string error;
  Settings settings;
  settings.progress_thread = false;
  auto node = OpenDevice::open(settings, error);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(node, nullptr) << error;
  ASSERT_NE(node->status(), nullptr) << "the device keeps a status segment";
  EXPECT_NE(node->status()->path(), planted);
  EXPECT_EQ(node->status()->path().rfind(planted, 0), 0u) << "a unique name beside it";
  EXPECT_NE(said.find(planted + " already exists"), std::string::npos) << said;
}

// A symbolic link planted at the segment's name, to a file only its owner may
// read: the file is neither truncated nor written, the link stays as it was.
TEST(StatusSafetyTest, APlantedSymlinkIsNotFollowed) {
  TempDirectory dir;
  const std::string victim = dir.path() + "/victim";
  write_file(victim, "the victim's own contents\n", 0600);
  const std::string planted = usual_segment_path();
  ASSERT_EQ(symlink(victim.c_str(), planted.c_str()), 0) << planted;
  expect_device_opens_beside(planted);
  EXPECT_EQ(contents(victim), "the victim's own contents\n");
  char target[256] = {};
  EXPECT_GT(readlink(planted.c_str(), target, sizeof target - 1), 0);
  EXPECT_EQ(std::string(target), victim);
  unlink(planted.c_str());
}

// A file planted at the name by another user (here: nobody) is not adopted: its
// contents and owner stay, and the process's counters are not in it.
TEST(StatusSafetyTest, AForeignFileIsNotAdopted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to plant a file owned by another user";
  const std::string planted = usual_segment_path();
  write_file(planted, "planted by another user\n", 0666);
  ASSERT_EQ(chown(planted.c_str(), nobody_uid(), nobody_uid()), 0);
  expect_device_opens_beside(planted);
  EXPECT_EQ(contents(planted), "planted by another user\n");
  struct stat st {};
  ASSERT_EQ(lstat(planted.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody_uid());
  unlink(planted.c_str());
}

// The file a device makes is its owner's alone: 0600.
TEST(StatusSafetyTest, TheSegmentIsReadableByItsOwnerOnly) {
  std::string error;
  Settings settings;
  settings.progress_thread = false;
  auto node = OpenDevice::open(settings, error);
  ASSERT_NE(node, nullptr) << error;
  ASSERT_NE(node->status(), nullptr);
  struct stat st {};
  ASSERT_EQ(lstat(node->status()->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
}

// A copy of `segment` under `name`, its header naming `pid`.
std::string forge(const std::string& segment, const std::string& dir, const std::string& name,
                  int pid) {
  std::string bytes = contents(segment);
  std::memcpy(bytes.data() + offsetof(StatusHeader, pid), &pid, sizeof pid);
  const std::string path = dir + "/" + name;
  write_file(path, bytes, 0600);
  return path;
}

int dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  testing_support::exit_code_of(child);
  return child;
}

// The reader: a link to a segment is not followed (the segment is shown once), a
// leftover of the reader's own dead process is removed and counted.
TEST(StatusSafetyTest, TheReaderFollowsNoLinkAndRemovesOnlyItsOwnLeftovers) {
  TempDirectory dir;
  auto segment = StatusSegment::create("dev0", dir.path());
  ASSERT_NE(segment, nullptr);
  ASSERT_EQ(symlink(segment->path().c_str(), (dir.path() + "/softrdma-link").c_str()), 0);
  const std::string leftover = forge(segment->path(), dir.path(), "softrdma-1-dev0", dead_pid());
  int stale = 0;
  const auto reports = read_status_segments(stale, dir.path());
  ASSERT_EQ(reports.size(), 1u) << "the link is not followed";
  EXPECT_EQ(reports[0].path, segment->path());
  EXPECT_EQ(stale, 1);
  EXPECT_FALSE(std::filesystem::exists(leftover));
  read_status_segments(stale, dir.path());
  EXPECT_EQ(stale, 0) << "only removals that happened are counted";
}

// Root's reader: a file of another user claiming root's process is a forgery and
// not shown; another user's leftover is neither removed nor counted.
TEST(StatusSafetyTest, TheReaderNeitherBelievesNorRemovesForeignFiles) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to plant files owned by another user";
  TempDirectory dir;
  auto segment = StatusSegment::create("dev0", dir.path());
  ASSERT_NE(segment, nullptr);
  const std::string forged = forge(segment->path(), dir.path(), "softrdma-2-dev0", getpid());
  const std::string foreign_left = forge(segment->path(), dir.path(), "softrdma-3-dev0", dead_pid());
  for (const std::string& path : {forged, foreign_left})
    ASSERT_EQ(chown(path.c_str(), nobody_uid(), nobody_uid()), 0);
  int stale = 0;
  const auto reports = read_status_segments(stale, dir.path());
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].path, segment->path()) << "the forgery is not shown";
  EXPECT_EQ(stale, 0);
  EXPECT_TRUE(std::filesystem::exists(foreign_left)) << "another user's file is not removed";
}

}  // namespace
}  // namespace softrdma::runtime
