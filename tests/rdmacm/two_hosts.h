// Two network namespaces joined by a veth pair stand for two hosts (10.79.<n>.1
// and .2): the fixture of the PeerDeath tests across hosts. Needs root (ip netns);
// skipped with the reason otherwise.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "rdmacm/peer_process.h"

namespace softrdma::rdmacm::testing {

inline int sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str());
}

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (not root here)";
    const std::string id = std::to_string(getpid() % 100000);
    ns_a_ = "sr-pd-a" + id;
    ns_b_ = "sr-pd-b" + id;
    const std::string subnet = "10.79." + std::to_string(getpid() % 250) + ".";
    server_address_ = subnet + "1";
    client_address_ = subnet + "2";
    ASSERT_EQ(sh("ip netns add " + ns_a_), 0);
    ASSERT_EQ(sh("ip netns add " + ns_b_), 0);
    ASSERT_EQ(sh("ip link add srpa" + id + " netns " + ns_a_ + " type veth peer name srpb" + id +
                 " netns " + ns_b_), 0);
    ASSERT_EQ(sh("ip -n " + ns_a_ + " addr add " + server_address_ + "/24 dev srpa" + id), 0);
    ASSERT_EQ(sh("ip -n " + ns_b_ + " addr add " + client_address_ + "/24 dev srpb" + id), 0);
    ASSERT_EQ(sh("ip -n " + ns_a_ + " link set srpa" + id + " up"), 0);
    ASSERT_EQ(sh("ip -n " + ns_b_ + " link set srpb" + id + " up"), 0);
  }
  void TearDown() override {
    for (const std::string& ns : {ns_a_, ns_b_})
      if (!ns.empty()) sh("ip netns del " + ns);
  }
  // `ip netns exec NS env SOFTRDMA_ADDR=ADDRESS [more]`: each execs the next.
  std::vector<std::string> in(const std::string& ns, const std::string& address,
                              const std::string& more = "") const {
    std::vector<std::string> prefix{"ip", "netns", "exec", ns, "env", "SOFTRDMA_ADDR=" + address};
    if (!more.empty()) prefix.push_back(more);
    return prefix;
  }

  std::string ns_a_, ns_b_, server_address_, client_address_;
  const uint16_t port_ = 7471;  // each namespace has its own ports
};

}  // namespace softrdma::rdmacm::testing
