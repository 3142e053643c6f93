// What the RC engine itself costs, without the kernel: two devices joined by the
// in-memory fake network (which copies each packet once and checks its ICRC), one
// RC QP each. Compare with the perftest figures over UDP (docs/performance.md) to
// see how much of a packet's cost is the engine and how much the socket path.
#include <benchmark/benchmark.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "transport/fake/fake_network.h"

namespace {

using namespace softrdma;

struct Side {
  std::unique_ptr<transport::fake::FakeTransport> transport;
  std::unique_ptr<engine::Device> device;
  engine::Pd* pd = nullptr;
  engine::Cq* cq = nullptr;
  engine::Qp* qp = nullptr;
  engine::Mr* mr = nullptr;
  std::vector<uint8_t> mem = std::vector<uint8_t>(16 << 20);
};

void open_side(Side& s, transport::fake::FakeNetwork& net, uint8_t host) {
  s.transport = net.attach(transport::fake::ipv4_gid(10, 0, 0, host));
  s.device = std::make_unique<engine::Device>(engine::DeviceConfig{}, *s.transport, engine::roce::RoceFamily::maker());
  int err = 0;
  s.pd = s.device->alloc_pd(err);
  s.cq = s.device->create_cq(4096, err);
  engine::QpInit init;
  init.send_cq = init.recv_cq = s.cq;
  init.cap = ibv_qp_cap{1024, 1024, 1, 1, 0};
  s.qp = s.device->create_qp(s.pd, init, err);
  s.mr = s.device->reg_mr(s.pd, s.mem.data(), s.mem.size(), uint64_t(uintptr_t(s.mem.data())),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ, err);
}

void connect(Side& s, const Side& peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  s.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = peer.qp->qpn();
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.device->gids()[1].data(), 16);
  s.qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  s.qp->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

// One RDMA operation of `range(0)` bytes from a to b, run to completion per
// iteration (post, then progress both devices until the completion is polled).
void run_op(benchmark::State& state, ibv_wr_opcode opcode) {
  transport::fake::FakeNetwork net;
  Side a, b;
  open_side(a, net, 1);
  open_side(b, net, 2);
  connect(a, b);
  connect(b, a);
  const uint32_t len = uint32_t(state.range(0));
  ibv_sge sge{uint64_t(uintptr_t(a.mem.data())), len, a.mr->key};
  ibv_send_wr wr{};
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = uint64_t(uintptr_t(b.mem.data()));
  wr.wr.rdma.rkey = b.mr->key;
  ibv_wc wc{};
  for (auto _ : state) {
    const ibv_send_wr* bad = nullptr;
    a.qp->post_send(&wr, &bad);
    while (a.cq->poll(1, &wc) == 0) {
      b.device->progress();
      a.device->progress();
    }
    if (wc.status != IBV_WC_SUCCESS) state.SkipWithError("completion failed");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * len);
  b.device.reset();
  a.device.reset();
}

void BM_Write(benchmark::State& state) { run_op(state, IBV_WR_RDMA_WRITE); }
void BM_Read(benchmark::State& state) { run_op(state, IBV_WR_RDMA_READ); }

BENCHMARK(BM_Write)->Arg(64)->Arg(4096)->Arg(65536)->Arg(1 << 20);
BENCHMARK(BM_Read)->Arg(64)->Arg(4096)->Arg(65536)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
