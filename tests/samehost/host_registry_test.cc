// The registry of the processes that share one host address (issue 27,
// docs/decisions/host-rnic.md): slots, their liveness, CM listeners, one user.
#include "samehost/host_registry.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace softrdma::samehost {
namespace {

class HostRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/dev/shm/softrdma-registry-test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = std::string(pattern) + "/";
    address_ = wire::gid_from_ipv4(0x7f5a0001);  // 127.90.0.1
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::unique_ptr<HostRegistry> join() {
    std::string why;
    auto registry = HostRegistry::join(address_, why, directory_);
    EXPECT_NE(registry, nullptr) << why;
    return registry;
  }
  // A child process that joined the registry and waits to be killed.
  void start_member(pid_t& pid) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::string why;
      auto registry = HostRegistry::join(address_, why, directory_);
      const char joined = registry ? 1 : 0;
      if (write(ready[1], &joined, 1) != 1) _exit(1);
      pause();  // until killed: no destructor runs
      _exit(0);
    }
    char joined = 0;
    EXPECT_EQ(read(ready[0], &joined, 1), 1);
    close(ready[0]);
    close(ready[1]);
    ASSERT_EQ(joined, 1);
  }
  bool file_exists() const {
    for (const auto& entry : std::filesystem::directory_iterator(directory_)) {
      (void)entry;
      return true;
    }
    return false;
  }

  std::string directory_;
  wire::Gid address_{};
};

TEST_F(HostRegistryTest, MembersTakeDistinctSlotsAndTheLastOutRemovesTheFile) {
  auto first = join();
  auto second = join();
  ASSERT_TRUE(first && second);
  EXPECT_GE(first->slot(), 1u);
  EXPECT_NE(first->slot(), second->slot());
  EXPECT_EQ(first->path(), second->path());
  EXPECT_EQ(first->members().size(), 2u);
  EXPECT_EQ(*first->owner(second->slot()), getpid());
  const uint64_t before = first->generation();
  second.reset();
  EXPECT_GT(first->generation(), before);
  EXPECT_EQ(first->members().size(), 1u);
  EXPECT_FALSE(first->owner(0).has_value());  // QPN 0 and 1 are nobody's
  EXPECT_TRUE(file_exists());
  first.reset();
  EXPECT_FALSE(file_exists());
}

// The check of the first process alone (is the port free of sockets nobody here
// knows?) runs for the first member only; its refusal leaves no slot and no file.
TEST_F(HostRegistryTest, TheAloneCheckRunsForTheFirstOnlyAndItsRefusalLeavesNothing) {
  int calls = 0;
  std::string why;
  auto refused = HostRegistry::join(address_, why, directory_, [&calls] {
    ++calls;
    return std::string("held");
  });
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(why, "held");
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(file_exists());
  const auto counted = [&calls] {
    ++calls;
    return std::string();
  };
  auto first = HostRegistry::join(address_, why, directory_, counted);
  ASSERT_NE(first, nullptr) << why;
  EXPECT_EQ(calls, 2);
  // A second device of this process: its first one's socket is in the group.
  auto second = HostRegistry::join(address_, why, directory_, counted);
  ASSERT_NE(second, nullptr) << why;
  EXPECT_EQ(calls, 2);
}

// Whether this process's thread `pid` sleeps in futex(2) (/proc/PID/syscall: the
// number first), as a waiter for a lock does.
bool waits_in_futex(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/syscall");
  long number = -1;
  return bool(file >> number) && number == SYS_futex;
}

