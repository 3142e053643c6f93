// Posting work requests in each QP state: the errno ibv_post_send(3) and
// ibv_post_recv(3) prescribe, flushes in Error, Reset, SQD.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/rc_fixture.h"
#include "transport/fake/fake_network.h"

#include "engine/qp_state_fixture.h"

namespace softrdma::engine::qp_testing {
namespace {

class QpPostTest : public QpStateTest {};

// ---------------------------------------------------------------------------------
// Posting.
// ---------------------------------------------------------------------------------

// Send work may be posted from RTS on: in Reset, Init and RTR it is EINVAL, bad_wr
// names the first WR and nothing is queued or sent (IBA 10.3.1; ibv_post_send(3)).
TEST_F(QpPostTest, PostSendBeforeRtsIsEinval) {
  for (ibv_qp_state s : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR}) {
    SCOPED_TRACE(name_of(s));
    bring_to(qp_, s);
    ibv_send_wr second = send_wr(2);
    ibv_send_wr first = send_wr(1);
    first.next = &second;
    const ibv_send_wr* bad = nullptr;
    EXPECT_EQ(post_send(qp_, first, &bad), EINVAL);
    EXPECT_EQ(bad, &first);
    EXPECT_TRUE(qp_->sq().empty());
  }
  EXPECT_EQ(net_.sent_count(), 0u);
  EXPECT_EQ(scq_->depth(), 0u);
}

// Receive work may be posted from Init on; in Reset it is EINVAL with bad_wr set
// (IBA 10.3.1; ibv_post_recv(3)).
TEST_F(QpPostTest, PostRecvInResetIsEinval) {
  ibv_recv_wr wr = recv_wr(1);
  const ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(post_recv(qp_, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(qp_->rq().empty());
  for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD}) {
    SCOPED_TRACE(name_of(s));
    bring_to(qp_, s);
    EXPECT_EQ(post_recv(qp_, wr), 0);
    EXPECT_EQ(qp_->rq().size(), 1u);
  }
}

// More SGEs than the QP's max_send_sge / max_recv_sge is EINVAL; bad_wr names that
// WR and the WRs before it stay posted (ibv_post_send(3), ibv_post_recv(3)).
TEST_F(QpPostTest, TooManySgesIsEinvalWithBadWr) {
  bring_to(qp_, IBV_QPS_RTS);
  std::vector<ibv_sge> sges(qp_->cap().max_send_sge + 1, ibv_sge{0, 0, 0});
  ibv_send_wr third = send_wr(3);
  ibv_send_wr second = send_wr(2);
  second.sg_list = sges.data();
  second.num_sge = int(sges.size());
  second.next = &third;
  ibv_send_wr first = send_wr(1);
  first.next = &second;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp_, first, &bad), EINVAL);
  EXPECT_EQ(bad, &second);
  EXPECT_EQ(qp_->sq().size(), 1u);

  second.num_sge = -1;
  second.next = nullptr;
  bad = nullptr;
  EXPECT_EQ(post_send(qp_, second, &bad), EINVAL);
  EXPECT_EQ(bad, &second);

  std::vector<ibv_sge> rsges(qp_->cap().max_recv_sge + 1, ibv_sge{0, 0, 0});
  ibv_recv_wr rsecond = recv_wr(2);
  rsecond.sg_list = rsges.data();
  rsecond.num_sge = int(rsges.size());
  ibv_recv_wr rfirst = recv_wr(1);
  rfirst.next = &rsecond;
  const ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(post_recv(qp_, rfirst, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rsecond);
  EXPECT_EQ(qp_->rq().size(), 1u);
}

