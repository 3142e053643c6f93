// Every GID the device lists is reachable by any RoCEv2 peer (issue 6, defect 8;
// docs/decisions/gid-table.md). Two network namespaces joined by a veth pair stand for
// two hosts, each interface with a real IPv4 address and the IPv6 link-local address
// the kernel gives it, as a Soft-RoCE host has. A device opened on one side with
// SOFTRDMA_ADDR's address lists only addresses of its interface, and a plain kernel
// UDP socket on the other side — which resolves IPv6 neighbours as Soft-RoCE does —
// reaches the device at each of them on port 4791. Then two devices, one per side,
// run a SEND over GID index 0 and over index 1. Needs root (ip netns); skipped with
// the reason otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/open_device.h"
#include "support/eventually.h"
#include "transport/udp/udp_socket.h"
#include "wire/icrc.h"
#include "wire/opcodes.h"
#include "wire/packet.h"

namespace softrdma::runtime {
namespace {

using transport::Gid;

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// Runs the calling thread in a named network namespace until destroyed.
class InNamespace {
 public:
  explicit InNamespace(const std::string& name)
      : home_(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) {
    const int target = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    entered_ = target >= 0 && setns(target, CLONE_NEWNET) == 0;
    if (target >= 0) close(target);
  }
  ~InNamespace() {
    if (entered_) setns(home_, CLONE_NEWNET);
    if (home_ >= 0) close(home_);
  }
  bool entered() const { return entered_; }

 private:
  int home_;
  bool entered_ = false;
};

// Two namespaces, a veth pair between them, 10.77.<n>.1 and .2/24, links up,
// duplicate address detection off so the link-local addresses are usable at once.
class VethPair : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (not root here)";
    const std::string id = std::to_string(getpid() % 100000);
    ns_a_ = "sr-gid-a" + id;
    ns_b_ = "sr-gid-b" + id;
    if_a_ = "srga" + id;
    if_b_ = "srgb" + id;
    subnet_ = "10.77." + std::to_string(getpid() % 250) + ".";
    bool ok = sh("ip netns add " + ns_a_) == 0 && sh("ip netns add " + ns_b_) == 0;
    for (const std::string& ns : {ns_a_, ns_b_})
      ok = ok && sh("ip netns exec " + ns + " sysctl -qw net.ipv6.conf.default.accept_dad=0 "
                    "net.ipv6.conf.all.accept_dad=0") == 0;
    ok = ok && sh("ip link add " + if_a_ + " netns " + ns_a_ + " type veth peer name " + if_b_ +
                  " netns " + ns_b_) == 0;
    ok = ok && sh("ip -n " + ns_a_ + " addr add " + subnet_ + "1/24 dev " + if_a_) == 0 &&
         sh("ip -n " + ns_b_ + " addr add " + subnet_ + "2/24 dev " + if_b_) == 0 &&
         sh("ip -n " + ns_a_ + " link set " + if_a_ + " up") == 0 &&
         sh("ip -n " + ns_b_ + " link set " + if_b_ + " up") == 0;
    if (!ok) GTEST_SKIP() << "cannot build the veth pair in network namespaces (ip netns, veth)";
    // The kernel adds the link-local addresses once both ends are up.
    ASSERT_TRUE(wait_for_link_local(ns_a_, subnet_ + "1", link_local_a_));
    ASSERT_TRUE(wait_for_link_local(ns_b_, subnet_ + "2", link_local_b_));
  }
  void TearDown() override {
    if (!ns_a_.empty()) sh("ip netns del " + ns_a_);
    if (!ns_b_.empty()) sh("ip netns del " + ns_b_);
  }

  static uint32_t ipv4(const std::string& text) {
    in_addr a{};
    inet_pton(AF_INET, text.c_str(), &a);
    return ntohl(a.s_addr);
  }
  // Liveness guard (5 s), not a timing assertion: the address appears or the test fails.
  static bool wait_for_link_local(const std::string& ns, const std::string& v4, Gid& out) {
    InNamespace in(ns);
    uint32_t ifindex = 0;
    return testing_support::eventually(
        [&] { return transport::udp::find_link_local(ipv4(v4), out, ifindex); },
        std::chrono::seconds(5), std::chrono::milliseconds(10));
  }
  std::unique_ptr<OpenDevice> open_node(const std::string& ns, const std::string& address) {
    InNamespace in(ns);
    EXPECT_TRUE(in.entered());
    Settings settings;
    settings.address = address;
    std::string error;
    auto node = OpenDevice::open(settings, error);
    EXPECT_NE(node, nullptr) << error;
    return node;
  }

