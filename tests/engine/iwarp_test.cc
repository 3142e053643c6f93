// The iWARP family's data path (engine/iwarp/) between two devices over a real
// TCP connection: placement and completion of every RDMAP operation, messages of
// many FPDUs, the RTR of RFC 6581, CRCs, and the errors that end in a Terminate
// (RFC 5040 §7) or in the loss of the stream.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/iwarp/connection.h"
#include "engine/iwarp_fixture.h"

namespace softrdma::engine::testing {
namespace {

using wire::iwarp::RtrKind;

TEST_F(IwarpPairTest, ASendLandsInThePostedReceiveBothWays) {
  fill(a, 0, 100, 1);
  fill(b, 4096, 60, 2);
  post_recv(b, 8192, 256, 11);
  post_recv(a, 8192, 256, 12);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  ASSERT_EQ(post(b, IBV_WR_SEND, 4096, 60, 0, 2), 0);
  auto at_b = wait_for(b.rcq, 1);
  auto at_a = wait_for(a.rcq, 1);
  ASSERT_EQ(at_b.size(), 1u);
  ASSERT_EQ(at_a.size(), 1u);
  EXPECT_EQ(at_b[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(at_b[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(at_b[0].byte_len, 100u);
  EXPECT_EQ(at_b[0].wr_id, 11u);
  EXPECT_EQ(at_a[0].byte_len, 60u);
  EXPECT_EQ(std::memcmp(&a.mem[0], &b.mem[8192], 100), 0);
  EXPECT_EQ(std::memcmp(&b.mem[4096], &a.mem[8192], 60), 0);
  auto sent = wait_for(a.scq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
}

// A turn reads up to two streams itself and any more through epoll
// (IwarpFamily::read_directly): with four connections between the two devices,
// a SEND each way on every one arrives whole, with both ways of reading in use.
TEST_F(IwarpPairTest, SendsOnMoreStreamsThanATurnReadsDirectlyAllArrive) {
  std::vector<std::pair<Qp*, Qp*>> pairs{{a.qp, b.qp}};
  for (int i = 0; i < 3; ++i) {
    Qp* at_a = new_rc_qp(a, 16);
    Qp* at_b = new_rc_qp(b, 16);
    ASSERT_TRUE(at_a != nullptr && at_b != nullptr);
    const std::array<int, 2> fds = tcp_pair();
    wire::iwarp::IwarpHandoff ha{fds[0], false, true, RtrKind::kRead, 8, 8};
    wire::iwarp::IwarpHandoff hb{fds[1], false, false, RtrKind::kRead, 8, 8};
    ASSERT_EQ(a.device->attach_connection(at_a, ha), 0);
    ASSERT_EQ(b.device->attach_connection(at_b, hb), 0);
    pairs.emplace_back(at_a, at_b);
  }
  constexpr uint32_t kBytes = 1000;
  for (size_t i = 0; i < pairs.size(); ++i) {
    a.qp = pairs[i].first;
    b.qp = pairs[i].second;
    fill(a, i * kBytes, kBytes, uint32_t(i));
    fill(b, (8 + i) * kBytes, kBytes, uint32_t(i + 10));
    post_recv(b, (16 + i) * kBytes, kBytes, i);
    post_recv(a, (24 + i) * kBytes, kBytes, i);
    ASSERT_EQ(post(a, IBV_WR_SEND, i * kBytes, kBytes, 0, i), 0);
    ASSERT_EQ(post(b, IBV_WR_SEND, (8 + i) * kBytes, kBytes, 0, i), 0);
  }
  const auto at_b = wait_for(b.rcq, pairs.size());
  const auto at_a = wait_for(a.rcq, pairs.size());
  ASSERT_EQ(at_b.size(), pairs.size());
  ASSERT_EQ(at_a.size(), pairs.size());
  for (const auto* got : {&at_a, &at_b})
    for (const ibv_wc& wc : *got) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc.byte_len, kBytes);
    }
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.mem[i * kBytes], &b.mem[(16 + i) * kBytes], kBytes), 0) << i;
    EXPECT_EQ(std::memcmp(&b.mem[(8 + i) * kBytes], &a.mem[(24 + i) * kBytes], kBytes), 0) << i;
  }
}

// Messages far above one FPDU's 64 KiB: WRITE and SEND in many segments (DDP's
// Tagged Offset, and MSN/MO), READ answered in many responses.
TEST_F(IwarpPairTest, LargeWriteReadAndSendArriveWhole) {
  constexpr uint32_t kBig = 1500 * 1000;
  fill(a, 0, kBig, 7);
  fill(b, 2 << 20, kBig, 9);
  post_recv(b, 0, kBig, 5);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, kBig, 2 << 20, 1), 0);  // overwrites b's pattern
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, kBig, 0, 2), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 2 << 20, kBig, 2 << 20, 3), 0);
  auto done = wait_for(a.scq, 3);
  ASSERT_EQ(done.size(), 3u) << a.qp->state() << " " << b.qp->state() << " tx "
                             << a.counters().tx_packets << "/" << b.counters().tx_packets
                             << " rx " << a.counters().rx_packets << "/"
                             << b.counters().rx_packets << " term "
                             << b.counters().iwarp_terminates_sent;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(done[i].status, IBV_WC_SUCCESS) << i;
    EXPECT_EQ(done[i].wr_id, uint64_t(i + 1));  // in the order posted
  }
  EXPECT_EQ(done[2].opcode, IBV_WC_RDMA_READ);
  auto recv = wait_for(b.rcq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].byte_len, kBig);
  EXPECT_EQ(std::memcmp(&a.mem[0], &b.mem[0], kBig), 0);
  EXPECT_EQ(std::memcmp(&a.mem[0], &b.mem[2 << 20], kBig), 0);
  EXPECT_EQ(std::memcmp(&a.mem[0], &a.mem[2 << 20], kBig), 0);  // read back
  // FPDUs: the RTR READ and its response, then ceil(kBig / kMaxSegmentPayload)
  // per message, the READ request being one; and a's nudges, if b stayed silent
  // that long (connection.cc).
  const uint64_t per_message = (kBig + iwarp::kMaxSegmentPayload - 1) / iwarp::kMaxSegmentPayload;
  EXPECT_EQ(a.counters().tx_packets.load(),
            1 + 2 * per_message + 1 + a.counters().iwarp_nudges.load());
  EXPECT_EQ(b.counters().tx_packets.load(), 1 + per_message);
}