// A full send queue is ENOMEM with bad_wr at the first WR that did not fit; so is a
// full receive queue (ibv_post_send(3): the failure is returned per WR; verbs
// providers return ENOMEM for a full queue).
TEST_F(QpPostTest, FullQueuesAreEnomem) {
  bring_to(qp_, IBV_QPS_RTS);  // the peer is absent: nothing is ever acknowledged
  const uint32_t depth = qp_->cap().max_send_wr;
  std::vector<ibv_send_wr> wrs(depth + 2);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i] = send_wr(i, 0);
    if (i + 1 < wrs.size()) wrs[i].next = &wrs[i + 1];
  }
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp_, wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth]);
  EXPECT_EQ(qp_->sq().size(), depth);

  const uint32_t rdepth = qp_->cap().max_recv_wr;
  std::vector<ibv_recv_wr> rwrs(rdepth + 1);
  for (size_t i = 0; i < rwrs.size(); ++i) {
    rwrs[i] = recv_wr(i);
    if (i + 1 < rwrs.size()) rwrs[i].next = &rwrs[i + 1];
  }
  const ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(post_recv(qp_, rwrs[0], &rbad), ENOMEM);
  EXPECT_EQ(rbad, &rwrs[rdepth]);
  EXPECT_EQ(qp_->rq().size(), rdepth);
}

// Inline data longer than the QP's max_inline_data is EINVAL; exactly that much is
// accepted without any lkey (ibv_post_send(3): "The L_Key will not be checked");
// INLINE on a READ is EINVAL ("Valid only for Send and RDMA Write").
TEST_F(QpPostTest, InlineLimitIsEnforced) {
  bring_to(qp_, IBV_QPS_RTS);
  const uint32_t max_inline = qp_->cap().max_inline_data;
  ASSERT_GT(max_inline, 1u);
  std::vector<uint8_t> buf(max_inline + 1, 0xab);
  ibv_sge sge{uint64_t(uintptr_t(buf.data())), max_inline + 1, 0};
  ibv_send_wr wr = send_wr(1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);

  // Two SGEs together one byte too long.
  ibv_sge two[2] = {{uint64_t(uintptr_t(buf.data())), max_inline / 2, 0},
                    {uint64_t(uintptr_t(buf.data())), max_inline - max_inline / 2 + 1, 0}};
  wr.sg_list = two;
  wr.num_sge = 2;
  EXPECT_EQ(post_send(qp_, wr), EINVAL);

  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = 0x1000;
  wr.wr.rdma.rkey = 0x1234;
  EXPECT_EQ(post_send(qp_, wr), EINVAL);
  EXPECT_TRUE(qp_->sq().empty());

  sge.length = max_inline;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  EXPECT_EQ(post_send(qp_, wr), 0);
  wr.opcode = IBV_WR_SEND;
  EXPECT_EQ(post_send(qp_, wr), 0);
  EXPECT_EQ(qp_->sq().size(), 2u);

  wr.opcode = IBV_WR_RDMA_READ;
  sge.length = 8;
  bad = nullptr;
  EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

// A message longer than max_msg_size (1 GiB, DeviceLimits) is EINVAL at post time:
// longer ones could take half the PSN space at path MTU 256 (IBA 9.7.1).
TEST_F(QpPostTest, MessageLongerThanMaxMsgSizeIsEinval) {
  bring_to(qp_, IBV_QPS_RTS);
  const uint32_t max = device_->limits().max_msg_size;
  EXPECT_EQ(max, 1u << 30);
  ibv_sge sges[2] = {{0x10000, max / 2, 0x1}, {0x10000, max / 2 + 1, 0x1}};
  for (ibv_wr_opcode opcode : {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ}) {
    ibv_send_wr wr = send_wr(9, IBV_SEND_SIGNALED);
    wr.opcode = opcode;
    wr.sg_list = sges;
    wr.num_sge = 2;
    wr.wr.rdma.remote_addr = 0x20000;
    wr.wr.rdma.rkey = 0x1234;
    const ibv_send_wr* bad = nullptr;
    EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL) << opcode;
    EXPECT_EQ(bad, &wr);
  }
  EXPECT_TRUE(qp_->sq().empty());
}

