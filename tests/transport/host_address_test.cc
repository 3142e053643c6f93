// transport::udp::host_address: the address a device serves with SOFTRDMA_ADDR unset
// (DESIGN.md §6; docs/decisions/host-rnic.md, "Defaults").
#include "transport/udp/host_address.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace softrdma::transport::udp {
namespace {

constexpr uint32_t ip(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return a << 24 | b << 16 | c << 8 | d;
}

// The default route's source first; without one, the first interface's address;
// with neither (or only loopback), 127.0.0.1.
TEST(HostAddress, TheDefaultRoutesSourceThenAnInterfacesThenLoopback) {
  const uint32_t interfaces[] = {ip(10, 1, 0, 5), ip(10, 2, 0, 5)};
  EXPECT_EQ(choose_host_address(ip(10, 2, 0, 5), interfaces, 2), ip(10, 2, 0, 5));
  EXPECT_EQ(choose_host_address(0, interfaces, 2), ip(10, 1, 0, 5));
  EXPECT_EQ(choose_host_address(ip(127, 0, 0, 1), interfaces, 2), ip(10, 1, 0, 5))
      << "a default route through loopback names no address other hosts reach";
  EXPECT_EQ(choose_host_address(0, nullptr, 0), ip(127, 0, 0, 1));
  const uint32_t loopback_only[] = {ip(127, 0, 0, 9)};
  EXPECT_EQ(choose_host_address(0, loopback_only, 1), ip(127, 0, 0, 1));
}

// In a network namespace of its own (a child process; root for `ip`; a veth
// pair, whose other end h1 has no address): loopback
// only, then an interface that is up, then a default route whose source is another
// address of it. Each step prints what host_address() said, and the child's exit
// status is the first step that disagreed.
TEST(HostAddress, FollowsTheNamespacesInterfacesAndDefaultRoute) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace and `ip`)";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(90);
    if (std::system("ip link set lo up") != 0) _exit(91);
    auto step = [](int code, const char* want) {
      const std::string got = host_address();
      std::fprintf(stderr, "step %d: host_address() = %s, want %s\n", code, got.c_str(), want);
      if (got != want) _exit(code);
    };
    step(1, "127.0.0.1");
    if (std::system("ip link add h0 type veth peer name h1 && ip link set h1 up && ip addr add 10.61.0.5/24 dev h0") != 0) _exit(92);
    step(2, "127.0.0.1");  // the interface is down: nobody reaches it there
    if (std::system("ip link set h0 up") != 0) _exit(93);
    step(3, "10.61.0.5");
    if (std::system("ip addr add 10.62.0.7/24 dev h0 && "
                    "ip route add default via 10.62.0.1 src 10.62.0.7") != 0)
      _exit(94);
    step(4, "10.62.0.7");
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the step numbered by the status failed (see stderr)";
}

}  // namespace
}  // namespace softrdma::transport::udp