  std::string ns_a_, ns_b_, if_a_, if_b_, subnet_;
  Gid link_local_a_{}, link_local_b_{};
};

// `gid` is an address of an interface of the current namespace.
bool is_local_address(const Gid& gid) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* it = list; it != nullptr && !found; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    Gid have{};
    uint16_t port = 0;
    sockaddr_storage storage{};
    std::memcpy(&storage, it->ifa_addr,
                it->ifa_addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    if (transport::udp::from_socket_address(storage, have, port)) found = have == gid;
  }
  freeifaddrs(list);
  return found;
}

// A RoCEv2 SEND ONLY to QP `qpn`, which does not exist: the device counts it as
// rx_unknown_qp, which proves the packet reached the engine through the ICRC check.
std::vector<uint8_t> probe_packet(const Gid& src, const Gid& dst, uint16_t src_port,
                                  uint32_t qpn) {
  std::vector<uint8_t> bytes(wire::packet_bytes(wire::op::kRcSendOnly, 8));
  wire::PacketView p = wire::build_packet(bytes, wire::op::kRcSendOnly, 8);
  p.set(wire::bth::kPkey, 0xffff);
  p.set(wire::bth::kDestQp, qpn);
  const wire::IpUdpInfo info{.src = src, .dst = dst, .src_port = src_port,
                             .dst_port = wire::kRoceUdpPort, .ipv4_id = 0, .ipv4_df = true};
  wire::write_icrc(info, bytes);
  return bytes;
}

// Sends the probe from a kernel socket bound to (src, port) in the current namespace.
bool send_probe(const Gid& src, const Gid& dst, uint32_t scope, uint32_t qpn) {
  constexpr uint16_t kPort = 0xC321;
  const bool v6 = !wire::gid_is_ipv4(dst);
  const int fd = transport::udp::open_udp_socket(v6);
  if (fd < 0 || transport::udp::bind_socket(fd, src, kPort, v6 ? scope : 0) != 0) return false;
  std::vector<uint8_t> bytes = probe_packet(src, dst, kPort, qpn);
  transport::udp::SocketAddress to = transport::udp::to_socket_address(dst, wire::kRoceUdpPort);
  if (v6) reinterpret_cast<sockaddr_in6*>(&to.storage)->sin6_scope_id = scope;
  // Nonblocking socket: a first send may wait for neighbour discovery (queued by the
  // kernel, as Soft-RoCE's packets are), not fail.
  const bool sent = sendto(fd, bytes.data(), bytes.size(), 0, to.get(), to.length) ==
                    ssize_t(bytes.size());
  close(fd);
  return sent;
}

bool wait_for_unknown_qp(engine::Device& device, uint64_t count) {
  return testing_support::eventually(  // liveness guard (10 s)
      [&] { return device.counters().rx_unknown_qp.load() >= count; }, std::chrono::seconds(10),
      std::chrono::milliseconds(10));
}

