// The GID table follows the host's addresses (issue 14, defect 12;
// docs/decisions/gid-table.md, "Addresses that come and go"). A device opened on
// an interface that has no IPv6 link-local address yet lists its IPv4-mapped GID
// twice; when the interface gets a link-local address the device serves it as
// GID 0 and raises IBV_EVENT_GID_CHANGE, and when the address goes, GID 0 is the
// IPv4-mapped one again, with another event. GID 1 never moves. In a network
// namespace of its own with a dummy interface whose link-local address the test
// adds and removes (one end of a veth pair: this kernel has no dummy links); needs root (ip netns), skipped with the reason otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

std::string gid_text(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

// The next async event of `context` within a hang guard of 30 s (no timing is
// asserted), acknowledged; -1 when none came.
int next_async_event(ibv_context* context) {
  pollfd p{context->async_fd, POLLIN, 0};
  if (poll(&p, 1, 30000) != 1) return -1;
  ibv_async_event event{};
  if (ibv_get_async_event(context, &event) != 0) return -1;
  const int type = event.event_type;
  EXPECT_EQ(event.element.port_num, 1);
  ibv_ack_async_event(&event);
  return type;
}

class GidChange : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (not root here)";
    const std::string id = std::to_string(getpid() % 100000);
    ns_ = "sr-gidchg" + id;
    if_ = "srgc" + id;
    address_ = "10.78." + std::to_string(getpid() % 250) + ".1";
    // An interface that makes no link-local address of its own: the test
    // adds and removes it (nodad: usable at once, as after duplicate detection).
    const std::string ip = "ip -n " + ns_ + " ";
    ASSERT_EQ(sh("ip netns add " + ns_), 0);
    ASSERT_EQ(sh(ip + "link add " + if_ + " type veth peer name " + if_ + "p"), 0);
    ASSERT_EQ(sh(ip + "addr add " + address_ + "/24 dev " + if_), 0);
    ASSERT_EQ(sh(ip + "link set " + if_ + "p up"), 0);
    home_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const int target = open(("/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(target, 0);
    ASSERT_EQ(setns(target, CLONE_NEWNET), 0);  // this thread, and the device's threads
    close(target);
    setenv("SOFTRDMA_ADDR", address_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("SOFTRDMA_ADDR");
    if (home_ >= 0) {
      setns(home_, CLONE_NEWNET);
      close(home_);
    }
    if (!ns_.empty()) sh("ip netns del " + ns_);
  }
  std::string ip() const { return "ip -n " + ns_ + " "; }

  std::string ns_, if_, address_;
  int home_ = -1;
};

ibv_context* open_first_device() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  ibv_context* context = list != nullptr && count > 0 ? ibv_open_device(list[0]) : nullptr;
  if (list != nullptr) ibv_free_device_list(list);
  return context;
}

// Held by the device: a second socket cannot bind [address%if]:4791.
bool port_held(const std::string& address, const std::string& ifname) {
  const int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(4791);
  inet_pton(AF_INET6, address.c_str(), &a.sin6_addr);
  a.sin6_scope_id = if_nametoindex(ifname.c_str());
  const bool held = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EADDRINUSE;
  close(fd);
  return held;
}

// The link-local address an administrator adds (and removes).
TEST_F(GidChange, LinkLocalAddressThatComesAndGoesIsGidZero) {
  ASSERT_EQ(sh(ip() + "link set " + if_ + " addrgenmode none"), 0);
  ASSERT_EQ(sh(ip() + "link set " + if_ + " up"), 0);
  ibv_context* context = open_first_device();
  ASSERT_NE(context, nullptr);
  const std::string mapped = "::ffff:" + address_;
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(context, 1, 1, &gid), 0);
  ASSERT_EQ(gid_text(gid), mapped);  // this test's device, on the dummy interface
  ASSERT_EQ(ibv_query_gid(context, 1, 0, &gid), 0);
  EXPECT_EQ(gid_text(gid), mapped);  // no link-local address yet

  ASSERT_EQ(sh(ip() + "addr add fe80::5eed:1/64 dev " + if_ + " nodad"), 0);
  EXPECT_EQ(next_async_event(context), IBV_EVENT_GID_CHANGE);
  ASSERT_EQ(ibv_query_gid(context, 1, 0, &gid), 0);
  EXPECT_EQ(gid_text(gid), "fe80::5eed:1");
  EXPECT_TRUE(port_held("fe80::5eed:1", if_));  // served: its socket is bound
  ASSERT_EQ(ibv_query_gid(context, 1, 1, &gid), 0);
  EXPECT_EQ(gid_text(gid), mapped);  // an entry that stays keeps its index

  ASSERT_EQ(sh(ip() + "addr del fe80::5eed:1/64 dev " + if_), 0);
  EXPECT_EQ(next_async_event(context), IBV_EVENT_GID_CHANGE);
  ASSERT_EQ(ibv_query_gid(context, 1, 0, &gid), 0);
  EXPECT_EQ(gid_text(gid), mapped);
  ASSERT_EQ(ibv_query_gid(context, 1, 1, &gid), 0);
  EXPECT_EQ(gid_text(gid), mapped);
  EXPECT_EQ(ibv_close_device(context), 0);
}

// A service started before its interface was up: the kernel makes the link-local
// address when the link comes up, tentative until duplicate address detection
// ends (it cannot be bound before), then usable: GID 0 then. Link down removes it.
TEST_F(GidChange, InterfaceThatComesUpGetsItsLinkLocalAddressAsGidZero) {
  ibv_context* context = open_first_device();
  ASSERT_NE(context, nullptr);
  const std::string mapped = "::ffff:" + address_;
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(context, 1, 1, &gid), 0);
  ASSERT_EQ(gid_text(gid), mapped);
  ASSERT_EQ(ibv_query_gid(context, 1, 0, &gid), 0);
  EXPECT_EQ(gid_text(gid), mapped);

  ASSERT_EQ(sh(ip() + "link set " + if_ + " up"), 0);
  EXPECT_EQ(next_async_event(context), IBV_EVENT_GID_CHANGE);
  ASSERT_EQ(ibv_query_gid(context, 1, 0, &gid), 0);
  const std::string link_local = gid_text(gid);
  EXPECT_EQ(link_local.rfind("fe80::", 0), 0u) << link_local;
  EXPECT_TRUE(port_held(link_local, if_));

  ASSERT_EQ(sh(ip() + "link set " + if_ + " down"), 0);
  EXPECT_EQ(next_async_event(context), IBV_EVENT_GID_CHANGE);
  ASSERT_EQ(ibv_query_gid(context, 1, 0, &gid), 0);
  EXPECT_EQ(gid_text(gid), mapped);
  EXPECT_EQ(ibv_close_device(context), 0);
}

}  // namespace
