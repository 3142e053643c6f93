// QPNs from blocks, when the host's processes share an address (issue 27,
// docs/decisions/host-rnic.md, wire/qpn_blocks.h): every QPN a device hands out is in
// a block it took, unique; another block is taken when they are full; none left is
// ENOMEM, as for any exhausted resource (ibv_create_qp(3)).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <deque>
#include <set>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "transport/fake/fake_network.h"
#include "wire/qpn_blocks.h"

namespace softrdma::engine {
namespace {

class QpnBlocks : public ::testing::Test {
 protected:
  // A device whose registry gives out `blocks`, then 0.
  void open(std::deque<uint32_t> blocks) {
    blocks_ = std::move(blocks);
    DeviceConfig config;
    config.take_qpn_block = [this] {
      ++asked_;
      if (blocks_.empty()) return 0u;
      const uint32_t block = blocks_.front();
      blocks_.pop_front();
      return block;
    };
    transport_ = net_.attach(transport::fake::ipv4_gid(10, 3, 0, 1));
    device_ = std::make_unique<Device>(config, *transport_, roce::RoceFamily::maker());
    int err = 0;
    pd_ = device_->alloc_pd(err);
    cq_ = device_->create_cq(16, err);
  }
  Qp* make_qp(int& err) {
    QpInit init;
    init.send_cq = init.recv_cq = cq_;
    init.cap = ibv_qp_cap{1, 1, 1, 1, 0};
    return device_->create_qp(pd_, init, err);
  }

  transport::fake::FakeNetwork net_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<Device> device_;
  std::deque<uint32_t> blocks_;
  int asked_ = 0;
  Pd* pd_ = nullptr;
  Cq* cq_ = nullptr;
};

TEST_F(QpnBlocks, AFullBlockLeadsToTheNextAndQpnsStayUnique) {
  open({7, 8});
  std::set<uint32_t> qpns;
  int err = 0;
  for (uint32_t i = 0; i < wire::kQpnsPerBlock; ++i) {
    Qp* qp = make_qp(err);
    ASSERT_NE(qp, nullptr) << err;
    ASSERT_EQ(wire::qpn_block(qp->qpn()), 7u) << qp->qpn();
    ASSERT_TRUE(qpns.insert(qp->qpn()).second);
  }
  EXPECT_EQ(asked_, 1);
  Qp* next = make_qp(err);
  ASSERT_NE(next, nullptr) << err;
  EXPECT_EQ(wire::qpn_block(next->qpn()), 8u);
  EXPECT_EQ(asked_, 2);
}

TEST_F(QpnBlocks, ANumberFreedIsHandedOutAgainAndNoneLeftIsEnomem) {
  open({5});
  std::vector<Qp*> qps;
  int err = 0;
  for (uint32_t i = 0; i < wire::kQpnsPerBlock; ++i) {
    qps.push_back(make_qp(err));
    ASSERT_NE(qps.back(), nullptr) << err;
  }
  EXPECT_EQ(make_qp(err), nullptr);
  EXPECT_EQ(err, ENOMEM);
  const uint32_t freed = qps[100]->qpn();
  ASSERT_EQ(device_->destroy_qp(qps[100]), 0);
  Qp* again = make_qp(err);
  ASSERT_NE(again, nullptr) << err;
  EXPECT_EQ(again->qpn(), freed);
}

// Not shared (no registry): QPNs as before, anywhere above QP1.
TEST(QpnBlocksUnshared, QpnsNeedNoBlock) {
  transport::fake::FakeNetwork net;
  auto transport = net.attach(transport::fake::ipv4_gid(10, 3, 0, 2));
  Device device(DeviceConfig{}, *transport, roce::RoceFamily::maker());
  int err = 0;
  Pd* pd = device.alloc_pd(err);
  Cq* cq = device.create_cq(4, err);
  QpInit init;
  init.send_cq = init.recv_cq = cq;
  init.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  Qp* qp = device.create_qp(pd, init, err);
  ASSERT_NE(qp, nullptr) << err;
  EXPECT_GT(qp->qpn(), 1u);
}

}  // namespace
}  // namespace softrdma::engine