// Index 0 is the interface's link-local address, index 1 the IPv4-mapped address;
// both are addresses of the interface, and a kernel socket on the peer host reaches
// the device at each on port 4791.
TEST_F(VethPair, EveryGidIsALocalAddressThatAPeerReaches) {
  auto node = open_node(ns_a_, subnet_ + "1");
  ASSERT_NE(node, nullptr);
  const auto gids = node->device().gids();
  ASSERT_EQ(gids.size(), 2u);
  EXPECT_EQ(gids[0], link_local_a_);
  EXPECT_EQ(gids[1], wire::gid_from_ipv4(ipv4(subnet_ + "1")));
  {
    InNamespace in(ns_a_);
    for (const Gid& gid : gids) EXPECT_TRUE(is_local_address(gid));
  }
  InNamespace in(ns_b_);
  const uint32_t scope = if_nametoindex(if_b_.c_str());
  // A QPN of the device's own block on its shared address (the default), which no
  // QP has: one of a block nobody holds would be dropped before the engine
  // (rx_no_owner, host-rnic.md).
  const uint32_t block = node->shared_address() ? node->shared_address()->slot() : 0x48;
  const uint32_t qpn = block << 14 | 0x3456;
  uint64_t sent = 0;
  for (const Gid& gid : gids) {
    const Gid src = wire::gid_is_ipv4(gid) ? wire::gid_from_ipv4(ipv4(subnet_ + "2"))
                                           : link_local_b_;
    ASSERT_TRUE(send_probe(src, gid, scope, qpn)) << strerror(errno);
    ++sent;
    EXPECT_TRUE(wait_for_unknown_qp(node->device(), sent))
        << "GID index " << sent - 1 << " did not reach the device";
  }
  EXPECT_EQ(node->transport().counters().rx_bad_icrc, 0u);
}

// One RC QP of a node, connected to `remote` by GID index `index` on both sides.
struct Endpoint {
  engine::Pd* pd = nullptr;
  engine::Cq* cq = nullptr;
  engine::Qp* qp = nullptr;
};

Endpoint make_endpoint(engine::Device& device) {
  Endpoint e;
  int err = 0;
  e.pd = device.alloc_pd(err);
  e.cq = device.create_cq(16, err);
  engine::QpInit init;
  init.send_cq = e.cq;
  init.recv_cq = e.cq;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  e.qp = device.create_qp(e.pd, init, err);
  EXPECT_NE(e.qp, nullptr) << err;
  return e;
}

void connect(engine::Qp* qp, const Gid& remote_gid, uint32_t remote_qpn, uint8_t index) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = index;
  std::memcpy(a.ah_attr.grh.dgid.raw, remote_gid.data(), 16);
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
            0);
}

// Waits (liveness guard 10 s) for one completion on `cq`.
bool poll_one(engine::Cq* cq, ibv_wc& wc) {
  return testing_support::eventually([&] { return cq->poll(1, &wc) == 1; },
                                     std::chrono::seconds(10), std::chrono::milliseconds(10));
}

class VethPairGidIndex : public VethPair, public ::testing::WithParamInterface<uint8_t> {};

// Two hosts' devices connect their QPs by the same GID index, as `ibv_rc_pingpong
// -g N` on both sides does: a SEND goes each way and is acknowledged.
TEST_P(VethPairGidIndex, SendBothWays) {
  const uint8_t index = GetParam();
  auto a = open_node(ns_a_, subnet_ + "1");
  auto b = open_node(ns_b_, subnet_ + "2");
  ASSERT_TRUE(a && b);
  Endpoint ea = make_endpoint(a->device());
  Endpoint eb = make_endpoint(b->device());
  ASSERT_TRUE(ea.qp && eb.qp);
  // Index 0 is the IPv6 link-local address: the traffic below goes over IPv6.
  if (index == 0) {
    ASSERT_FALSE(wire::gid_is_ipv4(a->device().gids()[0]));
  }
  connect(ea.qp, b->device().gids()[index], eb.qp->qpn(), index);
  connect(eb.qp, a->device().gids()[index], ea.qp->qpn(), index);
  for (auto [from, to] : {std::pair{&ea, &eb}, std::pair{&eb, &ea}}) {
    ibv_recv_wr rwr{};
    rwr.wr_id = 9;
    const ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(to->qp->post_recv(&rwr, &rbad), 0);
    ibv_send_wr swr{};
    swr.wr_id = 8;
    swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    const ibv_send_wr* sbad = nullptr;
    ASSERT_EQ(from->qp->post_send(&swr, &sbad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(to->cq, wc)) << "the SEND did not arrive";
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(poll_one(from->cq, wc)) << "the SEND was not acknowledged";
    EXPECT_EQ(wc.wr_id, 8u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(a->transport().counters().rx_bad_icrc, 0u);
  EXPECT_EQ(b->transport().counters().rx_bad_icrc, 0u);
}

INSTANTIATE_TEST_SUITE_P(Indices, VethPairGidIndex, ::testing::Values(uint8_t(0), uint8_t(1)));

}  // namespace
}  // namespace softrdma::runtime
