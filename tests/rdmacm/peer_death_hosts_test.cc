// A peer that dies on another host (issue 14, defect 10; docs/decisions/rdma-cm.md
// "A peer that dies"). Two network namespaces joined by a veth pair stand for two
// hosts (10.79.<n>.1 and .2, SOFTRDMA_ADDR in each); the server and the client are
// rdmacm_test_peer processes, one per namespace. No pidfd reaches another host:
// the server learns of the client's death from its QP only. Needs root (ip netns);
// skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rdmacm/peer_process.h"

namespace softrdma::rdmacm::testing {
namespace {

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

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

// An rsocket server with SO_KEEPALIVE (1 s) blocked in rrecv: the client on the
// other host is killed, the keepalive goes unanswered, rrecv returns ECONNRESET.
TEST_F(TwoHosts, KeepaliveEndsABlockedReadFromAKilledClient) {
  PeerProcess server(in(ns_a_, server_address_, "PEER_KEEPALIVE=1"), "rsocket-server",
                     server_address_, port_);
  ASSERT_EQ(server.line(), "listening");
  PeerProcess client(in(ns_b_, client_address_), "rsocket", server_address_, port_);
  ASSERT_EQ(client.line(), "connected");
  ASSERT_EQ(server.line(), "connected");
  client.kill_now();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.line(), "rrecv -1 ECONNRESET");
  std::printf("[ bound ] killed client on another host, keepalive 1 s: rrecv ended after %.3f s\n",
              seconds_since(start));
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