// More than the 1 MiB of FPDUs a turn builds: production stops for room, and
// goes on when TCP took it all (not only when the stream reports room).
TEST_F(IwarpPairTest, ManySendsBeyondOneTurnsBufferAllComplete) {
  constexpr int kSends = 200;
  constexpr uint32_t kSize = 64 * 1024;
  fill(a, 0, kSize, 5);
  for (int i = 0; i < kSends; ++i) post_recv(b, 0, kSize, uint64_t(i));
  for (int i = 0; i < kSends; ++i) ASSERT_EQ(post(a, IBV_WR_SEND, 0, kSize, 0, uint64_t(i)), 0);
  auto sent = wait_for(a.scq, kSends);
  auto received = wait_for(b.rcq, kSends);
  ASSERT_EQ(sent.size(), size_t(kSends));
  ASSERT_EQ(received.size(), size_t(kSends));
  for (const ibv_wc& wc : received) EXPECT_EQ(wc.byte_len, kSize);
  EXPECT_EQ(std::memcmp(&a.mem[0], &b.mem[0], kSize), 0);
}

TEST_F(IwarpPairTest, MoreReadsThanTheOrdWaitTheirTurn) {
  IwarpOptions o;
  o.ord = 1;
  o.ird = 1;
  connect(o);
  fill(b, 0, 64 * 1024, 3);
  for (uint32_t i = 0; i < 16; ++i)
    ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 65536 + i * 4096, 4096, i * 4096, i), 0);
  auto done = wait_for(a.scq, 16);
  ASSERT_EQ(done.size(), 16u);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(done[i].status, IBV_WC_SUCCESS) << i;
  EXPECT_EQ(std::memcmp(&a.mem[65536], &b.mem[0], 64 * 1024), 0);
  EXPECT_EQ(b.counters().iwarp_terminates_sent.load(), 0u);
}

