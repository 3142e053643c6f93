// runtime::OpenDevice composes transport, engine and progress thread as the settings say.
#include "runtime/open_device.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "transport/fake/fault_injector.h"
#include "transport/udp/udp_socket.h"
#include "wire/ip_udp.h"

namespace softrdma::runtime {

OpenDevice* forgotten_node = nullptr;  // external linkage: the store is not optimised away

namespace {

// Default settings: the host's address, shared with the host's other processes
// (DESIGN.md §6), GIDs from it, a progress thread.
TEST(NodeTest, OpensOnTheHostsAddressSharedWithAProgressThread) {
  std::string error;
  auto node = OpenDevice::open(Settings{}, error);
  ASSERT_NE(node, nullptr) << error;
  const std::string host = Settings::host_address();
  EXPECT_EQ(node->settings().address, host);
  EXPECT_TRUE(node->settings().address_is_default);
  const auto& gids = node->device().gids();
  ASSERT_FALSE(gids.empty());
  const std::optional<wire::Gid> expected = transport::udp::parse_address(host);
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(gids.back(), *expected);  // ::ffff:a.b.c.d, the IPv4-mapped entry
  EXPECT_NE(node->shared_address(), nullptr) << "the host's address is shared";
  ASSERT_NE(node->loop(), nullptr);
  EXPECT_TRUE(node->loop()->running());
  EXPECT_EQ(node->faults(), nullptr);
  // A second device of this process opens beside it on the same address (a second
  // ibv_open_device, or another process: both join the address's group).
  auto second = OpenDevice::open(Settings{}, error);
  ASSERT_NE(second, nullptr) << error;
  EXPECT_EQ(second->device().gids(), gids);
  EXPECT_NE(second->shared_address()->slot(), node->shared_address()->slot());
}

// SOFTRDMA_SHARE_ADDRESS=0 with no address: a loopback address of its own, alone
// (the first engine's default, for what needs an address of its own).
TEST(NodeTest, ShareZeroGivesALoopbackAddressOfItsOwn) {
  Settings s;
  s.share_address = false;
  std::string error;
  auto node = OpenDevice::open(s, error);
  ASSERT_NE(node, nullptr) << error;
  const auto& gids = node->device().gids();
  ASSERT_EQ(gids.size(), 2u);
  EXPECT_EQ(gids[1][10], 0xff);  // ::ffff:a.b.c.d
  EXPECT_EQ(gids[1][12], 127);   // on the loopback network
  EXPECT_EQ(node->shared_address(), nullptr);
  EXPECT_FALSE(node->settings().address_is_default);
}

// SOFTRDMA_FAULTS puts a fault injector on top; inline progress runs no thread.
TEST(NodeTest, FaultsAndInlineProgressFollowTheSettings) {
  Settings s;
  s.faults = "loss=0.5,seed=3";
  s.progress_thread = false;
  std::string error;
  auto node = OpenDevice::open(s, error);
  ASSERT_NE(node, nullptr) << error;
  EXPECT_NE(node->faults(), nullptr);
  EXPECT_EQ(node->loop(), nullptr);
  EXPECT_FALSE(node->progress_inline());  // nothing to do, and no crash
}

// A malformed fault setting, or an address this host does not have, fails to open
// with a message saying why.
TEST(NodeTest, BadSettingsFailWithAMessage) {
  Settings s;
  s.faults = "loss=2";
  std::string error;
  EXPECT_EQ(OpenDevice::open(s, error), nullptr);
  EXPECT_FALSE(error.empty());
  Settings t;
  t.address = "192.0.2.77";  // TEST-NET-1: never a local address
  error.clear();
  EXPECT_EQ(OpenDevice::open(t, error), nullptr);
  EXPECT_NE(error.find("192.0.2.77"), std::string::npos) << error;
}

// Issue 27: iWARP runs over TCP, so its device holds no UDP port: devices on one
// address open side by side (each process of a host opens its own), beside a RoCE
// device that holds UDP 4791 there. Before, the second failed with "UDP port 4791 on
// ADDR is already held by another socket".
TEST(NodeTest, IwarpDevicesShareAnAddress) {
  const uint32_t pid = uint32_t(getpid());
  Settings roce;
  roce.address = "127.92." + std::to_string((pid >> 8) & 0xff) + "." + std::to_string(1 + pid % 250);
  roce.same_host = false;
  Settings iwarp = roce;
  iwarp.iwarp = true;
  std::string error;
  auto holder = OpenDevice::open(roce, error);
  ASSERT_NE(holder, nullptr) << error;
  auto first = OpenDevice::open(iwarp, error);
  ASSERT_NE(first, nullptr) << error;
  auto second = OpenDevice::open(iwarp, error);
  ASSERT_NE(second, nullptr) << error;
  EXPECT_EQ(first->device().gids(), second->device().gids());
  EXPECT_EQ(first->transport().udp_port(), 0);
  EXPECT_EQ(holder->transport().udp_port(), wire::kRoceUdpPort);
}

// Processes that open devices on one address at the same instant all join its
// group. The first one alone in the address's registry checks that no socket it
// does not know holds the port; a second one that joined and bound meanwhile must
// not be taken for such a socket, nor be refused because of the first one's check
// (CI, stop 33: "UDP port 4791 on 127.200.97.15 is already held by another socket"
// for a client starting beside its server).
TEST(NodeTest, ProcessesOpeningAtOnceOnOneAddressAllJoin) {
  constexpr int kRounds = 25;
  constexpr int kProcesses = 4;
  const uint32_t pid = uint32_t(getpid());
  for (int round = 0; round < kRounds; ++round) {
    Settings s;
    s.address = "127.93." + std::to_string(pid % 250) + "." + std::to_string(1 + round);
    int start[2];
    ASSERT_EQ(pipe(start), 0);
    pid_t children[kProcesses];
    for (pid_t& child : children) {
      child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        close(start[1]);
        char byte;
        (void)!read(start[0], &byte, 1);  // returns 0 when the parent closes: all go
        std::string error;
        auto node = OpenDevice::open(s, error);
        if (node == nullptr) {
          std::fprintf(stderr, "round %d, pid %d: %s\n", round, int(getpid()), error.c_str());
          _exit(1);
        }
        _exit(node->shared_address() != nullptr ? 0 : 2);
      }
    }
    close(start[0]);
    close(start[1]);
    for (pid_t child : children) {
      int status = 0;
      ASSERT_EQ(waitpid(child, &status, 0), child);
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 0) << "round " << round;
    }
  }
}

// Issue 6 defect 4: a process that exits without closing its device. exit() runs
// the static destructors while the progress thread still reads the engine's clock;
// the clock must outlive them. In the sanitizer build (UBSan halts on an invalid
// vptr) a child that raced would not exit with 0; the old clock did, 3 runs in 20.
TEST(NodeTest, ExitWithoutClosingWhileTheProgressThreadRuns) {
  for (int run = 0; run < 20; ++run) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::string error;
      auto node = OpenDevice::open(Settings{}, error);
      if (node == nullptr) _exit(3);
      for (int i = 0; i < 1000; ++i) node->loop()->wake();  // keep it turning
      // Never closed; kept reachable from a global, so LeakSanitizer does not
      // report what the application forgot (that is not what is tested).
      forgotten_node = node.release();
      std::exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "run " << run << ": killed by signal "
                                   << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "run " << run;
  }
}

}  // namespace
}  // namespace softrdma::runtime
