// One test body per behaviour of a connected RC pair, run over every path a QP
// may take (issue 26; STYLE.md "From UCX: one test body for every transport"):
// RoCEv2 over the fake network and over UDP, the same-host path, iWARP over fake
// streams and over TCP. A run skips only what its family's wire does not carry
// (FamilyTraits), and every run checks at its end that its traffic took its path.
#include <arpa/inet.h>

#include <cstring>
#include <vector>

#include "engine/path_pair.h"

namespace softrdma::engine::testing {
namespace {

using PathTest = PathPairTest;

INSTANTIATE_TEST_SUITE_P(EveryPath, PathTest,
                         ::testing::Values(Path::kRoceFake, Path::kRoceUdp, Path::kSameHost,
                                           Path::kSharedAddress, Path::kIwarpFake,
                                           Path::kIwarpTcp),
                         path_param_name);

// What RoCE carries and iWARP's RDMAP does not (RFC 5040: no immediate data, no
// atomics): run where it is carried, and refused at the post where it is not.
using RocePathTest = PathPairTest;
INSTANTIATE_TEST_SUITE_P(RocePaths, RocePathTest,
                         ::testing::Values(Path::kRoceFake, Path::kRoceUdp, Path::kSameHost,
                                           Path::kSharedAddress),
                         path_param_name);
using IwarpPathTest = PathPairTest;
INSTANTIATE_TEST_SUITE_P(IwarpPaths, IwarpPathTest,
                         ::testing::Values(Path::kIwarpFake, Path::kIwarpTcp), path_param_name);

// SENDs of the sizes at the edges of a packet (and none, and many packets) land
// whole, in order, in the receives posted for them.
TEST_P(PathTest, SendsOfEverySizeLandInTheirReceives) {
  const std::vector<uint32_t> sizes{0, 1, kMtu - 1, kMtu + 1, 1u << 20};
  constexpr size_t kTo = 2 << 20;  // b's receive buffers start here
  size_t from = 0, to = kTo;
  for (size_t i = 0; i < sizes.size(); ++i) {
    fill(a, from, sizes[i], uint32_t(i + 1));
    post_recv(b, to, sizes[i], 100 + i);
    ASSERT_EQ(post(a, IBV_WR_SEND, from, sizes[i], 0, i), 0);
    from += sizes[i] + 64;
    to += sizes[i] + 64;
  }
  const auto received = wait_for(b.rcq, sizes.size());
  const auto sent = wait_for(a.scq, sizes.size());
  ASSERT_EQ(received.size(), sizes.size());
  ASSERT_EQ(sent.size(), sizes.size());
  from = 0, to = kTo;
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(sizes[i]);
    EXPECT_EQ(received[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(received[i].opcode, IBV_WC_RECV);
    EXPECT_EQ(received[i].wr_id, 100 + i);
    EXPECT_EQ(received[i].byte_len, sizes[i]);
    EXPECT_TRUE(same(a, from, b, to, sizes[i]));
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(sent[i].opcode, IBV_WC_SEND);
    EXPECT_EQ(sent[i].wr_id, i);
    from += sizes[i] + 64;
    to += sizes[i] + 64;
  }
  expect_path_taken();
}

// An RDMA WRITE places a's bytes in b's memory; an RDMA READ after it on the same
// QP brings them back. (An iWARP WRITE completes once handed to the stream, RFC
// 5040 §5.1: the READ that follows it is what shows it was placed, on every path.)
TEST_P(PathTest, WriteThenReadMoveTheBytes) {
  constexpr uint32_t kLen = 64 * 1024 + 3;  // many packets, a ragged end
  fill(a, 0, kLen, 7);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, kLen, 4096, 1), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_READ, 2 << 20, kLen, 4096, 2), 0);
  const auto done = wait_for(a.scq, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(done[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[1].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(done[1].byte_len, kLen);
  EXPECT_TRUE(same(a, 0, b, 4096, kLen));
  EXPECT_TRUE(same(a, 0, a, 2 << 20, kLen));
  expect_path_taken();
}

// IBA 9.4.3: a WRITE with immediate places the bytes and consumes a receive that
// completes with the immediate.
TEST_P(RocePathTest, WriteWithImmediateCompletesAReceive) {
  fill(a, 0, 3000, 9);
  post_recv(b, 0, 0, 55);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 3000, 8192, 1,
                 [](ibv_send_wr& wr) { wr.imm_data = htonl(0x12345678); }),
            0);
  const auto received = wait_for(b.rcq, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(received[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(received[0].wr_id, 55u);
  EXPECT_TRUE(received[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(received[0].imm_data), 0x12345678u);
  EXPECT_EQ(received[0].byte_len, 3000u);
  EXPECT_TRUE(same(a, 0, b, 8192, 3000));
  const auto sent = wait_for(a.scq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  expect_path_taken();
}

// IBA 9.4.5: COMPARE & SWAP and FETCH & ADD return the old value and leave the new.
TEST_P(RocePathTest, AtomicsReturnTheOldValue) {
  constexpr size_t kTarget = 4096;
  const uint64_t start = 0x1111222233334444;
  std::memcpy(&b.mem[kTarget], &start, 8);
  ASSERT_EQ(post(a, IBV_WR_ATOMIC_CMP_AND_SWP, 0, 8, kTarget, 1,
                 [&](ibv_send_wr& wr) {
                   wr.wr.atomic.compare_add = start;
                   wr.wr.atomic.swap = 40;
                 }),
            0);
  ASSERT_EQ(post(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 8, kTarget, 2,
                 [](ibv_send_wr& wr) { wr.wr.atomic.compare_add = 2; }),
            0);
  const auto done = wait_for(a.scq, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[0].opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(done[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[1].opcode, IBV_WC_FETCH_ADD);
  uint64_t old_cas = 0, old_add = 0, now = 0;
  std::memcpy(&old_cas, &a.mem[0], 8);
  std::memcpy(&old_add, &a.mem[8], 8);
  std::memcpy(&now, &b.mem[kTarget], 8);
  EXPECT_EQ(old_cas, start);
  EXPECT_EQ(old_add, 40u);
  EXPECT_EQ(now, 42u);
  expect_path_taken();
}

// IBA 9.7.5.2.3 / RFC 5040 §7.4.1: a READ with an R_Key (STag) the responder does
// not know is refused; the requester completes it with a remote access error and
// its QP enters Error. (A READ, not a WRITE: an iWARP WRITE has completed before
// the Terminate comes back, RFC 5040 §7.1.)
TEST_P(PathTest, AnUnknownRkeyIsARemoteAccessError) {
  const uint32_t bad_rkey = b.mr->key ^ 0x00ffff00;
  ASSERT_EQ(
      post(a, IBV_WR_RDMA_READ, 0, 100, 0, 1, [&](ibv_send_wr& wr) { wr.wr.rdma.rkey = bad_rkey; }),
      0);
  const auto done = wait_for(a.scq, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(a.mem[0], 0);  // nothing was read
  expect_path_taken();
}

// IBA 10.3.1 / 11.4.2.2: a QP moved to Error completes every receive still posted
// with IBV_WC_WR_FLUSH_ERR, in order.
TEST_P(PathTest, ReceivesAreFlushedOnError) {
  // Traffic first, so that the run shows which path it is on.
  post_recv(b, 0, 64, 1);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 9), 0);
  ASSERT_EQ(wait_for(b.rcq, 1).size(), 1u);
  ASSERT_EQ(wait_for(a.scq, 1).size(), 1u);
  for (uint64_t id = 2; id <= 4; ++id) post_recv(b, 4096 * id, 64, id);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(b.qp->modify(attr, IBV_QP_STATE), 0);
  const auto flushed = wait_for(b.rcq, 3);
  ASSERT_EQ(flushed.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(flushed[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(flushed[i].wr_id, i + 2);
  }
  expect_path_taken();
}

// RFC 5040 §4 (iWARP's RDMAP): neither immediate data nor atomics; the family's
// traits refuse them at the post (ibv_post_send(3): EINVAL), and nothing completes.
TEST_P(IwarpPathTest, OperationsRdmapLacksAreRefusedAtThePost) {
  EXPECT_FALSE(traits().atomics);
  EXPECT_EQ(post(a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 8, 8192, 1, [](ibv_send_wr&) {}), EINVAL);
  EXPECT_EQ(post(a, IBV_WR_ATOMIC_CMP_AND_SWP, 0, 8, 4096, 2, [](ibv_send_wr&) {}), EINVAL);
  EXPECT_EQ(post(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, 4096, 3, [](ibv_send_wr&) {}), EINVAL);
  // The QP still works: a WRITE after the refusals completes (over iWARP once
  // handed to the stream, RFC 5040 §5, so its bytes are not looked at here).
  fill(a, 0, 64, 4);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 64, 8192, 4), 0);
  const auto done = wait_for(a.scq, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 4u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace softrdma::engine::testing
