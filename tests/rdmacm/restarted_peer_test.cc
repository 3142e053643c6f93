// A process that takes over an address another process of this host left a
// moment ago — a restarted service or pod keeping its address (issue 27, finding
// 4). The server's CM answers its REQ with a REP sent as a UD SEND from QP1 by
// the same-host path; that path remembers, per destination GID, the process
// serving it. It remembered the exited process for up to a second, placed the
// REP into nobody's memory (engine.host_datagrams_dropped) and the new client
// connected only when its REQ was resent, 0.5-1 s later. Now a remembered
// process found gone is looked up again before the send: the first REQ is
// answered. The REP dropped is what is checked (a count), not the time taken.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "rdmacm/peer_process.h"
#include "support/status_counter.h"

namespace softrdma::rdmacm::testing {
namespace {

// An address no default (127.x.y.z from a pid below 2^22) takes, this test's own.
std::string own_address() {
  const unsigned pid = unsigned(getpid());
  return "127.254." + std::to_string((pid >> 8) & 0xff) + "." + std::to_string(pid & 0xff);
}

uint64_t dropped_here() {
  return testing_support::engine_counter(SOFTRDMA_TOOL, getpid(), "host_datagrams_dropped");
}

TEST(RestartedPeer, FirstRequestFromTheNextProcessOnAnAddressIsAnswered) {
  CmServer server;
  ASSERT_NE(server.listen_id, nullptr);
  const std::vector<std::string> on_address{"env", "SOFTRDMA_ADDR=" + own_address()};
  {
    PeerProcess first(on_address, "cm", "127.0.0.1", server.port);
    ASSERT_TRUE(server.accept());
    ASSERT_EQ(first.line(), "connected");
    first.kill_now();
    ASSERT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);  // its exit was seen
  }
  server.drop_connection();
  const uint64_t dropped = dropped_here();
  ASSERT_NE(dropped, UINT64_MAX) << "no engine counters from " SOFTRDMA_TOOL " status";
  // The next process on that address connects at once.
  PeerProcess second(on_address, "cm", "127.0.0.1", server.port);
  ASSERT_TRUE(server.accept());
  ASSERT_EQ(second.line(), "connected");
  EXPECT_EQ(dropped_here(), dropped)
      << "a UD SEND of the server (its REP) went to the address's previous process";
  second.kill_now();
  EXPECT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);
}

// The same after an orderly exit (a service restarted by its supervisor): the
// first process is disconnected and exits by itself. What is checked is what the
// finding's user saw: the next process's REQ is answered the first time, so its
// CM sends nothing again (a resend comes only after the CM response timeout,
// 4.096 µs × 2^17 = 0.54 s, without an answer). It resent once before the fix.
TEST(RestartedPeer, TheNextProcessAfterAnOrderlyExitSendsItsRequestOnce) {
  CmServer server;
  ASSERT_NE(server.listen_id, nullptr);
  const std::vector<std::string> on_address{"env", "SOFTRDMA_ADDR=" + own_address()};
  {
    PeerProcess first(on_address, "cm", "127.0.0.1", server.port);
    ASSERT_TRUE(server.accept());
    ASSERT_EQ(first.line(), "connected");
    ASSERT_EQ(rdma_disconnect(server.conn), 0);
    ASSERT_EQ(server.next(), RDMA_CM_EVENT_DISCONNECTED);
    ASSERT_EQ(first.line(), "disconnected");
    ASSERT_TRUE(first.exited_cleanly());
  }
  server.drop_connection();
  const uint64_t dropped = dropped_here();
  ASSERT_NE(dropped, UINT64_MAX) << "no engine counters from " SOFTRDMA_TOOL " status";
  PeerProcess second(on_address, "cm", "127.0.0.1", server.port);
  ASSERT_TRUE(server.accept());
  ASSERT_EQ(second.line(), "connected");
  const uint64_t resent =
      testing_support::engine_counter(SOFTRDMA_TOOL, second.pid(), "cm_mads_resent");
  EXPECT_EQ(resent, 0u) << "its REQ went unanswered and was sent again";
  EXPECT_EQ(dropped_here(), dropped)
      << "a UD SEND of the server (its REP) went to the address's previous process";
}

}  // namespace
}  // namespace softrdma::rdmacm::testing
