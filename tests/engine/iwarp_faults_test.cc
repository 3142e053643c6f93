// The iWARP family when its stream misbehaves (fake streams, manual clock): a
// connection that ends in the middle of a message, bytes held back and then
// released, a reset at the start of an FPDU, inside its MPA length or inside its
// payload, and a peer that never answers a READ. What the engine owes in each
// case: TCP is iWARP's only transport of loss (RFC 5040 §5: no retransmission,
// no timeout of its own), so the end of the stream ends both QPs: Error, every
// outstanding WR flushed with IBV_WC_WR_FLUSH_ERR (IBA 10.3.1, as siw's
// siw_sq_flush/siw_rq_flush do), and nothing of a partial FPDU placed (RFC 5044
// §4: an FPDU is taken whole, its length and CRC first).
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "engine/iwarp_fixture.h"

namespace softrdma::engine::testing {
namespace {

using transport::fake::End;
using transport::fake::kFirst;
using transport::fake::kSecond;

constexpr size_t kRecvAt = 2 << 20;  // where b's receive buffers are

class IwarpFaultTest : public IwarpPairTest {
 protected:
  void SetUp() override { connect(fake(IwarpOptions{})); }
  static IwarpOptions fake(IwarpOptions o) {
    o.fake_streams = true;
    return o;
  }
  bool both_in_error() {
    return run_until([&] {
      return a.qp->state() == IBV_QPS_ERR && b.qp->state() == IBV_QPS_ERR;
    });
  }
  // Whether `cq` gets a completion within `limit` of virtual time (it is kept).
  bool completes_within(Cq* cq, Nanos limit) {
    return run_until([&] {
      ibv_wc wc;
      if (cq->poll(1, &wc) > 0) seen_.push_back(wc);
      return !seen_.empty();
    }, limit);
  }
  std::vector<ibv_wc> seen_;
  // The bytes a has written so far: an offset from here is into what comes next.
  uint64_t a_wrote() const { return streams_net_->written(link_, kFirst); }
  static bool all_zero(const std::vector<uint8_t>& m, size_t at, size_t n) {
    for (size_t i = at; i < at + n; ++i)
      if (m[i] != 0) return false;
    return true;
  }
};

// a's 300 kB SEND leaves in pieces (the streams hold 64 KiB each way), and the
// connection closes (a FIN) 100 000 bytes into it; a second SEND waits behind it.
// Expect: b never completes its receive with a part of the message: it is
// flushed, b's QP enters Error and ends its side; a hears that end and enters
// Error too; neither SEND was delivered to the LLP whole (RFC 5040 §5.2), so both
// are flushed, in the order posted.
TEST_F(IwarpFaultTest, TheStreamClosingInTheMiddleOfAMessageFlushesBothSides) {
  IwarpOptions o = fake(IwarpOptions{});
  o.window = 64 * 1024;
  connect(o);
  post_recv(b, kRecvAt, 400000, 1);
  post_recv(b, kRecvAt, 400000, 2);
  fill(a, 0, 300000, 3);
  streams_net_->end_at(link_, kFirst, a_wrote() + 100000, End::kClose);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 300000, 0, 10), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 11), 0);
  ASSERT_TRUE(both_in_error());
  const auto sent = wait_for(a.scq, 2);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].wr_id, 10u);
  EXPECT_EQ(sent[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(sent[1].wr_id, 11u);
  EXPECT_EQ(sent[1].status, IBV_WC_WR_FLUSH_ERR);
  const auto received = wait_for(b.rcq, 2);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].wr_id, 1u);
  EXPECT_EQ(received[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(received[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.counters().iwarp_streams_lost.load(), 1u);
  EXPECT_EQ(b.counters().iwarp_streams_lost.load(), 1u);
  EXPECT_EQ(b.counters().iwarp_terminates_sent.load(), 0u) << "no stream to send one on";
}

// a's bytes are held on the way (a congested path, a peer descheduled): a SEND,
// a WRITE and a second SEND, 400 kB in all, more than the 256 KiB the streams
// hold. Expect: while held nothing arrives, however long (virtual) time passes,
// and the WRs whose bytes the stream could not take do not complete; once
// released, everything arrives intact and in order, and every WR completes.
TEST_F(IwarpFaultTest, HeldBytesArriveIntactAndInOrderOnceReleased) {
  IwarpOptions o = fake(IwarpOptions{});
  o.window = 256 * 1024;
  connect(o);
  ASSERT_TRUE(run_until([&] { return a.counters().rx_packets.load() > 0; }))
      << "the RTR's answer: both sides are up";
  post_recv(b, kRecvAt, 200000, 1);
  post_recv(b, kRecvAt + 200000, 1000, 2);
  fill(a, 0, 200000, 5);
  fill(a, 1 << 20, 200000, 6);
  streams_net_->hold(link_, kFirst);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 200000, 0, 10), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 1 << 20, 200000, 3 << 20, 11), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 100, 1000, 0, 12), 0);
  EXPECT_FALSE(completes_within(b.rcq, 2'000'000'000)) << "nothing arrives while held";
  const auto before = wait_for(a.scq, 3);
  ASSERT_EQ(before.size(), 1u) << "only the SEND the stream took whole";
  EXPECT_EQ(before[0].wr_id, 10u);
  EXPECT_TRUE(all_zero(b.mem, 3 << 20, 200000));
  EXPECT_EQ(b.counters().rx_packets.load(), 1u) << "the RTR alone";

  streams_net_->release(link_, kFirst);
  const auto received = wait_for(b.rcq, 2);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].wr_id, 1u);
  EXPECT_EQ(received[0].byte_len, 200000u);
  EXPECT_EQ(received[1].wr_id, 2u);
  EXPECT_EQ(received[1].byte_len, 1000u);
  EXPECT_EQ(std::memcmp(&a.mem[0], &b.mem[kRecvAt], 200000), 0);
  EXPECT_EQ(std::memcmp(&a.mem[1 << 20], &b.mem[3 << 20], 200000), 0);
  EXPECT_EQ(std::memcmp(&a.mem[100], &b.mem[kRecvAt + 200000], 1000), 0);
  const auto after = wait_for(a.scq, 2);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].wr_id, 11u);
  EXPECT_EQ(after[1].wr_id, 12u);
  EXPECT_EQ(after[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
}

// Where in a 5000-byte SEND's FPDU the connection is reset: before its first
// byte, inside its 2-byte MPA length, inside its payload.
struct ResetAt {
  const char* name;
  uint64_t offset;
};
void PrintTo(const ResetAt& at, std::ostream* os) { *os << at.name; }
class IwarpResetTest : public IwarpFaultTest, public ::testing::WithParamInterface<ResetAt> {};
INSTANTIATE_TEST_SUITE_P(Offsets, IwarpResetTest,
                         ::testing::Values(ResetAt{"AtItsFirstByte", 0},
                                           ResetAt{"InItsMpaLength", 1},
                                           ResetAt{"InItsPayload", 2 + 18 + 2500}),
                         [](const auto& info) { return std::string(info.param.name); });

// Expect: a meets the reset while writing and enters Error, its SEND flushed; b
// takes the bytes before the reset, finds no whole FPDU in them and places
// nothing, then meets the reset and enters Error, its receive flushed.
TEST_P(IwarpResetTest, AResetInsideAnFpduEndsBothQpsAndPlacesNothing) {
  ASSERT_TRUE(run_until([&] { return a.counters().rx_packets.load() > 0; }));
  post_recv(b, kRecvAt, 8192, 1);
  fill(a, 0, 5000, 7);
  streams_net_->end_at(link_, kFirst, a_wrote() + GetParam().offset, End::kReset);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 5000, 0, 10), 0);
  ASSERT_TRUE(both_in_error());
  const auto sent = wait_for(a.scq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_WR_FLUSH_ERR);
  const auto received = wait_for(b.rcq, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(all_zero(b.mem, kRecvAt, 8192)) << "nothing of the partial FPDU was placed";
  EXPECT_EQ(streams_net_->read(link_, kFirst), a_wrote())
      << "b read every byte that left before the reset";
  EXPECT_EQ(a.counters().iwarp_streams_lost.load(), 1u);
  EXPECT_EQ(b.counters().iwarp_streams_lost.load(), 1u);
  EXPECT_EQ(b.counters().iwarp_bad_fpdus.load(), 0u) << "a cut FPDU is not a bad one";
}

