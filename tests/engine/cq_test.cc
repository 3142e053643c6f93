// Completion queues (IBA 11.4.2; ibv_create_cq(3), ibv_poll_cq(3), ibv_resize_cq(3),
// ibv_req_notify_cq(3)): FIFO order, capacity and overrun, resize, notification arming.
#include "engine/cq.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;

ibv_wc wc(uint64_t wr_id, ibv_wc_status status = IBV_WC_SUCCESS,
          ibv_wc_opcode opcode = IBV_WC_RECV) {
  ibv_wc w{};
  w.wr_id = wr_id;
  w.status = status;
  w.opcode = opcode;
  return w;
}

std::vector<uint64_t> poll_ids(Cq& cq, int max) {
  std::vector<ibv_wc> out(size_t(max > 0 ? max : 1));
  const int n = cq.poll(max, out.data());
  std::vector<uint64_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(out[size_t(i)].wr_id);
  return ids;
}

// Completions come out in the order they were added, across several polls and
// across the ring's wrap-around (IBA 11.4.2.1: a CQ is a FIFO).
TEST(CqTest, PollReturnsCompletionsInOrder) {
  Cq cq(4);
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(cq.push(wc(next_in++)));
    for (uint64_t id : poll_ids(cq, 2)) EXPECT_EQ(id, next_out++);
    for (uint64_t id : poll_ids(cq, 8)) EXPECT_EQ(id, next_out++);
  }
  EXPECT_EQ(next_out, next_in);
}

// A QP returned to Reset takes its unpolled completions with it; the other QPs'
// stay, in order, across the ring's wrap-around.
TEST(CqTest, RemoveQpKeepsTheOthersInOrder) {
  Cq cq(5);
  ASSERT_TRUE(cq.push(wc(0)));
  ASSERT_TRUE(cq.push(wc(1)));
  ASSERT_EQ(poll_ids(cq, 2).size(), 2u);  // the ring now starts at slot 2
  for (uint64_t id = 10; id < 15; ++id) {
    ibv_wc w = wc(id);
    w.qp_num = id % 2 == 0 ? 7 : 9;
    ASSERT_TRUE(cq.push(w));
  }
  cq.remove_qp(7);
  EXPECT_EQ(cq.depth(), 2u);
  EXPECT_EQ(poll_ids(cq, 8), (std::vector<uint64_t>{11, 13}));
  ASSERT_TRUE(cq.push(wc(20)));
  EXPECT_EQ(poll_ids(cq, 8), (std::vector<uint64_t>{20}));
}

// Polling an empty CQ, or asking for zero (or fewer) entries, returns 0 and leaves the CQ as it
// was (ibv_poll_cq(3): a non-negative count).
TEST(CqTest, PollEmptyOrZeroReturnsZero) {
  Cq cq(2);
  EXPECT_TRUE(poll_ids(cq, 4).empty());
  ASSERT_TRUE(cq.push(wc(1)));
  EXPECT_TRUE(poll_ids(cq, 0).empty());
  EXPECT_EQ(cq.depth(), 1u);
  ibv_wc out{};
  EXPECT_EQ(cq.poll(-1, &out), 0);  // a negative count takes nothing
  EXPECT_EQ(cq.depth(), 1u);
  EXPECT_EQ(cq.poll(1, &out), 1);
  EXPECT_EQ(out.wr_id, 1u);
  EXPECT_EQ(cq.depth(), 0u);
}

