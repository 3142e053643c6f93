// A peer that dies on another host (issue 14, defect 10; docs/decisions/rdma-cm.md
// "A peer that dies"). Two network namespaces joined by a veth pair stand for two
// hosts (10.79.<n>.1 and .2, SOFTRDMA_ADDR in each); the server and the client are
// rdmacm_test_peer processes, one per namespace. No pidfd reaches another host:
// the server learns of the client's death from its QP only. Needs root (ip netns);
// skipped with the reason otherwise.
#include <gtest/gtest.h>

#include <cstdio>

#include "rdmacm/two_hosts.h"

namespace softrdma::rdmacm::testing {
namespace {

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