// An atomic takes exactly one SGE of 8 bytes (IBA 9.4.5: atomics operate on 64-bit
// quantities); any other length or SGE count is EINVAL.
TEST_F(QpPostTest, AtomicNeedsOneEightByteSge) {
  bring_to(qp_, IBV_QPS_RTS);
  int err = 0;
  alignas(8) uint64_t local[2] = {0, 0};
  Mr* mr = device_->reg_mr(pd_, local, sizeof local, uint64_t(uintptr_t(local)),
                           IBV_ACCESS_LOCAL_WRITE, err);
  ASSERT_NE(mr, nullptr);
  for (ibv_wr_opcode opcode : {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ibv_sge sges[2] = {{uint64_t(uintptr_t(local)), 8, mr->key},
                       {uint64_t(uintptr_t(local + 1)), 8, mr->key}};
    ibv_send_wr wr = send_wr(7);
    wr.opcode = opcode;
    wr.sg_list = sges;
    wr.wr.atomic.remote_addr = 0x10000;
    wr.wr.atomic.rkey = 0x1234;
    for (uint32_t length : {0u, 4u, 7u, 9u, 16u}) {
      sges[0].length = length;
      wr.num_sge = 1;
      const ibv_send_wr* bad = nullptr;
      EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL) << "length " << length;
      EXPECT_EQ(bad, &wr);
    }
    sges[0].length = 8;
    wr.num_sge = 0;
    EXPECT_EQ(post_send(qp_, wr), EINVAL) << "no SGE";
    wr.num_sge = 2;
    EXPECT_EQ(post_send(qp_, wr), EINVAL) << "two SGEs";
    const uint32_t queued = qp_->sq().size();
    wr.num_sge = 1;
    EXPECT_EQ(post_send(qp_, wr), 0);
    EXPECT_EQ(qp_->sq().size(), queued + 1);
  }
  EXPECT_EQ(qp_->sq().size(), 2u);
}

// An opcode RC does not serve is refused at post time with bad_wr set: TSO (UD and
// raw packet only, ibv_post_send(3) opcode table), the driver opcode, and the
// 12..14 gap of the enum.
TEST_F(QpPostTest, UnservedOpcodeIsEinval) {
  bring_to(qp_, IBV_QPS_RTS);
  for (int opcode : {int(IBV_WR_TSO), int(IBV_WR_DRIVER1), 12, 13, 14}) {
    ibv_send_wr wr = send_wr(1);
    wr.opcode = static_cast<ibv_wr_opcode>(opcode);
    const ibv_send_wr* bad = nullptr;
    EXPECT_EQ(post_send(qp_, wr, &bad), EINVAL) << opcode;
    EXPECT_EQ(bad, &wr);
  }
  EXPECT_TRUE(qp_->sq().empty());
}

// In Error every WR posted completes at once with IBV_WC_WR_FLUSH_ERR, signaled or
// not, in order, on both queues (IBA 10.3.1 Error state; ibv_poll_cq(3): then only
// wr_id, status, qp_num are valid).
TEST_F(QpPostTest, PostingInErrorFlushesEveryWr) {
  bring_to(qp_, IBV_QPS_RTS);
  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  ibv_send_wr wrs[3] = {send_wr(11, IBV_SEND_SIGNALED), send_wr(12, 0),
                        send_wr(13, IBV_SEND_SIGNALED)};
  wrs[0].next = &wrs[1];
  wrs[1].next = &wrs[2];
  EXPECT_EQ(post_send(qp_, wrs[0]), 0);
  auto wcs = drain(scq_);
  ASSERT_EQ(wcs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 11 + i);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wcs[i].qp_num, qp_->qpn());
  }
  ibv_recv_wr rwrs[2] = {recv_wr(21), recv_wr(22)};
  rwrs[0].next = &rwrs[1];
  EXPECT_EQ(post_recv(qp_, rwrs[0]), 0);
  auto rwcs = drain(rcq_);
  ASSERT_EQ(rwcs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rwcs[i].wr_id, 21 + i);
    EXPECT_EQ(rwcs[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(rwcs[i].qp_num, qp_->qpn());
  }
  EXPECT_TRUE(qp_->sq().empty());
  EXPECT_TRUE(qp_->rq().empty());
  EXPECT_EQ(drain(scq_).size(), 0u);
}

