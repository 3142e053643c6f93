// A retry survives the loss of any one of the packets it hinges on
// (docs/decisions/retransmission.md "A retry's first packet and its answer"). A
// retry gets nowhere unless its first packet arrives (requests are taken in PSN
// order, IBA 9.7.5.1.3; a READ's answer from the response the requester lacks on,
// IBA 9.7.5.2.1) and the answer to it does. Each went once: one lost packet wasted
// the retry, and at 10 % loss each way an 8 MiB READ or WRITE (hundreds of retries)
// ran out of retry_cnt now and then (two-process test rc_Loss10 under load,
// IBV_WC_RETRY_EXC_ERR after 8 retries without progress). Here the network loses
// one such packet of every retry, always the same one: the message still completes,
// after one retry.
#include <memory>
#include <string>
#include <vector>

#include "engine/rc_fixture.h"
#include "wire/opcodes.h"
#include "wire/psn.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::FakeNetwork;
using transport::fake::FakePacket;
namespace op = wire::op;

constexpr uint32_t kPackets = 8;  // at MTU 1024
constexpr uint32_t kGapAt = 3;    // the first transmission loses this PSN's packet

// Which packet of every retry the network loses (unless it is a copy).
enum class Lost { kReadRequest, kReadFirstResponse, kWriteFirstPacket, kWriteAck };

struct Case {
  const char* name;
  Lost lost;
  uint64_t timeouts;  // the first loss is seen by the timer, not by a gap
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class OneLossPerRetryTest : public RcPairTest, public ::testing::WithParamInterface<Case> {
 protected:
  // Drops every packet `lost` names unless it is a copy of the packet just before
  // it (the same bytes at the same instant: a second copy sent back to back, not a
  // later retry). The first transmission loses the packet at kGapAt.
  void lose_one_packet_of_every_retry(Lost lost) {
    const uint32_t gap_psn = wire::psn_add(options_.a_psn, kGapAt);
    struct Previous {
      std::vector<uint8_t> bytes;
      Nanos at = -1;
    };
    auto previous = std::make_shared<Previous>();
    auto requests = std::make_shared<int>(0);
    auto answers = std::make_shared<int>(0);
    net_.drop(
        [=, this](const FakePacket& p) {
          const Nanos now = clock_.now();
          const bool copy = p.bytes == previous->bytes && now == previous->at;
          *previous = Previous{p.bytes, now};
          const wire::OpcodeInfo& info = p.view().info();
          const bool at_gap = p.psn() == gap_psn;
          switch (lost) {
            case Lost::kReadRequest:
              if (p.opcode() == op::kRcReadRequest) return ++*requests > 1 && !copy;
              return at_gap && info.is(wire::kOpReadResponse) && ++*answers == 1;
            case Lost::kReadFirstResponse:
              return at_gap && info.is(wire::kOpReadResponse) && !copy;
            case Lost::kWriteFirstPacket:
              return at_gap && info.is(wire::kOpRequest) && !copy;
            case Lost::kWriteAck:
              return p.opcode() == op::kRcAcknowledge && !copy;
          }
          return false;
        },
        FakeNetwork::kEvery);
  }
};

INSTANTIATE_TEST_SUITE_P(EachPacket, OneLossPerRetryTest,
                         ::testing::Values(Case{"ReadRequest", Lost::kReadRequest, 0},
                                           Case{"ReadFirstResponse", Lost::kReadFirstResponse, 0},
                                           Case{"WriteFirstPacket", Lost::kWriteFirstPacket, 0},
                                           Case{"WriteAck", Lost::kWriteAck, 1}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

TEST_P(OneLossPerRetryTest, TheMessageCompletesAfterOneRetry) {
  const Case& c = GetParam();
  const bool read = c.lost == Lost::kReadRequest || c.lost == Lost::kReadFirstResponse;
  Node& source = read ? b : a;
  Node& target = read ? a : b;
  fill(source, 0, kPackets * 1024, 31);
  lose_one_packet_of_every_retry(c.lost);
  ASSERT_EQ(post(a, read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, 0, kPackets * 1024, 0, 1), 0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  const auto done = poll(a.scq);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);  // was IBV_WC_RETRY_EXC_ERR
  EXPECT_TRUE(same(source, 0, target, 0, kPackets * 1024));
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  // One retry; its lost packet had a copy that arrived.
  EXPECT_EQ(a.counters().retries.load(), 1u);
  EXPECT_EQ(a.counters().retransmit_timeouts.load(), c.timeouts);
}

}  // namespace
}  // namespace softrdma::engine::testing
