#include "engine/path_pair.h"

#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "engine/pair_ops.h"
#include "engine/cq.h"
#include "engine/iwarp/family.h"
#include "engine/iwarp_fixture.h"
#include "engine/roce/family.h"
#include "transport/udp/udp_transport.h"
#include "wire/iwarp/handoff.h"
#include "wire/qpn_blocks.h"

namespace softrdma::engine::testing {

namespace {

transport::Gid loopback_gid(uint8_t last) {
  transport::Gid gid{};
  gid[10] = gid[11] = 0xff;
  gid[12] = 127;
  gid[15] = last;
  return gid;
}

// Bytes of ours the peer's TCP acknowledged (RFC 4898 tcpEStatsAppHCThruOctetsAcked).
uint64_t tcp_bytes_acked(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  return info.tcpi_bytes_acked;
}

}  // namespace

std::string path_param_name(const ::testing::TestParamInfo<Path>& info) {
  switch (info.param) {
    case Path::kRoceFake:
      return "RoceFake";
    case Path::kRoceUdp:
      return "RoceUdp";
    case Path::kSameHost:
      return "SameHost";
    case Path::kSharedAddress:
      return "SharedAddress";
    case Path::kIwarpFake:
      return "IwarpFake";
    case Path::kIwarpTcp:
      return "IwarpTcp";
  }
  return "unknown";
}

void PathPairTest::SetUp() {
  if (iwarp()) {
    if (GetParam() == Path::kIwarpFake)
      streams_net_ = std::make_unique<transport::fake::FakeStreamNetwork>(size_t(1) << 20);
    ASSERT_NO_FATAL_FAILURE(make_iwarp_node(a, 1));
    ASSERT_NO_FATAL_FAILURE(make_iwarp_node(b, 2));
    ASSERT_NO_FATAL_FAILURE(connect_iwarp());
    return;
  }
  ASSERT_NO_FATAL_FAILURE(make_roce_node(a, 1));
  ASSERT_NO_FATAL_FAILURE(make_roce_node(b, 2));
  RcOptions o;
  const int all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  ASSERT_NO_FATAL_FAILURE(connect_qp(*a.qp, *b.device, b.qp->qpn(), o.a_psn, o.b_psn, all, o));
  ASSERT_NO_FATAL_FAILURE(connect_qp(*b.qp, *a.device, a.qp->qpn(), o.b_psn, o.a_psn, all, o));
}

void PathPairTest::TearDown() {
  // Devices go before the transports they use, transports before their networks.
  for (PathNode* n : {&a, &b}) {
    n->device.reset();
    n->tcp_streams.reset();
    n->fake_streams.reset();
    n->transport.reset();
    n->host.reset();
    if (n->stream_fd >= 0) ::close(n->stream_fd);
    n->stream_fd = -1;
  }
  streams_net_.reset();
}

void PathPairTest::make_roce_node(PathNode& n, uint8_t last) {
  DeviceConfig config;
  if (GetParam() == Path::kRoceUdp) {
    // Each transport its own 127.x.y.z (udp_transport.h: default addressing).
    std::string why;
    n.transport = transport::UdpTransport::open(transport::UdpConfig{}, why);
    ASSERT_NE(n.transport, nullptr) << why;
    n.device = std::make_unique<Device>(config, *n.transport, roce::RoceFamily::maker());
    return make_verbs_objects(n);
  }
  // On the shared address a's QPNs are of block 3, b's of block 5.
  const bool shared = GetParam() == Path::kSharedAddress;
  const uint32_t block = shared ? (last == 1 ? 3 : 5) : 0;
  const transport::Gid gid = transport::fake::ipv4_gid(10, 0, 0, shared ? 9 : last);
  n.transport = net_.attach(gid, block);
  if (same_host()) {
    std::vector<uint32_t> blocks;
    if (shared) {
      blocks.push_back(block);
      config.take_qpn_block = [block, given = false]() mutable {
        return std::exchange(given, true) ? 0u : block;
      };
    }
    std::string why;
    n.host = samehost::Host::open(std::vector<transport::Gid>{gid}, why, node_directory_.path(),
                                  blocks);
    ASSERT_NE(n.host, nullptr) << why;
    config.host = n.host.get();
  }
  n.device = std::make_unique<Device>(config, *n.transport, roce::RoceFamily::maker(), clock_);
  make_verbs_objects(n);
}

void PathPairTest::make_iwarp_node(PathNode& n, uint8_t last) {
  const transport::Gid gid = loopback_gid(last);
  n.transport = net_.attach(gid);  // gives the device its address; carries nothing
  if (GetParam() == Path::kIwarpFake) {
    n.fake_streams = streams_net_->attach(gid);
    n.device = std::make_unique<Device>(DeviceConfig{}, *n.transport,
                                        iwarp::IwarpFamily::maker(*n.fake_streams), clock_);
  } else {
    std::string why;
    n.tcp_streams = transport::tcp::TcpStreams::open(gid, why);
    ASSERT_NE(n.tcp_streams, nullptr) << why;
    n.device = std::make_unique<Device>(DeviceConfig{}, *n.transport,
                                        iwarp::IwarpFamily::maker(*n.tcp_streams));
  }
  ASSERT_NO_FATAL_FAILURE(make_verbs_objects(n));
  // iWARP QPs are born in INIT (FamilyTraits::connection_managed_qps).
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  attr.port_num = 1;
  ASSERT_EQ(
      n.qp->modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
}

void PathPairTest::make_verbs_objects(PathNode& n) {
  int err = 0;
  n.pd = n.device->alloc_pd(err);
  n.scq = n.device->create_cq(4096, err);
  n.rcq = n.device->create_cq(4096, err);
  QpInit init;
  init.type = IBV_QPT_RC;
  init.send_cq = n.scq;
  init.recv_cq = n.rcq;
  init.cap = ibv_qp_cap{256, 256, 4, 4, 64};
  n.qp = n.device->create_qp(n.pd, init, err);
  ASSERT_NE(n.qp, nullptr) << err;
  n.mem.assign(kMemory, 0);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     (iwarp() ? 0 : IBV_ACCESS_REMOTE_ATOMIC);
  n.mr = n.device->reg_mr(n.pd, n.mem.data(), n.mem.size(), n.addr(0), access, err);
  ASSERT_NE(n.mr, nullptr) << err;
}

// As a connection manager would after the MPA start frames (wire/iwarp/handoff.h).
void PathPairTest::connect_iwarp() {
  std::array<int, 2> fds{};
  if (GetParam() == Path::kIwarpFake) {
    const auto joined = streams_net_->join(*a.fake_streams, *b.fake_streams);
    link_ = joined.id;
    fds = joined.fds;
  } else {
    fds = loopback_tcp_pair();
    // Our own descriptors of the sockets, so that their TCP_INFO can be read after
    // the device closed its own (a QP in Error ends its stream).
    a.stream_fd = ::fcntl(fds[0], F_DUPFD_CLOEXEC, 0);
    b.stream_fd = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 0);
  }
  using wire::iwarp::RtrKind;
  wire::iwarp::IwarpHandoff ha{fds[0], false, true, RtrKind::kRead, 8, 8};
  wire::iwarp::IwarpHandoff hb{fds[1], false, false, RtrKind::kRead, 8, 8};
  ASSERT_EQ(a.device->attach_connection(a.qp, ha), 0);
  ASSERT_EQ(b.device->attach_connection(b.qp, hb), 0);
  ASSERT_EQ(a.qp->state(), IBV_QPS_RTS);
  ASSERT_EQ(b.qp->state(), IBV_QPS_RTS);
}

std::vector<ibv_wc> PathPairTest::wait_for(Cq* cq, size_t count) {
  std::vector<ibv_wc> got;
  run_until([&] { return drain_until(*cq, got, count); });
  return got;
}

void PathPairTest::post_recv(PathNode& n, size_t offset, uint32_t length, uint64_t wr_id) {
  ASSERT_EQ(post_one_recv(*n.qp, n.addr(offset), length, n.mr->key, wr_id), 0);
}

int PathPairTest::post(PathNode& n, ibv_wr_opcode opcode, size_t offset, uint32_t length,
                       size_t remote_offset, uint64_t wr_id,
                       const std::function<void(ibv_send_wr&)>& adjust) {
  ibv_sge sge{n.addr(offset), length, n.mr->key};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  PathNode& p = peer(n);
  if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = p.addr(remote_offset);
    wr.wr.atomic.rkey = p.mr->key;
  } else {
    wr.wr.rdma.remote_addr = p.addr(remote_offset);
    wr.wr.rdma.rkey = p.mr->key;
  }
  if (adjust) adjust(wr);
  const ibv_send_wr* bad = nullptr;
  return n.qp->post_send(&wr, &bad);
}