// The check runs under the registry's lock: a process joining meanwhile waits for
// it (and then finds a member), so it binds no socket while the first one checks
// the port. Before, the check ran after the lock: a second process joined and
// bound meanwhile, and one of the two failed (CI, stop 33).
TEST_F(HostRegistryTest, AProcessJoiningDuringTheAloneCheckWaitsForIt) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  pid_t child = -1;
  bool child_joined_during_check = false;
  std::string why;
  auto first = HostRegistry::join(address_, why, directory_, [&]() -> std::string {
    child = fork();
    if (child == 0) {
      std::string child_why;
      auto registry = HostRegistry::join(address_, child_why, directory_, [] {
        return std::string("the second must not run the check");
      });
      const char members = registry ? char(registry->members().size()) : 0;
      _exit(write(report[1], &members, 1) == 1 ? 0 : 1);
    }
    // Until the child blocks in the lock, or (the defect) it has joined.
    pollfd readable{report[0], POLLIN, 0};
    while (child > 0 && !waits_in_futex(child)) {
      if (poll(&readable, 1, 1) == 1) {
        child_joined_during_check = true;
        break;
      }
    }
    return "";
  });
  ASSERT_NE(first, nullptr) << why;
  ASSERT_GT(child, 0);
  EXPECT_FALSE(child_joined_during_check);
  char members = 0;
  EXPECT_EQ(read(report[0], &members, 1), 1);
  EXPECT_EQ(members, 2) << "the child joined, beside the first";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(report[0]);
  close(report[1]);
}

TEST_F(HostRegistryTest, AKilledMembersSlotIsReapedAndItsListenersGo) {
  auto survivor = join();
  ASSERT_TRUE(survivor);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string why;
    auto registry = HostRegistry::join(address_, why, directory_);
    const bool listens = registry && registry->add_listener(0x1234);
    const char slot = registry ? char(registry->slot()) : 0;
    if (write(ready[1], &slot, 1) != 1 || !listens) _exit(1);
    pause();  // until killed: no destructor runs
    _exit(0);
  }
  char child_slot = 0;
  ASSERT_EQ(read(ready[0], &child_slot, 1), 1);
  EXPECT_EQ(survivor->listener(0x1234), uint32_t(child_slot));
  EXPECT_EQ(*survivor->owner(uint32_t(child_slot)), child);
  EXPECT_FALSE(survivor->add_listener(0x1234));  // one listener per ServiceID
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(survivor->owner(uint32_t(child_slot)).has_value());
  EXPECT_TRUE(survivor->reap());
  EXPECT_EQ(survivor->members().size(), 1u);
  EXPECT_EQ(survivor->listener(0x1234), 0u);
  EXPECT_TRUE(survivor->add_listener(0x1234));
  EXPECT_EQ(survivor->listener(0x1234), survivor->slot());
  close(ready[0]);
  close(ready[1]);
}

// Issue 6's 65 536 QPs of one process need four blocks of QPNs: one process may
// hold several slots, all of its one socket's index, all given back at once.
TEST_F(HostRegistryTest, AProcessMayHoldSeveralSlots) {
  auto first = join();
  auto other = join();
  ASSERT_TRUE(first && other);
  first->set_index(0);
  const uint32_t extra = first->take_another_slot();
  ASSERT_NE(extra, 0u);
  EXPECT_NE(extra, other->slot());
  EXPECT_EQ(first->slots(), (std::vector<uint32_t>{first->slot(), extra}));
  first->set_index(1);
  for (const HostRegistry::Member& m : other->members()) {
    if (m.slot != other->slot()) {
      EXPECT_EQ(m.index, 1) << "slot " << m.slot;
    }
  }
  EXPECT_EQ(other->members().size(), 3u);
  // Packets of either block go to the process's first slot's hand-over.
  EXPECT_EQ(other->handover_slot(extra), first->slot());
  EXPECT_EQ(other->handover_slot(first->slot()), first->slot());
  EXPECT_EQ(other->handover_slot(0), 0u);
  first.reset();
  EXPECT_EQ(other->members().size(), 1u);
  EXPECT_FALSE(other->owner(extra).has_value());
  EXPECT_EQ(other->handover_slot(extra), 0u);
}