class IwarpRtrTest : public IwarpPairTest, public ::testing::WithParamInterface<RtrKind> {};

// RFC 6581 §5, each kind of RTR: the responder's first SEND waits for it, and a
// zero-length SEND as RTR takes no receive WQE.
TEST_P(IwarpRtrTest, TheResponderSendsAfterTheRtrAndNoReceiveIsTaken) {
  IwarpOptions o;
  o.rtr = GetParam();
  connect(o);
  post_recv(a, 0, 64, 1);
  post_recv(b, 0, 64, 2);
  ASSERT_EQ(post(b, IBV_WR_SEND, 128, 10, 0, 3), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 128, 20, 0, 4), 0);
  auto at_a = wait_for(a.rcq, 1);
  auto at_b = wait_for(b.rcq, 1);
  ASSERT_EQ(at_a.size(), 1u);
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_a[0].byte_len, 10u);
  EXPECT_EQ(at_b[0].byte_len, 20u);
  EXPECT_EQ(at_b[0].wr_id, 2u);
}

// With no RTR agreed (a stock siw initiator), a responder that speaks first
// (ucmatose's server) is not held for ever: it sends once the initiator stayed
// silent a while (connection.cc kReleaseWithoutRtr).
TEST_F(IwarpPairTest, WithoutAnRtrAResponderThatSpeaksFirstIsHeardAfterAWhile) {
  IwarpOptions o;
  o.rtr = RtrKind::kNone;
  connect(o);
  post_recv(a, 0, 64, 1);
  ASSERT_EQ(post(b, IBV_WR_SEND, 128, 10, 0, 2), 0);
  auto at_a = wait_for(a.rcq, 1);
  ASSERT_EQ(at_a.size(), 1u);
  EXPECT_EQ(at_a[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(at_a[0].byte_len, 10u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, IwarpRtrTest,
                         ::testing::Values(RtrKind::kNone, RtrKind::kSend, RtrKind::kWrite,
                                           RtrKind::kRead));

TEST_F(IwarpPairTest, WithCrcOnBothSidesEverythingArrives) {
  IwarpOptions o;
  o.crc_a = o.crc_b = true;
  connect(o);
  fill(a, 0, 200000, 4);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 200000, 0, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 300000, 200000, 0, 2), 0);
  auto done = wait_for(a.scq, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&a.mem[0], &a.mem[300000], 200000), 0);
  EXPECT_EQ(b.counters().iwarp_bad_fpdus.load(), 0u);
}

// A side that checks CRCs meets FPDUs whose CRC is zero (the other did not
// compute one): an MPA CRC error, a Terminate, both QPs in Error.
TEST_F(IwarpPairTest, ABadCrcIsTerminatedAndEndsBothQps) {
  IwarpOptions o;
  o.crc_b = true;
  o.rtr = RtrKind::kNone;
  connect(o);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, 0, 1), 0);
  ASSERT_TRUE(run_until([&] {
    return a.qp->state() == IBV_QPS_ERR && b.qp->state() == IBV_QPS_ERR;
  }));
  EXPECT_EQ(b.counters().iwarp_bad_fpdus.load(), 1u);
  EXPECT_EQ(b.counters().iwarp_terminates_sent.load(), 1u);
  EXPECT_EQ(b.mem[0], 0);  // nothing was placed
}

TEST_F(IwarpPairTest, AWriteToAnUnknownStagFailsWithARemoteAccessError) {
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 100, 0, 1, b.mr->key ^ 0x100), 0);
  post_recv(a, 0, 64, 9);
  auto done = wait_for(a.scq, 1);
  ASSERT_EQ(done.size(), 1u);
  // Written to TCP before the Terminate came back: the WRITE itself succeeded;
  // what follows is flushed and the QP is in Error (RFC 5040 §7.1).
  ASSERT_TRUE(run_until([&] { return a.qp->state() == IBV_QPS_ERR; }));
  EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(b.counters().iwarp_terminates_sent.load(), 1u);
  EXPECT_EQ(a.counters().iwarp_terminates_received.load(), 1u);
  auto flushed = wait_for(a.rcq, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(IwarpPairTest, AReadOfAnUnknownStagCompletesWithARemoteAccessError) {
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 0, 100, 0, 1, b.mr->key ^ 0x100), 0);
  auto done = wait_for(a.scq, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
}

