// WAITS ON THE ENGINE'S RC LIVENESS PROBE (issue 14, defect 10, the engine half):
// these tests fail until an idle RC QP in RTS probes its peer and, unanswered
// through its retry budget, enters Error. Kept in a commit of their own so that
// they can be dropped or kept when the probe is merged.
//
// A client on another host (network namespaces, needs root) is killed while the
// server is idle: no pidfd reaches another host, the server posts nothing and has
// no keepalive, so only the probe can tell the server's QP that its peer is gone.
// Then the agent ends the connection (docs/decisions/rdma-cm.md "A peer that
// dies"): DISCONNECTED, and an rsocket's rrecv returns ECONNRESET. The hang guard
// is 120 s, above any probe interval plus retry budget worth having.
#include <gtest/gtest.h>

#include <cstdio>

#include "rdmacm/two_hosts.h"

namespace softrdma::rdmacm::testing {
namespace {

constexpr int kProbeGuardMs = 120000;

TEST_F(TwoHosts, KilledClientOfAnIdleServerIsDisconnectedByTheProbe) {
  PeerProcess server(in(ns_a_, server_address_), "cm-server", server_address_, port_);
  ASSERT_EQ(server.line(), "listening");
  PeerProcess client(in(ns_b_, client_address_), "cm", server_address_, port_);
  ASSERT_EQ(client.line(), "connected");
  ASSERT_EQ(server.line(), "connected");
  client.kill_now();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.line(kProbeGuardMs), "disconnected");
  std::printf("[ bound ] killed client on another host, idle server: DISCONNECTED after %.3f s\n",
              seconds_since(start));
}

TEST_F(TwoHosts, KilledClientEndsAnIdleRsocketReadByTheProbe) {
  PeerProcess server(in(ns_a_, server_address_), "rsocket-server", server_address_, port_);
  ASSERT_EQ(server.line(), "listening");
  PeerProcess client(in(ns_b_, client_address_), "rsocket", server_address_, port_);
  ASSERT_EQ(client.line(), "connected");
  ASSERT_EQ(server.line(), "connected");
  client.kill_now();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.line(kProbeGuardMs), "rrecv -1 ECONNRESET");
  std::printf("[ bound ] killed client on another host, idle rsocket read: ended after %.3f s\n",
              seconds_since(start));
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