// A first slot whose hand-over name is still bound elsewhere is kept aside: another
// becomes the process's first (its packets' hand-over), the old one stays held
// until the process leaves, and both are given back then.
TEST_F(HostRegistryTest, AProcessMovesToAnotherSlotAndKeepsTheOldAside) {
  auto mover = join();
  auto other = join();
  ASSERT_TRUE(mover && other);
  const uint32_t old = mover->slot();
  ASSERT_TRUE(mover->move_to_another_slot());
  const uint32_t fresh = mover->slot();
  EXPECT_NE(fresh, old);
  EXPECT_NE(fresh, other->slot());
  EXPECT_EQ(mover->slots(), (std::vector<uint32_t>{fresh, old}));
  EXPECT_EQ(other->handover_slot(old), fresh);
  EXPECT_EQ(other->handover_slot(fresh), fresh);
  auto third = join();
  ASSERT_TRUE(third);
  EXPECT_NE(third->slot(), old) << "the old slot stays held";
  const size_t before = other->members().size();
  mover.reset();
  EXPECT_EQ(other->members().size(), before - 2);
  EXPECT_EQ(other->handover_slot(old), 0u);
  EXPECT_EQ(other->handover_slot(fresh), 0u);
}

// The doctor's count: live processes, read without joining; one process holding
// several slots is one; a killed member is not counted (nor reaped by the count).
TEST_F(HostRegistryTest, LiveProcessesAreCountedWithoutJoining) {
  EXPECT_EQ(HostRegistry::live_processes(address_, directory_), 0) << "no registry yet";
  auto first = join();
  auto second = join();  // this process again
  ASSERT_TRUE(first && second);
  EXPECT_EQ(HostRegistry::live_processes(address_, directory_), 1);
  pid_t member = 0;
  start_member(member);
  EXPECT_EQ(HostRegistry::live_processes(address_, directory_), 2);
  kill(member, SIGKILL);
  ASSERT_EQ(waitpid(member, nullptr, 0), member);
  EXPECT_EQ(HostRegistry::live_processes(address_, directory_), 1);
  EXPECT_EQ(first->members().size(), 2u) << "the count took no slot and left none";
}

TEST_F(HostRegistryTest, IndicesAndProbeRoundsAreShared) {
  auto first = join();
  auto second = join();
  ASSERT_TRUE(first && second);
  first->set_index(1);
  second->set_index(0);
  for (const HostRegistry::Member& m : first->members())
    EXPECT_EQ(m.index, m.slot == first->slot() ? 1 : 0);
  const uint64_t nonce = first->new_probe_round();
  EXPECT_EQ(second->probe_nonce(), nonce);
}