// Moving to Error flushes every outstanding WQE, receive and send, signaled or not,
// in posting order (IBA 10.3.1; 10.8.3).
TEST_F(QpPostTest, MovingToErrorFlushesOutstandingWork) {
  bring_to(qp_, IBV_QPS_INIT);
  ibv_recv_wr rwrs[3] = {recv_wr(1), recv_wr(2), recv_wr(3)};
  rwrs[0].next = &rwrs[1];
  rwrs[1].next = &rwrs[2];
  ASSERT_EQ(post_recv(qp_, rwrs[0]), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTR, kRtrRequired), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, kRtsRequired), 0);
  ibv_send_wr wrs[2] = {send_wr(101, 0), send_wr(102, IBV_SEND_SIGNALED)};
  wrs[0].next = &wrs[1];
  ASSERT_EQ(post_send(qp_, wrs[0]), 0);  // sent, never acknowledged
  EXPECT_EQ(drain(rcq_).size(), 0u);

  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  auto rwcs = drain(rcq_);
  ASSERT_EQ(rwcs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rwcs[i].wr_id, 1 + i);
    EXPECT_EQ(rwcs[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  auto swcs = drain(scq_);
  ASSERT_EQ(swcs.size(), 2u);
  EXPECT_EQ(swcs[0].wr_id, 101u);
  EXPECT_EQ(swcs[1].wr_id, 102u);
  EXPECT_EQ(swcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(swcs[1].status, IBV_WC_WR_FLUSH_ERR);

  // Error -> Error again flushes nothing twice.
  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  EXPECT_EQ(drain(rcq_).size() + drain(scq_).size(), 0u);
}

// Reset empties both work queues without any completion; the QP can then be brought
// up again and its queues hold their full depth (IBA 10.3.1 Reset state).
TEST_F(QpPostTest, ResetClearsQueuesWithoutCompletions) {
  bring_to(qp_, IBV_QPS_INIT);
  ibv_recv_wr r1 = recv_wr(1);
  ASSERT_EQ(post_recv(qp_, r1), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTR, kRtrRequired), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, kRtsRequired), 0);
  ibv_send_wr s1 = send_wr(2);
  ASSERT_EQ(post_send(qp_, s1), 0);
  ASSERT_FALSE(qp_->sq().empty());

  ASSERT_EQ(modify(qp_, IBV_QPS_RESET, 0), 0);
  EXPECT_TRUE(qp_->sq().empty());
  EXPECT_TRUE(qp_->rq().empty());
  EXPECT_EQ(scq_->depth(), 0u);
  EXPECT_EQ(rcq_->depth(), 0u);

  bring_to(qp_, IBV_QPS_RTS);
  for (uint32_t i = 0; i < qp_->cap().max_send_wr; ++i) {
    ibv_send_wr wr = send_wr(100 + i, 0);
    ASSERT_EQ(post_send(qp_, wr), 0) << i;
  }
  for (uint32_t i = 0; i < qp_->cap().max_recv_wr; ++i) {
    ibv_recv_wr wr = recv_wr(200 + i);
    ASSERT_EQ(post_recv(qp_, wr), 0) << i;
  }

  // After Error flushed them, Reset adds no completion of its own.
  ASSERT_EQ(modify(qp_, IBV_QPS_ERR, 0), 0);
  drain(scq_);
  drain(rcq_);
  ASSERT_EQ(modify(qp_, IBV_QPS_RESET, 0), 0);
  EXPECT_EQ(scq_->depth() + rcq_->depth(), 0u);
}

