// TxBatch: packets leave in the order they were added, and repeat_last() sends a
// byte-for-byte copy of the last one, also when it had filled the batch.
#include "engine/roce/tx_batch.h"

#include <gtest/gtest.h>

#include "engine/counters.h"
#include "transport/fake/fake_network.h"
#include "wire/opcodes.h"

namespace softrdma::engine::roce {
namespace {

using transport::fake::FakeNetwork;
using transport::fake::ipv4_gid;

class TxBatchTest : public ::testing::Test {
 protected:
  // Adds a SEND_ONLY with `psn` and a payload of `psn`'s low byte.
  void add(uint32_t psn) {
    wire::PacketView p = batch_->add(*transport_, wire::op::kRcSendOnly, 16, src_, dst_, 0xC000);
    p.set(wire::bth::kPsn, psn);
    std::fill(p.payload().begin(), p.payload().end(), uint8_t(psn));
  }
  std::vector<uint32_t> sent_psns() {
    std::vector<uint32_t> psns;
    for (const auto& p : net_.take_sent()) {
      EXPECT_EQ(p.view().payload()[0], uint8_t(p.psn())) << p.summary();
      psns.push_back(p.psn());
    }
    return psns;
  }

  FakeNetwork net_;
  transport::Gid src_ = ipv4_gid(10, 0, 0, 1);
  transport::Gid dst_ = ipv4_gid(10, 0, 0, 2);
  std::unique_ptr<transport::fake::FakeTransport> transport_ = net_.attach(src_);
  std::unique_ptr<transport::fake::FakeTransport> peer_ = net_.attach(dst_);
  EngineCounters counters_;
  std::unique_ptr<TxBatch> batch_ = std::make_unique<TxBatch>(counters_);
};

TEST_F(TxBatchTest, RepeatLastSendsACopyRightAfterTheOriginal) {
  add(1);
  add(2);
  batch_->repeat_last();
  add(3);
  batch_->flush();
  EXPECT_EQ(sent_psns(), (std::vector<uint32_t>{1, 2, 2, 3}));
  EXPECT_EQ(counters_.tx_packets.load(), 4u);
}

TEST_F(TxBatchTest, RepeatLastOfAFullBatchCopiesFromTheSlotJustSent) {
  std::vector<uint32_t> expected;
  for (uint32_t psn = 0; psn < TxBatch::kBurst; ++psn) {
    add(psn);
    expected.push_back(psn);
  }
  batch_->repeat_last();  // the batch is full: it goes out first
  expected.push_back(TxBatch::kBurst - 1);
  batch_->flush();
  EXPECT_EQ(sent_psns(), expected);
}

TEST_F(TxBatchTest, RepeatLastOfAnEmptyBatchSendsNothing) {
  batch_->repeat_last();
  batch_->flush();
  EXPECT_TRUE(sent_psns().empty());
}

}  // namespace
}  // namespace softrdma::engine::roce
