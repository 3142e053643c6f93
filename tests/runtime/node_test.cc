// runtime::Node composes transport, engine and progress thread as the settings say.
#include "runtime/node.h"

#include <gtest/gtest.h>

#include <string>

#include "transport/fake/fault_injector.h"

namespace softrdma::runtime {
namespace {

// Default settings: a loopback address of its own, GIDs from it, a progress thread.
TEST(NodeTest, OpensOnALoopbackAddressWithAProgressThread) {
  std::string error;
  auto node = Node::open(Settings{}, error);
  ASSERT_NE(node, nullptr) << error;
  const auto& gids = node->device().gids();
  ASSERT_EQ(gids.size(), 2u);
  EXPECT_EQ(gids[1][10], 0xff);  // ::ffff:a.b.c.d
  EXPECT_EQ(gids[1][12], 127);   // on the loopback network
  ASSERT_NE(node->loop(), nullptr);
  EXPECT_TRUE(node->loop()->running());
  EXPECT_EQ(node->faults(), nullptr);
}

// SOFTRDMA_FAULTS puts a fault injector on top; inline progress runs no thread.
TEST(NodeTest, FaultsAndInlineProgressFollowTheSettings) {
  Settings s;
  s.faults = "loss=0.5,seed=3";
  s.progress_thread = false;
  std::string error;
  auto node = Node::open(s, error);
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
  EXPECT_EQ(Node::open(s, error), nullptr);
  EXPECT_FALSE(error.empty());
  Settings t;
  t.address = "192.0.2.77";  // TEST-NET-1: never a local address
  error.clear();
  EXPECT_EQ(Node::open(t, error), nullptr);
  EXPECT_NE(error.find("192.0.2.77"), std::string::npos) << error;
}

}  // namespace
}  // namespace softrdma::runtime
