// Cross-memory attach (samehost/process_memory.h): bytes move between two
// processes while the target does nothing, and each reason it cannot is told
// apart — another user, a seccomp profile, a process that is gone, the wrong one.
#include "samehost/process_memory.h"

#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "support/seccomp_filter.h"

namespace softrdma::samehost {
namespace {

uint64_t probe_word = 0x5eed5eed12345678;
char target_buffer[4096];

uid_t nobody_uid() {
  const passwd* pw = getpwnam("nobody");
  return pw != nullptr ? pw->pw_uid : uid_t(65534);
}

// A child that waits for a byte on `go`, then exits with 0 if its buffer holds
// `expected` at the start.
pid_t waiting_child(int go, const char* expected) {
  const pid_t pid = fork();
  if (pid == 0) {
    char b;
    if (read(go, &b, 1) != 1) _exit(3);
    _exit(std::memcmp(target_buffer, expected, std::strlen(expected)) == 0 ? 0 : 1);
  }
  return pid;
}

int exit_code(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ProcessMemory, WritesIntoAnotherProcessAndReadsBack) {
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = waiting_child(go[0], "written by the parent");
  ASSERT_GT(child, 0);
  Reach why;
  auto memory = ProcessMemory::attach(child, uint64_t(uintptr_t(&probe_word)), probe_word, why);
  ASSERT_NE(memory, nullptr) << describe(why);
  EXPECT_EQ(why, Reach::kYes);
  const char text[] = "written by the parent";
  // Two local pieces into one remote range: the lists may cut the bytes differently.
  iovec local[2] = {{const_cast<char*>(text), 10}, {const_cast<char*>(text) + 10, sizeof text - 10}};
  iovec remote{target_buffer, sizeof text};
  ASSERT_EQ(memory->write(local, {&remote, 1}), 0);
  char back[sizeof text] = {};
  iovec into{back, sizeof back};
  ASSERT_EQ(memory->read({&into, 1}, {&remote, 1}), 0);
  EXPECT_STREQ(back, text);
  EXPECT_TRUE(memory->alive());
  ASSERT_EQ(write(go[1], "x", 1), 1);
  EXPECT_EQ(exit_code(child), 0) << "the child saw the bytes without doing anything";
  EXPECT_FALSE(memory->alive());
  EXPECT_NE(memory->write({&into, 1}, {&remote, 1}), 0) << "a process that is gone";
}

TEST(ProcessMemory, AnUnmappedRemoteRangeIsEfault) {
  Reach why;
  auto self = ProcessMemory::attach(getpid(), uint64_t(uintptr_t(&probe_word)), probe_word, why);
  ASSERT_NE(self, nullptr) << describe(why);
  void* hole = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  munmap(hole, 4096);
  char byte = 1;
  iovec local{&byte, 1};
  iovec remote{hole, 1};
  EXPECT_EQ(self->write({&local, 1}, {&remote, 1}), EFAULT);
}

TEST(ProcessMemory, TheWrongProbeValueIsAnotherProcess) {
  Reach why;
  EXPECT_EQ(ProcessMemory::attach(getpid(), uint64_t(uintptr_t(&probe_word)), probe_word + 1, why),
            nullptr);
  EXPECT_EQ(why, Reach::kWrongProcess);
}

TEST(ProcessMemory, AProcessThatIsGoneIsSaid) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_EQ(exit_code(child), 0);
  Reach why;
  EXPECT_EQ(ProcessMemory::attach(child, uint64_t(uintptr_t(&probe_word)), probe_word, why),
            nullptr);
  EXPECT_EQ(why, Reach::kGone);
}

// What the child of these tests saw, as its exit code: the Reach it got.
template <typename Setup>
int reach_from_a_restricted_child(Setup setup) {
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    if (!setup()) _exit(100);
    Reach why;
    auto memory = ProcessMemory::attach(parent, uint64_t(uintptr_t(&probe_word)), probe_word, why);
    _exit(int(why));
  }
  return exit_code(child);
}

using testing_support::forbid_cross_memory_attach;

TEST(ProcessMemory, ASeccompProfileThatForbidsItIsSaid) {
  EXPECT_EQ(reach_from_a_restricted_child(forbid_cross_memory_attach), int(Reach::kNoSyscall));
}

// Another user may not reach this process's memory (ptrace's rules).
TEST(ProcessMemory, AnotherUserIsNotPermitted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user (CI runs as root)";
  const int code = reach_from_a_restricted_child([] { return setuid(nobody_uid()) == 0; });
  EXPECT_EQ(code, int(Reach::kNotPermitted));
}

}  // namespace
}  // namespace softrdma::samehost