// The whole completion is returned as pushed (status, opcode, byte_len, imm, qp_num).
TEST(CqTest, CompletionFieldsArePreserved) {
  Cq cq(1);
  ibv_wc in = wc(99, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE);
  in.byte_len = 1234;
  in.imm_data = 0x01020304;
  in.qp_num = 0x123456;
  in.wc_flags = IBV_WC_WITH_IMM;
  ASSERT_TRUE(cq.push(in));
  ibv_wc out{};
  ASSERT_EQ(cq.poll(1, &out), 1);
  EXPECT_EQ(out.wr_id, 99u);
  EXPECT_EQ(out.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(out.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(out.byte_len, 1234u);
  EXPECT_EQ(out.imm_data, 0x01020304u);
  EXPECT_EQ(out.qp_num, 0x123456u);
  EXPECT_EQ(out.wc_flags, unsigned(IBV_WC_WITH_IMM));
}

// A CQ holds exactly its capacity; one more is an overrun: the push fails, the CQ is
// in error, and the completions already there are kept (IBA 11.4.2.1 CQ overrun;
// ibv_poll_cq(3) NOTES).
TEST(CqTest, OverrunFailsThePushAndPutsTheCqInError) {
  Cq cq(3);
  EXPECT_EQ(cq.capacity(), 3u);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(cq.push(wc(i)));
  EXPECT_FALSE(cq.in_error());
  EXPECT_EQ(cq.depth(), 3u);
  EXPECT_FALSE(cq.push(wc(3)));
  EXPECT_TRUE(cq.in_error());
  EXPECT_EQ(cq.depth(), 3u);
  EXPECT_EQ(poll_ids(cq, 8), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(cq.in_error()) << "the error stays after polling";
}

// Growing keeps every completion in order (also when the ring had wrapped); shrinking
// to fewer than the unpolled entries is EINVAL; to exactly that many is fine
// (ibv_resize_cq(3)).
TEST(CqTest, ResizeKeepsEntriesInOrder) {
  Cq cq(4);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(cq.push(wc(i)));
  EXPECT_EQ(poll_ids(cq, 2), (std::vector<uint64_t>{0, 1}));
  ASSERT_TRUE(cq.push(wc(4)));
  ASSERT_TRUE(cq.push(wc(5)));  // wrapped: 2 3 4 5, head in the middle
  ASSERT_EQ(cq.resize(8), 0);
  EXPECT_EQ(cq.capacity(), 8u);
  for (uint64_t i = 6; i < 10; ++i) ASSERT_TRUE(cq.push(wc(i)));
  EXPECT_FALSE(cq.push(wc(10))) << "8 entries now";
  EXPECT_EQ(poll_ids(cq, 3), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(cq.depth(), 5u);
  EXPECT_EQ(cq.resize(4), EINVAL) << "5 unpolled entries";
  EXPECT_EQ(cq.capacity(), 8u);
  ASSERT_EQ(cq.resize(5), 0);
  EXPECT_EQ(poll_ids(cq, 8), (std::vector<uint64_t>{5, 6, 7, 8, 9}));
}

// A CQ of zero entries does not exist: resize to 0 is EINVAL (ibv_resize_cq(3): cqe
// is a size "at least" as big as asked; the kernel drivers refuse cqe <= 0).
TEST(CqTest, ResizeToZeroIsEinval) {
  Cq cq(4);
  EXPECT_EQ(cq.resize(0), EINVAL);
  EXPECT_EQ(cq.capacity(), 4u);
  EXPECT_TRUE(cq.push(wc(1)));
}

// create_cq gives at least the entries asked for; zero, negative and more than
// max_cqe are EINVAL (ibv_create_cq(3); ibv_query_device max_cqe).
TEST(CqTest, CreateCqValidatesSize) {
  fake::FakeNetwork net;
  auto transport = net.attach(fake::ipv4_gid(10, 0, 0, 1));
  Device device(DeviceConfig{}, *transport, roce::RoceFamily::maker());
  int err = 0;
  for (int cqe : {0, -1, int(device.limits().max_cqe + 1)}) {
    err = 0;
    EXPECT_EQ(device.create_cq(cqe, err), nullptr) << cqe;
    EXPECT_EQ(err, EINVAL) << cqe;
  }
  for (int cqe : {1, 100, int(device.limits().max_cqe)}) {
    Cq* cq = device.create_cq(cqe, err);
    ASSERT_NE(cq, nullptr) << cqe;
    EXPECT_GE(cq->capacity(), uint32_t(cqe));
    EXPECT_EQ(device.destroy_cq(cq), 0);
  }
}

// A CQ overrun raises IBV_EVENT_CQ_ERR for that CQ (ibv_poll_cq(3) NOTES: "In case of a
// CQ overrun, the async event IBV_EVENT_CQ_ERR will be triggered"; IBA 11.6.3) and is
// counted; the event is raised once, not per lost completion.
TEST(CqTest, OverrunRaisesCqErrEvent) {
  fake::FakeNetwork net;
  auto transport = net.attach(fake::ipv4_gid(10, 0, 0, 1));
  Device device(DeviceConfig{}, *transport, roce::RoceFamily::maker());
  int err = 0;
  Pd* pd = device.alloc_pd(err);
  Cq* small = device.create_cq(1, err);
  Cq* big = device.create_cq(16, err);
  ASSERT_NE(small, nullptr);
  QpInit init;
  init.send_cq = small;
  init.recv_cq = big;
  init.cap = ibv_qp_cap{8, 8, 1, 1, 0};
  Qp* qp = device.create_qp(pd, init, err);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(qp->modify(attr, IBV_QP_STATE), 0);

  // Three sends posted in Error: three flush completions for a one-entry CQ.
  ibv_send_wr wrs[3]{};
  for (int i = 0; i < 3; ++i) {
    wrs[i].wr_id = uint64_t(i);
    wrs[i].opcode = IBV_WR_SEND;
    if (i < 2) wrs[i].next = &wrs[i + 1];
  }
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(qp->post_send(&wrs[0], &bad), 0);
  EXPECT_TRUE(small->in_error());
  EXPECT_EQ(device.counters().cq_overruns.load(), 2u);

  int cq_errors = 0;
  AsyncEvent event{};
  while (device.next_async_event(event)) {
    if (event.type == IBV_EVENT_CQ_ERR) {
      ++cq_errors;
      EXPECT_EQ(event.cq, small);
    }
  }
  EXPECT_EQ(cq_errors, 1);
}

// ---------------------------------------------------------------------------------
// Extended CQs (ibv_create_cq_ex(3)): timestamps, ignoring overruns.
// ---------------------------------------------------------------------------------

// pop() takes completions in order with the timestamp each was pushed with, and
// says when the CQ is empty.
TEST(CqTest, PopReturnsCompletionsWithTheirTimestamps) {
  Cq cq(4, CqOptions{.timestamps = true});
  ASSERT_TRUE(cq.push(wc(1), false, 100));
  ASSERT_TRUE(cq.push(wc(2), false, 250));
  Completion c{};
  ASSERT_TRUE(cq.pop(c));
  EXPECT_EQ(c.wc.wr_id, 1u);
  EXPECT_EQ(c.timestamp, 100);
  ASSERT_TRUE(cq.push(wc(3), false, 300));
  ibv_wc out{};
  ASSERT_EQ(cq.poll(1, &out), 1) << "poll and pop take from one queue";
  EXPECT_EQ(out.wr_id, 2u);
  ASSERT_TRUE(cq.pop(c));
  EXPECT_EQ(c.wc.wr_id, 3u);
  EXPECT_EQ(c.timestamp, 300);
  EXPECT_FALSE(cq.pop(c));
}

// IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: "will not pass to error state if overrun, CQE
// always will be written to next entry" (ibv_create_cq_ex(3)): a full CQ keeps the
// newest completions, in order, and is never in error.
TEST(CqTest, IgnoringOverrunKeepsTheNewestCompletions) {
  Cq cq(3, CqOptions{.ignore_overrun = true});
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(cq.push(wc(i)), Cq::kQueued);
  EXPECT_EQ(cq.push(wc(3)), Cq::kDisplacedOldest);
  EXPECT_EQ(cq.push(wc(4)), Cq::kDisplacedOldest);
  EXPECT_FALSE(cq.in_error());
  EXPECT_EQ(cq.depth(), 3u);
  EXPECT_EQ(poll_ids(cq, 8), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(cq.push(wc(5)), Cq::kQueued);
}

// Posts `n` sends to a QP in Error: each completes at once with a flush error
// (IBA 10.3.1), outside a turn, so it is visible at once.
void flush_sends(Qp& qp, int n) {
  std::vector<ibv_send_wr> wrs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    wrs[size_t(i)].wr_id = uint64_t(i);
    wrs[size_t(i)].opcode = IBV_WR_SEND;
    if (i + 1 < n) wrs[size_t(i)].next = &wrs[size_t(i) + 1];
  }
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(qp.post_send(wrs.data(), &bad), 0);
}

class CqDeviceTest : public ::testing::Test {
 protected:
  // A QP in Error whose send CQ is made with `options`.
  Cq* make_qp_in_error(const CqOptions& options, int cqe) {
    int err = 0;
    Pd* pd = device_.alloc_pd(err);
    Cq* cq = device_.create_cq(cqe, options, err);
    Cq* recv = device_.create_cq(4, err);
    if (pd == nullptr || cq == nullptr || recv == nullptr) return nullptr;
    QpInit init;
    init.send_cq = cq;
    init.recv_cq = recv;
    init.cap = ibv_qp_cap{16, 4, 1, 1, 0};
    qp_ = device_.create_qp(pd, init, err);
    if (qp_ == nullptr) return nullptr;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    if (qp_->modify(attr, IBV_QP_STATE) != 0) return nullptr;
    return cq;
  }

  fake::FakeNetwork net_;
  std::unique_ptr<transport::Transport> transport_ = net_.attach(fake::ipv4_gid(10, 0, 0, 1));
  ManualClock clock_;
  Device device_{DeviceConfig{}, *transport_, roce::RoceFamily::maker(), clock_};
  Qp* qp_ = nullptr;
};

// A CQ that keeps timestamps gets the device clock's time at which each completion
// was generated (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP).
TEST_F(CqDeviceTest, CompletionsAreStampedWithTheDeviceClock) {
  Cq* cq = make_qp_in_error(CqOptions{.timestamps = true}, 16);
  ASSERT_NE(cq, nullptr);
  clock_.set(5'000);
  flush_sends(*qp_, 2);
  clock_.set(7'500);
  flush_sends(*qp_, 1);
  std::vector<Nanos> stamps;
  for (Completion c{}; cq->pop(c);) stamps.push_back(c.timestamp);
  EXPECT_EQ(stamps, (std::vector<Nanos>{5'000, 5'000, 7'500}));
}

// A CQ that does not ask for timestamps gets none (the clock is not read for it).
TEST_F(CqDeviceTest, CompletionsAreNotStampedUnlessAsked) {
  Cq* cq = make_qp_in_error(CqOptions{}, 16);
  ASSERT_NE(cq, nullptr);
  clock_.set(5'000);
  flush_sends(*qp_, 1);
  Completion c{};
  ASSERT_TRUE(cq->pop(c));
  EXPECT_EQ(c.timestamp, 0);
}

// A CQ that ignores overruns raises no IBV_EVENT_CQ_ERR and stays usable; the lost
// completions are still counted.
TEST_F(CqDeviceTest, IgnoredOverrunRaisesNoEventButIsCounted) {
  Cq* cq = make_qp_in_error(CqOptions{.ignore_overrun = true}, 2);
  ASSERT_NE(cq, nullptr);
  flush_sends(*qp_, 5);
  EXPECT_FALSE(cq->in_error());
  EXPECT_EQ(device_.counters().cq_overruns.load(), 3u);
  AsyncEvent event{};
  while (device_.next_async_event(event)) EXPECT_NE(event.type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(poll_ids(*cq, 8), (std::vector<uint64_t>{3, 4}));
}

// ---------------------------------------------------------------------------------
// Notification (ibv_req_notify_cq(3), IBA 11.4.2.2).
// ---------------------------------------------------------------------------------

class CqNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cq_.set_notify([this] { ++fired_; });
  }
  Cq cq_{64};
  int fired_ = 0;
};

// Without a request, no notification (ibv_req_notify_cq(3)).
TEST_F(CqNotifyTest, NotArmedNeverFires) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(cq_.push(wc(uint64_t(i)), true));
  EXPECT_EQ(fired_, 0);
}

// An extended CQ's batch that polls the completion it was armed for leaves no
// event behind, and the request stays for the next completion; one still there
// when the batch ends fires then (ibv_rc_pingpong -e -t, cq_ex.cc).
TEST_F(CqNotifyTest, ABatchThatPolledTheCompletionLeavesNoEvent) {
  cq_.arm(false);
  cq_.begin_batch();
  ASSERT_TRUE(cq_.push(wc(1)));
  EXPECT_EQ(fired_, 0) << "not while the batch is open";
  Completion taken;
  ASSERT_TRUE(cq_.pop(taken));
  cq_.end_batch();
  EXPECT_EQ(fired_, 0) << "the batch polled what it announced";
  ASSERT_TRUE(cq_.push(wc(2)));
  EXPECT_EQ(fired_, 1) << "still armed for the next one";
  cq_.arm(false);
  cq_.begin_batch();
  ASSERT_TRUE(cq_.push(wc(3)));
  ASSERT_TRUE(cq_.push(wc(4)));
  ASSERT_TRUE(cq_.pop(taken));
  cq_.end_batch();
  EXPECT_EQ(fired_, 2) << "what the batch left unpolled is announced at its end";
}

// "Next completion": the next completion of any kind fires once; the request is
// one-shot, so later completions fire only after a new request (ibv_req_notify_cq(3)
// NOTES).
TEST_F(CqNotifyTest, NextFiresOncePerArm) {
  cq_.arm(false);
  ASSERT_TRUE(cq_.push(wc(1, IBV_WC_SUCCESS, IBV_WC_SEND)));
  EXPECT_EQ(fired_, 1);
  ASSERT_TRUE(cq_.push(wc(2)));
  ASSERT_TRUE(cq_.push(wc(3), true));
  EXPECT_EQ(fired_, 1) << "one shot";
  ibv_wc out[4];
  ASSERT_EQ(cq_.poll(4, out), 3);
  cq_.arm(false);
  EXPECT_EQ(fired_, 1) << "an empty CQ waits for the next completion";
  ASSERT_TRUE(cq_.push(wc(4)));
  EXPECT_EQ(fired_, 2);
}

// A request for the next completion made while completions wait unpolled fires at
// once (as mlx4/mlx5 do), once: a program that polled one CQ (which ran the engine
// and filled another), then arms both and sleeps, is woken (UCX's ud_verbs).
TEST_F(CqNotifyTest, NextFiresAtOnceWhenCompletionsWait) {
  ASSERT_TRUE(cq_.push(wc(1)));
  cq_.arm(false);
  EXPECT_EQ(fired_, 1);
  ASSERT_TRUE(cq_.push(wc(2)));
  EXPECT_EQ(fired_, 1) << "one shot";
  ibv_wc out[4];
  ASSERT_EQ(cq_.poll(4, out), 2);
  cq_.arm(false);
  EXPECT_EQ(fired_, 1) << "nothing waits: armed";
  ASSERT_TRUE(cq_.push(wc(3)));
  EXPECT_EQ(fired_, 2);
}

// A completion an event announced does not fire again when the program re-arms
// before polling it (ibv_rc_pingpong -e -t: an event with nothing to poll is its
// error); one that came unannounced after the event does.
TEST_F(CqNotifyTest, AnAnnouncedCompletionDoesNotFireAgain) {
  cq_.arm(false);
  ASSERT_TRUE(cq_.push(wc(1)));
  EXPECT_EQ(fired_, 1);
  cq_.arm(false);
  EXPECT_EQ(fired_, 1) << "completion 1 was announced";
  ibv_wc out[4];
  ASSERT_EQ(cq_.poll(4, out), 1);
  ASSERT_TRUE(cq_.push(wc(2)));
  EXPECT_EQ(fired_, 2) << "armed: the next completion fires";
  ASSERT_TRUE(cq_.push(wc(3)));  // unarmed, after the event: a woken program polls next
  cq_.arm(false);
  EXPECT_EQ(fired_, 2) << "woken by an event, the program re-arms and then polls";
  ASSERT_EQ(cq_.poll(4, out), 2);
  ASSERT_TRUE(cq_.push(wc(4)));  // armed: fires
  EXPECT_EQ(fired_, 3);
  ASSERT_EQ(cq_.poll(4, out), 1);
  cq_.arm(true);                 // solicited only: nothing
  ASSERT_TRUE(cq_.push(wc(5)));  // not solicited: no event, unannounced
  cq_.arm(false);
  EXPECT_EQ(fired_, 4) << "after a poll, a completion no event announced fires the request";
}

// A solicited-only request still waits for a new solicited or unsuccessful
// completion, whatever waits unpolled.
TEST_F(CqNotifyTest, SolicitedOnlyWaitsForANewCompletion) {
  ASSERT_TRUE(cq_.push(wc(1), true));
  cq_.arm(true);
  EXPECT_EQ(fired_, 0);
  ASSERT_TRUE(cq_.push(wc(2), true));
  EXPECT_EQ(fired_, 1);
}

// "Solicited only": successful unsolicited completions do not fire; a receive with
// the Solicited Event bit does, and so does any unsuccessful completion
// (ibv_req_notify_cq(3); IBA 11.4.2.2).
TEST_F(CqNotifyTest, SolicitedOnlyFiresForSolicitedOrError) {
  cq_.arm(true);
  ASSERT_TRUE(cq_.push(wc(1)));                                   // unsolicited recv
  ASSERT_TRUE(cq_.push(wc(2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE)));  // send side
  EXPECT_EQ(fired_, 0);
  ASSERT_TRUE(cq_.push(wc(3), true));
  EXPECT_EQ(fired_, 1);
  ASSERT_TRUE(cq_.push(wc(4), true));
  EXPECT_EQ(fired_, 1) << "one shot";

  cq_.arm(true);
  ASSERT_TRUE(cq_.push(wc(5)));
  EXPECT_EQ(fired_, 1);
  ASSERT_TRUE(cq_.push(wc(6, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND)));
  EXPECT_EQ(fired_, 2) << "an error completion is solicited";
}

// A request for "next" is not narrowed by a later request for "solicited only"
// (IBA 11.4.2.2 C11-31/C11-32; rxe/rdmavt keep IB_CQ_NEXT_COMP); the other way round
// widens it.
TEST_F(CqNotifyTest, SolicitedRequestDoesNotNarrowNext) {
  cq_.arm(false);
  cq_.arm(true);
  ASSERT_TRUE(cq_.push(wc(1)));
  EXPECT_EQ(fired_, 1) << "still armed for the next completion";

  cq_.arm(true);
  cq_.arm(false);
  ASSERT_TRUE(cq_.push(wc(2)));
  EXPECT_EQ(fired_, 2);
}

// The notification runs outside the CQ's lock, so the handler may poll the CQ (as a
// completion-channel consumer does) without deadlock.
TEST_F(CqNotifyTest, HandlerMayPollTheCq) {
  std::vector<uint64_t> seen;
  cq_.set_notify([&] {
    ++fired_;
    ibv_wc out[4];
    const int n = cq_.poll(4, out);
    for (int i = 0; i < n; ++i) seen.push_back(out[i].wr_id);
  });
  cq_.arm(false);
  ASSERT_TRUE(cq_.push(wc(42)));
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(seen, (std::vector<uint64_t>{42}));
}

// An overrun completion is lost and fires nothing (the CQ error is reported as an
// async event instead, IBA 11.4.2.1).
TEST_F(CqNotifyTest, LostCompletionDoesNotFire) {
  Cq tiny(1);
  int fired = 0;
  tiny.set_notify([&] { ++fired; });
  ASSERT_TRUE(tiny.push(wc(1)));
  tiny.arm(true);  // solicited only: the waiting completion does not fire it
  EXPECT_FALSE(tiny.push(wc(2), true));
  EXPECT_EQ(fired, 0);
}

}  // namespace
}  // namespace softrdma::engine