// b never answers a's READ (its bytes are held for good), and a SEND follows the
// READ. Expect: the READ does not complete, nor the SEND behind it (completions
// keep the send queue's order), though b received the SEND — for as long as
// time passes: RDMAP has no timeout of its own (RFC 5040 §5), TCP's is what
// ends a dead connection. Then the application gives up (rdma_disconnect moves
// the QP to Error): both WRs are flushed, in order, and b hears the end.
TEST_F(IwarpFaultTest, APeerThatNeverAnswersAReadHoldsItUntilTheQpIsEnded) {
  ASSERT_TRUE(run_until([&] { return a.counters().rx_packets.load() > 0; }));
  post_recv(b, kRecvAt, 1000, 1);
  fill(b, 0, 4000, 8);
  streams_net_->hold(link_, kSecond);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 1 << 20, 4000, 0, 10), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 11), 0);
  const auto at_b = wait_for(b.rcq, 1);
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_b[0].status, IBV_WC_SUCCESS);
  EXPECT_FALSE(completes_within(a.scq, 10'000'000'000)) << "ten seconds later, still nothing";
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE), 0);
  const auto flushed = wait_for(a.scq, 2);
  ASSERT_EQ(flushed.size(), 2u);
  EXPECT_EQ(flushed[0].wr_id, 10u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(flushed[1].wr_id, 11u);
  EXPECT_EQ(flushed[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(all_zero(a.mem, 1 << 20, 4000));
  ASSERT_TRUE(run_until([&] { return b.qp->state() == IBV_QPS_ERR; }));
  EXPECT_EQ(b.counters().iwarp_streams_lost.load(), 1u);
}

// The same unanswered READ, and the network drops the connection (both ends
// reset). Expect: a's READ is flushed, not failed as if b had refused it, and
// both QPs are in Error.
TEST_F(IwarpFaultTest, AConnectionDroppedUnderAnUnansweredReadFlushesIt) {
  ASSERT_TRUE(run_until([&] { return a.counters().rx_packets.load() > 0; }));
  streams_net_->hold(link_, kSecond);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 1 << 20, 4000, 0, 10), 0);
  EXPECT_FALSE(completes_within(a.scq, 1'000'000'000));
  streams_net_->drop(link_);
  ASSERT_TRUE(both_in_error());
  const auto flushed = wait_for(a.scq, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.counters().iwarp_streams_lost.load(), 1u);
  EXPECT_EQ(b.counters().iwarp_streams_lost.load(), 1u);
}

}  // namespace
}  // namespace softrdma::engine::testing