TEST_F(HostRegistryTest, AnUnfinishedOldFileIsReplaced) {
  // What a creator killed before it sized the file leaves.
  auto probe = join();  // learns the real name (it carries the network namespace)
  const std::string real = probe->path();
  probe.reset();
  const int fd = open(real.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  const timespec old[2] = {{time(nullptr) - 60, 0}, {time(nullptr) - 60, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, real.c_str(), old, 0), 0);
  auto registry = join();
  ASSERT_TRUE(registry);
  EXPECT_EQ(registry->members().size(), 1u);
}

// Writes `version` into the registry file's header, as another softrdma would have.
bool set_version(const std::string& path, uint32_t version) {
  const int fd = open(path.c_str(), O_RDWR);
  const bool written = fd >= 0 && pwrite(fd, &version, sizeof version,
                                         offsetof(RegistryHeader, version)) == sizeof version;
  if (fd >= 0) close(fd);
  return written;
}

// A registry of another layout (another softrdma version): refused with what to
// do while a member it names is alive, not read as this one's; replaced when all
// its members are gone (a killed process's file must not block the address).
TEST_F(HostRegistryTest, AnotherVersionsRegistryIsRefusedWhileItsMembersLive) {
  auto first = join();  // a live member: this process
  ASSERT_TRUE(first);
  const std::string path = first->path();
  ASSERT_TRUE(set_version(path, 1));
  std::string why;
  EXPECT_EQ(HostRegistry::join(address_, why, directory_), nullptr);
  EXPECT_NE(why.find("another softrdma version (host registry version 1"), std::string::npos)
      << why;
  EXPECT_NE(why.find("SOFTRDMA_ADDR"), std::string::npos) << why;
  first.reset();  // the last member out removes the file
  EXPECT_FALSE(std::filesystem::exists(path));
  // Its only member gone without a word: a child that joins and exits at once.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string child_why;
    auto mine = HostRegistry::join(address_, child_why, directory_);
    _exit(mine ? 0 : 1);  // no destructor: its slot stays marked, as if killed
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(std::filesystem::exists(path));
  ASSERT_TRUE(set_version(path, 1));
  auto next = join();  // replaced
  ASSERT_TRUE(next);
  EXPECT_EQ(next->members().size(), 1u);
}

// Each slot has its doorbell in the shared file: what one member rings, another
// sees (transport/udp/handover.h reads its socket only then).
TEST_F(HostRegistryTest, EachSlotHasADoorbellEveryMemberSees) {
  auto a = join(), b = join();
  ASSERT_TRUE(a && b);
  ASSERT_NE(a->doorbell(b->slot()), nullptr);
  EXPECT_NE(a->doorbell(b->slot()), b->doorbell(b->slot()));  // two mappings ...
  a->doorbell(b->slot())->store(1);
  EXPECT_EQ(b->doorbell(b->slot())->load(), 1u);  // ... of one word
  EXPECT_EQ(b->doorbell(kRegistrySlots), nullptr);
}

// The kernel lets only one user's sockets share a port (SO_REUSEPORT): a process of
// another user is told so, and what to do, instead of failing later at bind().
TEST_F(HostRegistryTest, AnotherUsersRegistryIsRefusedWithWhatToDo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a file of another user";
  auto registry = join();
  const std::string path = registry->path();
  registry.reset();
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchown(fd, 65534, 65534), 0);
  close(fd);
  std::string why;
  EXPECT_EQ(HostRegistry::join(address_, why, directory_), nullptr);
  EXPECT_NE(why.find("user 65534"), std::string::npos) << why;
  EXPECT_NE(why.find("SOFTRDMA_ADDR"), std::string::npos) << why;
}

// A killed process runs no destructor: its registry file stays. The next device
// opened removes such files whose members are all gone, and nothing else: not a
// registry with a live member, not another user's file.
TEST_F(HostRegistryTest, AFileWhoseMembersAreAllGoneIsSweptAndNoOther) {
  pid_t member = 0;
  ASSERT_NO_FATAL_FAILURE(start_member(member));
  EXPECT_EQ(HostRegistry::remove_abandoned(directory_), 0) << "its member is alive";
  EXPECT_TRUE(file_exists());
  kill(member, SIGKILL);
  ASSERT_EQ(waitpid(member, nullptr, 0), member);
  EXPECT_TRUE(file_exists()) << "a killed member leaves its file";
  EXPECT_EQ(HostRegistry::remove_abandoned(directory_), 1);
  EXPECT_FALSE(file_exists());

  auto live = join();  // this process: a live member
  ASSERT_TRUE(live);
  EXPECT_EQ(HostRegistry::remove_abandoned(directory_), 0);
  EXPECT_EQ(live->members().size(), 1u);
  EXPECT_TRUE(file_exists());
}

TEST_F(HostRegistryTest, AnotherUsersAbandonedFileIsNotSwept) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a file of another user";
  pid_t member = 0;
  ASSERT_NO_FATAL_FAILURE(start_member(member));
  kill(member, SIGKILL);
  ASSERT_EQ(waitpid(member, nullptr, 0), member);
  const auto path = std::filesystem::directory_iterator(directory_)->path();
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  EXPECT_EQ(HostRegistry::remove_abandoned(directory_), 0);
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(ProcessStartTime, IsKnownForALiveProcessAndZeroForAGoneOne) {
  EXPECT_GT(process_start_time(getpid()), 0u);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(process_start_time(child), 0u);
}

}  // namespace
}  // namespace softrdma::samehost