// RTS -> SQD with en_sqd_async_notify raises IBV_EVENT_SQ_DRAINED for this QP once
// nothing is outstanding; without it, no event (IBA 10.3.1 SQD, 11.6.3 affiliated
// asynchronous events; ibv_get_async_event(3)).
TEST_F(QpPostTest, SqdWithNotifyRaisesSqDrained) {
  bring_to(qp_, IBV_QPS_RTS);
  ibv_qp_attr attr = full_attr(IBV_QPS_SQD, IBV_QPS_RTS);
  attr.en_sqd_async_notify = 1;
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kSqdNotify), 0);
  EXPECT_EQ(qp_->state(), IBV_QPS_SQD);
  AsyncEvent event{};
  ASSERT_TRUE(device_->next_async_event(event));
  EXPECT_EQ(event.type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(event.qpn, qp_->qpn());
  EXPECT_FALSE(device_->next_async_event(event)) << "reported once";

  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, 0), 0);
  ASSERT_EQ(modify(qp_, IBV_QPS_SQD, 0), 0);  // no notification asked for
  EXPECT_FALSE(device_->next_async_event(event));
}

// In SQD new send WRs may be posted but are not started until the QP is back in RTS
// (IBA 10.3.1 SQD: the send queue stops processing new WQEs).
TEST_F(QpPostTest, SqdQueuesPostedSendsUntilRts) {
  bring_to(qp_, IBV_QPS_SQD);
  net_.take_sent();
  ibv_send_wr wr = send_wr(1);
  EXPECT_EQ(post_send(qp_, wr), 0);
  EXPECT_EQ(net_.sent_count(), 0u);
  EXPECT_EQ(qp_->sq().size(), 1u);
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, 0), 0);
  EXPECT_EQ(net_.sent_count(), 1u);
}

// A new primary path given in SQD (SQD->SQD with IBV_QP_AV, IBA 10.3.1: SQD is where
// path attributes may be changed) is the one the QP sends on after returning to RTS.
TEST_F(QpPostTest, PathChangedInSqdIsUsed) {
  bring_to(qp_, IBV_QPS_SQD);
  const transport::Gid moved = fake::ipv4_gid(10, 0, 0, 3);
  ibv_qp_attr attr = full_attr(IBV_QPS_SQD, IBV_QPS_SQD);
  attr.ah_attr = valid_av(moved);
  ASSERT_EQ(qp_->modify(attr, IBV_QP_STATE | kAv), 0);
  ibv_qp_attr got = query(qp_);
  EXPECT_EQ(0, std::memcmp(got.ah_attr.grh.dgid.raw, moved.data(), 16));
  ASSERT_EQ(modify(qp_, IBV_QPS_RTS, 0), 0);
  net_.take_sent();
  ibv_send_wr wr = send_wr(1);
  ASSERT_EQ(post_send(qp_, wr), 0);
  auto sent = net_.take_sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].dst, moved) << "still sent on the old path";
}

// With a message sent and not yet acknowledged, SQ_DRAINED comes only when its ACK
// arrives, not at the modify (IBA 10.3.1: the SQ drains in-progress messages first).
class QpSqdDrainTest : public testing::RcPairTest {};

TEST_F(QpSqdDrainTest, SqDrainedWaitsForOutstandingAck) {
  post_recv(b, 0, 64, 1);
  net_.hold(fake::match::from(b.device->gids()[1]));  // hold b's ACK
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 64, 0, 7), 0);
  pump();
  ASSERT_EQ(net_.held_count(), 1u);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_SQD;
  attr.en_sqd_async_notify = 1;
  ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  AsyncEvent event{};
  EXPECT_FALSE(a.device->next_async_event(event)) << "the SEND is not acknowledged yet";

  net_.clear_rules();
  net_.release_held();
  pump();
  ASSERT_TRUE(a.device->next_async_event(event));
  EXPECT_EQ(event.type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(event.qpn, a.qp->qpn());
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace softrdma::engine::qp_testing