TEST_F(IwarpPairTest, ASendWithNoReceivePostedEndsTheResponder) {
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  ASSERT_TRUE(run_until([&] {
    return a.qp->state() == IBV_QPS_ERR && b.qp->state() == IBV_QPS_ERR;
  }));
  EXPECT_EQ(b.counters().iwarp_terminates_sent.load(), 1u);
}

TEST_F(IwarpPairTest, ASendLongerThanTheReceiveFailsItWithALengthError) {
  post_recv(b, 0, 50, 3);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  auto recv = wait_for(b.rcq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
}

// The peer's QP goes away (its process died): the stream ends, the QP enters
// Error and what was posted is flushed.
TEST_F(IwarpPairTest, ThePeersCloseEndsTheQpAndFlushesItsReceives) {
  post_recv(a, 0, 64, 1);
  ASSERT_EQ(b.device->destroy_qp(b.qp), 0);
  b.qp = nullptr;
  auto flushed = wait_for(a.rcq, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(a.counters().iwarp_streams_lost.load(), 1u);
}

TEST_F(IwarpPairTest, OnlyRcQpsAreCarried) {
  QpInit init;
  init.send_cq = a.scq;
  init.recv_cq = a.rcq;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  for (ibv_qp_type type : {IBV_QPT_UD, IBV_QPT_UC}) {
    init.type = type;
    int err = 0;
    EXPECT_EQ(a.device->create_qp(a.pd, init, err), nullptr);
    EXPECT_EQ(err, EOPNOTSUPP);
  }
}

// An iWARP QP is born in INIT; only the connection manager moves it into RTS
// (with its stream), as siw refuses a modify to RTS without a socket; RTR is
// allowed and does nothing.
TEST_F(IwarpPairTest, AModifyToRtsWithoutAConnectionIsRefused) {
  Qp* qp = new_rc_qp(a, 4);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->state(), IBV_QPS_INIT);  // born in INIT, as siw's (idle) QPs
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  ASSERT_EQ(qp->modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                 IBV_QP_ACCESS_FLAGS),
            0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = 5;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.is_global = 1;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 1;
  ASSERT_EQ(qp->modify(attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                 IBV_QP_MIN_RNR_TIMER),
            0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  EXPECT_EQ(qp->modify(attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
            EINVAL);
  EXPECT_EQ(qp->state(), IBV_QPS_RTR);
}

// Hostile bytes on a QP's stream: a length that runs past what arrives, then the
// end; and FPDUs that are no DDP segment. Each ends the QP, counted, and nothing
// is written into memory.
class IwarpHostileTest : public IwarpPairTest {
 protected:
  // b's QP on a stream whose other end the test writes into.
  int raw_peer() {
    IwarpNode fresh;
    std::swap(fresh, a);  // a stays unused
    const std::array<int, 2> fds = tcp_pair();
    wire::iwarp::IwarpHandoff hb{fds[1], false, false, RtrKind::kNone, 8, 8};
    b.device->destroy_qp(b.qp);
    b.qp = new_rc_qp(b, 16);
    EXPECT_EQ(b.device->attach_connection(b.qp, hb), 0);
    std::swap(fresh, a);
    return fds[0];
  }
  bool b_ends() {
    for (int i = 0; i < 200000 && b.qp->state() != IBV_QPS_ERR; ++i) b.device->progress();
    return b.qp->state() == IBV_QPS_ERR;
  }
};

// siw's accept race (connection.cc): an initiator whose peer has sent nothing
// repeats a zero-length WRITE after its RTR, and stops once the peer spoke.
TEST_F(IwarpHostileTest, TheInitiatorNudgesASilentPeerUntilItSpeaks) {
  const std::array<int, 2> fds = tcp_pair();
  a.device->destroy_qp(a.qp);
  a.qp = new_rc_qp(a, 16);
  ASSERT_NE(a.qp, nullptr);
  wire::iwarp::IwarpHandoff ha{fds[0], false, true, RtrKind::kWrite, 8, 8};
  ASSERT_EQ(a.device->attach_connection(a.qp, ha), 0);
  // Zero-length WRITEs are 20 bytes each (length, 14-byte tagged header, CRC).
  std::vector<uint8_t> got;
  for (int i = 0; i < 2'000'000 && got.size() < 3 * 20; ++i) {
    a.device->progress();
    uint8_t buffer[256];
    const ssize_t n = ::recv(fds[1], buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) got.insert(got.end(), buffer, buffer + n);
  }
  ASSERT_GE(got.size(), 60u);  // the RTR and two nudges
  EXPECT_GE(a.counters().iwarp_nudges.load(), 2u);
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 14);                // ULPDU_Length: a tagged header alone
  EXPECT_EQ(got[20 + 3] & 0x0f, 0);     // RDMAP opcode: WRITE
  // The peer speaks (its own zero-length WRITE): no nudge follows.
  const uint8_t write[20] = {0, 14, 0xc1, 0x40};
  ASSERT_EQ(::write(fds[1], write, sizeof write), ssize_t(sizeof write));
  for (int i = 0; i < 200000; ++i) a.device->progress();
  while (::recv(fds[1], got.data(), got.size(), MSG_DONTWAIT) > 0) {
  }
  const auto quiet_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  ssize_t more = 0;
  while (std::chrono::steady_clock::now() < quiet_until) {
    a.device->progress();
    uint8_t buffer[64];
    const ssize_t n = ::recv(fds[1], buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) more += n;
  }
  EXPECT_EQ(more, 0);
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  ::close(fds[1]);
}

TEST_F(IwarpHostileTest, AnFpduShorterThanADdpHeaderIsTerminated) {
  const int fd = raw_peer();
  const uint8_t fpdu[8] = {0, 2, 0x41, 0x41, 0, 0, 0, 0};  // ULPDU_Length 2
  ASSERT_EQ(::write(fd, fpdu, sizeof fpdu), ssize_t(sizeof fpdu));
  EXPECT_TRUE(b_ends());
  EXPECT_EQ(b.counters().iwarp_bad_fpdus.load(), 1u);
  ::close(fd);
}

TEST_F(IwarpHostileTest, ALengthThatLiesThenTheEndOfTheStreamEndsTheQp) {
  const int fd = raw_peer();
  std::vector<uint8_t> bytes(1000, 0x5a);
  bytes[0] = 0xff;  // ULPDU_Length 65535; 998 bytes follow, then the end
  bytes[1] = 0xff;
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  ::close(fd);
  EXPECT_TRUE(b_ends());
  EXPECT_EQ(b.counters().iwarp_streams_lost.load(), 1u);
  for (uint8_t byte : b.mem) ASSERT_EQ(byte, 0);
}

TEST_F(IwarpHostileTest, AnUnknownOpcodeIsTerminated) {
  const int fd = raw_peer();
  // ULPDU of 18 bytes: untagged, last, DDP version 1, RDMAP version 1, opcode 0xc.
  uint8_t fpdu[2 + 18 + 0 + 4] = {0, 18, 0x41, 0x4c};
  ASSERT_EQ(::write(fd, fpdu, sizeof fpdu), ssize_t(sizeof fpdu));
  EXPECT_TRUE(b_ends());
  EXPECT_EQ(b.counters().iwarp_terminates_sent.load(), 1u);
  uint8_t back[64];
  ssize_t n = 0;
  for (int i = 0; i < 1000 && n <= 0; ++i) n = ::recv(fd, back, sizeof back, MSG_DONTWAIT);
  ASSERT_GT(n, 20);                 // the Terminate's FPDU
  EXPECT_EQ(back[3] & 0x0f, 7);     // RDMAP opcode: Terminate
  ::close(fd);
}

}  // namespace
}  // namespace softrdma::engine::testing
