#include "engine/iwarp_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "engine/pair_ops.h"
#include "engine/cq.h"
#include "engine/iwarp/family.h"
#include "support/loopback_listener.h"

namespace softrdma::engine::testing {

namespace {
transport::Gid loopback_gid(uint8_t last) {
  transport::Gid gid{};
  gid[10] = gid[11] = 0xff;
  gid[12] = 127;
  gid[15] = last;
  return gid;
}
}  // namespace

std::array<int, 2> IwarpPairTest::tcp_pair() { return loopback_tcp_pair(); }

std::array<int, 2> loopback_tcp_pair() {
  sockaddr_in at;
  const int listener = testing_support::listen_on_loopback(at);
  EXPECT_GE(listener, 0);
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  const int server = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  return {client, server};
}

std::array<int, 2> IwarpPairTest::stream_pair() {
  if (!options_.fake_streams) return tcp_pair();
  const auto joined = streams_net_->join(*a.fake_streams, *b.fake_streams);
  link_ = joined.id;
  return joined.fds;
}

void IwarpPairTest::make_node(IwarpNode& n, const transport::Gid& gid) {
  n.transport = net_.attach(gid);
  if (options_.fake_streams) {
    n.fake_streams = streams_net_->attach(gid);
    n.device = std::make_unique<Device>(DeviceConfig{}, *n.transport,
                                        iwarp::IwarpFamily::maker(*n.fake_streams), clock_);
  } else {
    std::string why;
    n.streams = transport::tcp::TcpStreams::open(gid, why);
    ASSERT_NE(n.streams, nullptr) << why;
    n.device = std::make_unique<Device>(DeviceConfig{}, *n.transport,
                                        iwarp::IwarpFamily::maker(*n.streams));
  }
  int err = 0;
  n.pd = n.device->alloc_pd(err);
  n.scq = n.device->create_cq(1024, err);
  n.rcq = n.device->create_cq(1024, err);
  n.qp = new_rc_qp(n, 256, 4, 64);
  ASSERT_NE(n.qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  attr.port_num = 1;
  ASSERT_EQ(n.qp->modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                   IBV_QP_ACCESS_FLAGS),
            0);
  n.mem.assign(options_.memory, 0);
  n.mr = n.device->reg_mr(n.pd, n.mem.data(), n.mem.size(), n.addr(0), options_.mr_access, err);
  ASSERT_NE(n.mr, nullptr) << err;
}

Qp* IwarpPairTest::new_rc_qp(IwarpNode& n, uint32_t depth, uint32_t sges, uint32_t inline_bytes) {
  QpInit init;
  init.type = IBV_QPT_RC;
  init.send_cq = n.scq;
  init.recv_cq = n.rcq;
  init.cap = ibv_qp_cap{depth, depth, sges, sges, inline_bytes};
  int err = 0;
  Qp* qp = n.device->create_qp(n.pd, init, err);
  EXPECT_NE(qp, nullptr) << err;
  return qp;
}

void IwarpPairTest::connect(const IwarpOptions& options) {
  TearDown();
  options_ = options;
  if (options.fake_streams)
    streams_net_ = std::make_unique<transport::fake::FakeStreamNetwork>(options.window);
  make_node(a, loopback_gid(1));
  make_node(b, loopback_gid(2));
  const std::array<int, 2> fds = stream_pair();
  wire::iwarp::IwarpHandoff ha{fds[0], options.crc_a, true, options.rtr, options.ird, options.ord};
  wire::iwarp::IwarpHandoff hb{fds[1], options.crc_b, false, options.rtr, options.ird, options.ord};
  ASSERT_EQ(a.device->attach_connection(a.qp, ha), 0);
  ASSERT_EQ(b.device->attach_connection(b.qp, hb), 0);
  ASSERT_EQ(a.qp->state(), IBV_QPS_RTS);
  ASSERT_EQ(b.qp->state(), IBV_QPS_RTS);
}

void IwarpPairTest::TearDown() {
  for (IwarpNode* n : {&a, &b}) {
    n->device.reset();
    n->streams.reset();
    n->fake_streams.reset();
    n->transport.reset();
    n->mem.clear();
  }
  streams_net_.reset();
}

std::vector<ibv_wc> IwarpPairTest::wait_for(Cq* cq, size_t count) {
  std::vector<ibv_wc> got;
  run_until([&] { return drain_until(*cq, got, count); });
  return got;
}

void IwarpPairTest::post_recv(IwarpNode& n, size_t offset, uint32_t length, uint64_t wr_id) {
  ASSERT_EQ(post_one_recv(*n.qp, n.addr(offset), length, n.mr->key, wr_id), 0);
}

int IwarpPairTest::post(IwarpNode& n, ibv_wr_opcode opcode, size_t offset, uint32_t length,
                        size_t remote_offset, uint64_t wr_id, uint32_t rkey) {
  ibv_sge sge{n.addr(offset), length, n.mr->key};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = peer(n).addr(remote_offset);
  wr.wr.rdma.rkey = rkey != 0 ? rkey : peer(n).mr->key;
  const ibv_send_wr* bad = nullptr;
  return n.qp->post_send(&wr, &bad);
}

void IwarpPairTest::fill(IwarpNode& n, size_t offset, size_t length, uint32_t seed) {
  for (size_t i = 0; i < length; ++i) n.mem[offset + i] = uint8_t((seed + i * 31) >> 3);
}

}  // namespace softrdma::engine::testing
