// The address a device serves with nothing set, where it cannot be shared
// (DESIGN.md §6; docs/decisions/host-rnic.md, "Defaults"). Each test runs in a
// child process in a network namespace of its own, whose one interface has one
// address, so that nothing of the host's own address is touched (root for `ip`).
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "runtime/open_device.h"
#include "wire/ip_udp.h"

namespace softrdma::runtime {
namespace {

// Runs `body` in a child in a network namespace of its own whose interface (a veth
// end, its peer up) has `address`/24; returns the child's exit status (90, 91: the
// namespace could not be made), -1 when it did not exit.
int in_a_namespace_with(const std::string& address, const std::function<int()>& body) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(90);
    const std::string setup = "ip link set lo up && ip link add h0 type veth peer name h1 && "
                              "ip link set h1 up && ip addr add " + address +
                              "/24 dev h0 && ip link set h0 up";
    if (std::system(setup.c_str()) != 0) _exit(91);
    _exit(body());
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// A UDP socket bound to `address`:4791, with SO_REUSEPORT or without.
int hold_roce_port(const char* address, bool reuseport) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  const int one = 1;
  if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(wire::kRoceUdpPort);
  inet_pton(AF_INET, address, &at.sin_addr);
  return bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0 ? fd : -1;
}

// Opened on a loopback address of its own, not shared: the fallback.
bool on_a_loopback_address_of_its_own(OpenDevice& node) {
  return node.shared_address() == nullptr && !node.settings().address_is_default &&
         node.device().gids().back()[12] == 127;
}

// The host's address cannot be had (a program that does not share holds its port
// 4791): the device opens on a loopback address of its own, rather than failing.
TEST(DefaultAddress, APortHeldByAnotherProgramGivesALoopbackAddressOfItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace and `ip`)";
  const int status = in_a_namespace_with("10.63.0.5", [] {
    if (Settings::host_address() != "10.63.0.5") return 92;
    if (hold_roce_port("10.63.0.5", false) < 0) return 93;
    std::string error;
    auto node = OpenDevice::open(Settings{}, error);
    if (node == nullptr) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 94;
    }
    return on_a_loopback_address_of_its_own(*node) ? 0 : 95;
  });
  EXPECT_EQ(status, 0) << "90-93: set-up; 94: did not open; 95: not on a loopback address "
                          "of its own";
}

// A process of another user while this user's processes serve the host's address
// (the kernel keeps it out of their SO_REUSEPORT group, and the host registry is
// theirs): with nothing set it opens on a loopback address of its own, and the
// first user's device keeps the address. The other user's process is forked before
// any device opens (no threads to fork) and waits for the first device on a pipe.
TEST(DefaultAddress, AnotherUsersProcessTakesALoopbackAddressOfItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace, another user)";
  const int status = in_a_namespace_with("10.64.0.5", [] {
    int go[2];
    if (pipe(go) != 0) return 92;
    const pid_t other = fork();
    if (other == 0) {
      char byte = 0;
      if (read(go[0], &byte, 1) != 1) _exit(80);
      if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
          setresuid(65534, 65534, 65534) != 0)
        _exit(81);
      std::string error;
      auto node = OpenDevice::open(Settings{}, error);
      if (node == nullptr) std::fprintf(stderr, "%s\n", error.c_str());
      const int code = node == nullptr ? 82 : on_a_loopback_address_of_its_own(*node) ? 0 : 83;
      // Closed before _exit, which runs no destructor: nobody's segments in
      // /dev/shm would outlive the test, and root's `softrdma status` leaves
      // another user's files alone.
      node.reset();
      _exit(code);
    }
    std::string error;
    auto first = OpenDevice::open(Settings{}, error);
    if (first == nullptr || first->shared_address() == nullptr) return 93;
    if (first->settings().address != "10.64.0.5") return 94;
    if (write(go[1], "g", 1) != 1) return 95;
    int other_status = 0;
    if (waitpid(other, &other_status, 0) != other || !WIFEXITED(other_status)) return 96;
    return WEXITSTATUS(other_status);
  });
  EXPECT_EQ(status, 0) << "90-96: the first user's side; 80-81: becoming nobody; 82: "
                          "nobody's device did not open; 83: not on a loopback address of "
                          "its own";
}

// Sockets in the address's SO_REUSEPORT group that the host registry does not know
// (processes with another /dev/shm in this network namespace, as containers on the
// host's network have): joining would put this process in a group whose other
// members nobody steers to. A named address is refused, saying so; the default
// falls back to a loopback address of its own.
TEST(DefaultAddress, AGroupTheRegistryDoesNotKnowIsNotJoined) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace and `ip`)";
  const int status = in_a_namespace_with("10.65.0.5", [] {
    if (hold_roce_port("10.65.0.5", true) < 0) return 92;
    Settings named;
    named.address = "10.65.0.5";
    std::string error;
    if (OpenDevice::open(named, error) != nullptr) return 93;
    if (error.find("cannot share it with") == std::string::npos) return 94;
    auto fallback = OpenDevice::open(Settings{}, error);
    return fallback != nullptr && on_a_loopback_address_of_its_own(*fallback) ? 0 : 95;
  });
  EXPECT_EQ(status, 0) << "90-92: set-up; 93: the named address was joined; 94: without "
                          "saying why; 95: no fallback";
}

}  // namespace
}  // namespace softrdma::runtime