void PathPairTest::fill(PathNode& n, size_t offset, size_t length, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < length; ++i) n.mem[offset + i] = uint8_t(rng());
}

bool PathPairTest::same(const PathNode& x, size_t xo, const PathNode& y, size_t yo,
                        size_t length) const {
  return std::memcmp(x.mem.data() + xo, y.mem.data() + yo, length) == 0;
}

void PathPairTest::expect_path_taken() {
  const bool host = same_host();
  EXPECT_EQ(a.qp->on_same_host(), host);
  EXPECT_EQ(b.qp->on_same_host(), host);
  const uint64_t device_tx = a.counters().tx_packets + b.counters().tx_packets;
  const uint64_t datagrams =
      a.transport->counters().tx_packets + b.transport->counters().tx_packets;
  EngineCounters& x = a.counters();
  EngineCounters& y = b.counters();
  const uint64_t host_ops = x.host_writes + x.host_reads + x.host_atomics + x.host_sends +
                            x.host_refused + y.host_writes + y.host_reads + y.host_atomics +
                            y.host_sends + y.host_refused;
  switch (GetParam()) {
    case Path::kRoceFake:
    case Path::kRoceUdp:
      EXPECT_GT(device_tx, 0u) << "no packet left a device";
      EXPECT_GT(datagrams, 0u) << "the datagram transport carried nothing";
      EXPECT_EQ(host_ops, 0u);
      EXPECT_EQ(dynamic_cast<transport::UdpTransport*>(a.transport.get()) != nullptr,
                GetParam() == Path::kRoceUdp);
      break;
    case Path::kSharedAddress:
      EXPECT_EQ(a.device->gids(), b.device->gids()) << "one address";
      EXPECT_EQ(wire::qpn_block(a.qp->qpn()), 3u);
      EXPECT_EQ(wire::qpn_block(b.qp->qpn()), 5u);
      [[fallthrough]];
    case Path::kSameHost:
      EXPECT_EQ(device_tx, 0u) << "a same-host pair sent packets";
      EXPECT_EQ(datagrams, 0u);
      EXPECT_GT(host_ops, 0u) << "no operation took the same-host path";
      break;
    case Path::kIwarpFake:
    case Path::kIwarpTcp: {
      EXPECT_GT(device_tx, 0u) << "no FPDU left a device";
      EXPECT_EQ(datagrams, 0u) << "iWARP sent datagrams";
      EXPECT_EQ(host_ops, 0u);
      const bool fake = GetParam() == Path::kIwarpFake;
      const uint64_t stream_bytes =
          fake ? streams_net_->written(link_, transport::fake::kFirst) +
                     streams_net_->written(link_, transport::fake::kSecond)
               : tcp_bytes_acked(a.stream_fd) + tcp_bytes_acked(b.stream_fd);
      EXPECT_GT(stream_bytes, 0u) << (fake ? "the fake link" : "the TCP connection")
                                  << " carried nothing";
      break;
    }
  }
}

}  // namespace softrdma::engine::testing
