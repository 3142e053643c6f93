// The extended CQ (ibv_create_cq_ex(3)): every ibv_wc_read_* accessor on real
// traffic, completion timestamps against the device clock
// (ibv_query_rt_values_ex(3)), ibv_start_poll / ibv_next_poll / ibv_end_poll mixed
// with ibv_poll_cq, the creation flags, and the CQ used as an ordinary one.
// Errors are in cq_ex_errors_test.cc.
#include <arpa/inet.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "verbs/cq_ex_helpers.h"
#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

constexpr uint64_t kAllWcFlags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

PairOptions extended(uint64_t wc_flags = kAllWcFlags) {
  PairOptions options;
  options.extended_cq = true;
  options.cq_wc_flags = wc_flags;
  return options;
}

ibv_sge sge_of(Side& side, size_t offset, uint32_t length) {
  return ibv_sge{side.addr(offset), length, side.mr->lkey};
}

int post_with_imm(ibv_qp* qp, ibv_wr_opcode opcode, ibv_sge sge, uint64_t wr_id, __be32 imm,
                  uint64_t remote_addr = 0, uint32_t rkey = 0) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = imm;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// A SEND: the sender's completion says IBV_WC_SEND, the receiver's IBV_WC_RECV with
// the length and the QP it arrived on; RoCE has no LIDs or SLs (IBA A17), so slid,
// sl and dlid_path_bits are 0, and a successful completion has no vendor error.
TEST(CqEx, EveryAccessorOnSendAndRecv) {
  Pair pair(extended());
  ASSERT_NE(pair.b.cqx, nullptr);
  ASSERT_EQ(post_recv(pair.b.qp, sge_of(pair.b, 0, 4096), 11), 0);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, sge_of(pair.a, 0, 1500), 22), 0);

  const std::vector<ExWc> sent = take_ex(pair.a.cqx, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 22u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sent[0].vendor_err, 0u);
  EXPECT_EQ(sent[0].qp_num, pair.a.qp->qp_num);
  EXPECT_EQ(sent[0].wc_flags, 0u);

  const std::vector<ExWc> got = take_ex(pair.b.cqx, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 11u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(got[0].vendor_err, 0u);
  EXPECT_EQ(got[0].byte_len, 1500u);
  EXPECT_EQ(got[0].qp_num, pair.b.qp->qp_num);
  EXPECT_EQ(got[0].src_qp, pair.a.qp->qp_num);
  EXPECT_EQ(got[0].wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(got[0].slid, 0u);
  EXPECT_EQ(got[0].sl, 0u);
  EXPECT_EQ(got[0].dlid_path_bits, 0u);
}

// SEND with immediate: the receiver reads the immediate (network order, as
// ibv_wc::imm_data) and IBV_WC_WITH_IMM.
TEST(CqEx, ImmediateOfASend) {
  Pair pair(extended());
  ASSERT_NE(pair.b.cqx, nullptr);
  ASSERT_EQ(post_recv(pair.b.qp, sge_of(pair.b, 0, 64), 1), 0);
  ASSERT_EQ(post_with_imm(pair.a.qp, IBV_WR_SEND_WITH_IMM, sge_of(pair.a, 0, 8), 2,
                          htonl(0x12345678)),
            0);
  ASSERT_EQ(take_ex(pair.a.cqx, 1).size(), 1u);
  const std::vector<ExWc> got = take_ex(pair.b.cqx, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(got[0].byte_len, 8u);
  EXPECT_EQ(got[0].imm_data, htonl(0x12345678));
  EXPECT_NE(got[0].wc_flags & IBV_WC_WITH_IMM, 0u);
}

// RDMA WRITE with immediate: the writer sees IBV_WC_RDMA_WRITE, the target
// IBV_WC_RECV_RDMA_WITH_IMM with the immediate and the length written.
TEST(CqEx, WriteWithImmediate) {
  Pair pair(extended());
  ASSERT_NE(pair.b.cqx, nullptr);
  ASSERT_EQ(post_recv(pair.b.qp, sge_of(pair.b, 0, 0), 5), 0);
  std::memset(pair.a.buf.data(), 0x5a, 3000);
  ASSERT_EQ(post_with_imm(pair.a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, sge_of(pair.a, 0, 3000), 6,
                          htonl(77), pair.b.addr(100), pair.b.mr->rkey),
            0);
  const std::vector<ExWc> wrote = take_ex(pair.a.cqx, 1);
  ASSERT_EQ(wrote.size(), 1u);
  EXPECT_EQ(wrote[0].wr_id, 6u);
  EXPECT_EQ(wrote[0].opcode, IBV_WC_RDMA_WRITE);
  const std::vector<ExWc> got = take_ex(pair.b.cqx, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 5u);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(got[0].byte_len, 3000u);
  EXPECT_EQ(got[0].imm_data, htonl(77));
  EXPECT_NE(got[0].wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(pair.b.buf[100], 0x5a);
}

// RDMA READ: IBV_WC_RDMA_READ with the length read.
TEST(CqEx, Read) {
  Pair pair(extended());
  ASSERT_NE(pair.a.cqx, nullptr);
  std::memset(pair.b.buf.data() + 512, 0xc3, 2048);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_READ, sge_of(pair.a, 0, 2048), 9, pair.b.addr(512),
                      pair.b.mr->rkey),
            0);
  const std::vector<ExWc> got = take_ex(pair.a.cqx, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 9u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(got[0].byte_len, 2048u);
  EXPECT_EQ(pair.a.buf[2047], 0xc3);
}

// Each completion's timestamp lies between device-clock readings taken before the
// operation was posted and after it was polled (the clock of
// ibv_query_rt_values_ex(3) and hca_core_clock), and they never go backwards.
TEST(CqEx, TimestampsLieWithinTheOperationOnTheDeviceClock) {
  Pair pair(extended());
  ASSERT_NE(pair.a.cqx, nullptr);
  uint64_t previous = 0;
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_EQ(post_recv(pair.b.qp, sge_of(pair.b, 0, 64), i), 0);
    const uint64_t before = device_clock(pair.a.ctx);
    ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, sge_of(pair.a, 0, 64), i), 0);
    const std::vector<ExWc> sent = take_ex(pair.a.cqx, 1);
    const std::vector<ExWc> got = take_ex(pair.b.cqx, 1);
    const uint64_t after = device_clock(pair.a.ctx);
    ASSERT_EQ(sent.size(), 1u);
    ASSERT_EQ(got.size(), 1u);
    for (const ExWc& wc : {sent[0], got[0]}) {
      EXPECT_GE(wc.timestamp, before);
      EXPECT_LE(wc.timestamp, after);
      EXPECT_GE(wc.timestamp, previous) << "a later operation's completion";
    }
    previous = std::max(sent[0].timestamp, got[0].timestamp);
  }
}

// The wall-clock timestamp is the device timestamp moved by the distance between
// CLOCK_REALTIME and the device clock (CLOCK_MONOTONIC) at the time it is read:
// bounded by that distance measured just before and just after the read.
TEST(CqEx, WallclockTimestampIsTheDeviceTimestampOnTheWallClock) {
  Pair pair(extended());
  ASSERT_NE(pair.a.cqx, nullptr);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, sge_of(pair.a, 0, 16), 1, pair.b.addr(),
                      pair.b.mr->rkey),
            0);
  ASSERT_TRUE(start_batch(pair.a.cqx));
  const int64_t device_before = int64_t(device_clock(pair.a.ctx));
  const int64_t wall_before = clock_ns(CLOCK_REALTIME);
  const int64_t wall = int64_t(ibv_wc_read_completion_wallclock_ns(pair.a.cqx));
  const int64_t wall_after = clock_ns(CLOCK_REALTIME);
  const int64_t device_after = int64_t(device_clock(pair.a.ctx));
  const int64_t stamp = int64_t(ibv_wc_read_completion_ts(pair.a.cqx));
  ibv_end_poll(pair.a.cqx);
  EXPECT_GE(wall - stamp, wall_before - device_after);
  EXPECT_LE(wall - stamp, wall_after - device_before);
}

// One queue behind both APIs: completions come out in order whichever takes them,
// a batch ended early leaves the rest to the next poll, and ibv_poll_cq works on
// ibv_cq_ex_to_cq() of an extended CQ.
TEST(CqEx, StartNextEndMixWithPollCq) {
  FlushingQp q(/*cqe=*/16, IBV_WC_STANDARD_FLAGS);
  ASSERT_TRUE(q.ready());
  q.flush_sends(5);
  ibv_wc wc{};
  ASSERT_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(q.cqx), 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 0u);
  ibv_poll_cq_attr attr{};
  ASSERT_EQ(ibv_start_poll(q.cqx, &attr), 0);
  EXPECT_EQ(q.cqx->wr_id, 1u);
  EXPECT_EQ(q.cqx->status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(ibv_wc_read_opcode(q.cqx), IBV_WC_SEND);
  ASSERT_EQ(ibv_next_poll(q.cqx), 0);
  EXPECT_EQ(q.cqx->wr_id, 2u);
  ibv_end_poll(q.cqx);
  ASSERT_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(q.cqx), 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 3u);
  ASSERT_EQ(ibv_start_poll(q.cqx, &attr), 0);
  EXPECT_EQ(q.cqx->wr_id, 4u);
  EXPECT_EQ(ibv_next_poll(q.cqx), ENOENT) << "drained";
  ibv_end_poll(q.cqx);
  EXPECT_EQ(ibv_start_poll(q.cqx, &attr), ENOENT);
}

// ibv_create_cq_ex(3): "If an error code is given, end_poll shouldn't be called";
// some applications do anyway (pyverbs' poll_cq_ex, in a `finally`). Nothing is
// released twice: the next batch works.
TEST(CqEx, EndPollAfterAnEmptyStartPollIsHarmless) {
  FlushingQp q(16, 0);
  ASSERT_TRUE(q.ready());
  ibv_poll_cq_attr attr{};
  EXPECT_EQ(ibv_start_poll(q.cqx, &attr), ENOENT);
  ibv_end_poll(q.cqx);
  q.flush_sends(1);
  ASSERT_EQ(ibv_start_poll(q.cqx, &attr), 0);
  EXPECT_EQ(q.cqx->wr_id, 0u);
  ibv_end_poll(q.cqx);
}

// Two threads polling one extended CQ in batches take turns (start_poll holds the
// CQ until end_poll, as rdma-core's providers do): every completion is seen exactly
// once, with its own wr_id and opcode.
TEST(CqEx, ConcurrentBatchesSeeEachCompletionOnce) {
  constexpr int kCompletions = 4000;
  FlushingQp q(kCompletions, IBV_WC_STANDARD_FLAGS, /*max_send_wr=*/kCompletions);
  ASSERT_TRUE(q.ready());
  q.flush_sends(kCompletions);
  std::vector<uint64_t> seen[2];
  std::atomic<int> arrived{0};
  std::atomic<bool> changed{false};
  auto drain = [&](std::vector<uint64_t>& out) {
    arrived.fetch_add(1);
    while (arrived.load() < 2) {
    }
    ibv_poll_cq_attr attr{};
    while (ibv_start_poll(q.cqx, &attr) == 0) {
      do {
        // The current completion is this thread's until it moves on, however
        // long it takes to read (the other thread may run meanwhile).
        const uint64_t id = q.cqx->wr_id;
        std::this_thread::yield();
        if (q.cqx->wr_id != id || ibv_wc_read_opcode(q.cqx) != IBV_WC_SEND) changed = true;
        out.push_back(id);
      } while (ibv_next_poll(q.cqx) == 0);
      ibv_end_poll(q.cqx);
    }
  };
  std::thread other(drain, std::ref(seen[1]));
  drain(seen[0]);
  other.join();
  EXPECT_FALSE(changed.load()) << "a batch's completion changed under it";
  std::multiset<uint64_t> all(seen[0].begin(), seen[0].end());
  all.insert(seen[1].begin(), seen[1].end());
  ASSERT_EQ(all.size(), size_t(kCompletions));
  uint64_t expected = 0;
  for (uint64_t id : all) EXPECT_EQ(id, expected++);
}

// A batch may post (rc_pingpong posts its next receive and send between
// start_poll and end_poll): the post runs the engine, which completes into the
// same CQ without waiting for the batch, and the batch may take those completions.
TEST(CqEx, PostingInsideABatchDoesNotWaitForIt) {
  Pair pair(extended());
  ASSERT_NE(pair.a.cqx, nullptr);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, sge_of(pair.a, 0, 8), 1, pair.b.addr(),
                      pair.b.mr->rkey),
            0);
  ASSERT_TRUE(start_batch(pair.a.cqx));
  EXPECT_EQ(pair.a.cqx->wr_id, 1u);
  for (uint64_t id = 2; id < 6; ++id) {
    ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, sge_of(pair.a, 0, 8), id, pair.b.addr(),
                        pair.b.mr->rkey),
              0);
  }
  // ibv_next_poll retried on ENOENT (pyverbs' poll_cq_ex does) brings the next
  // completion within the batch: an empty CQ makes progress in next_poll too.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int ret = ENOENT;
  while ((ret = ibv_next_poll(pair.a.cqx)) == ENOENT && std::chrono::steady_clock::now() < give_up) {
  }
  ASSERT_EQ(ret, 0);
  EXPECT_EQ(pair.a.cqx->wr_id, 2u);
  ibv_end_poll(pair.a.cqx);
  const std::vector<ExWc> rest = take_ex(pair.a.cqx, 3);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].wr_id, 3 + i);
}

// A field asked for has its accessor; one not asked for has none (as on RDMA NICs,
// whose providers install only what wc_flags asked). Opcode, vendor error and
// wc_flags are always there.
TEST(CqEx, AccessorsFollowTheFlagsAsked) {
  Device dev;
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 4;
  attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* cq = ibv_create_cq_ex(dev.ctx(), &attr);
  ASSERT_NE(cq, nullptr);
  EXPECT_NE(cq->start_poll, nullptr);
  EXPECT_NE(cq->next_poll, nullptr);
  EXPECT_NE(cq->end_poll, nullptr);
  EXPECT_NE(cq->read_opcode, nullptr);
  EXPECT_NE(cq->read_vendor_err, nullptr);
  EXPECT_NE(cq->read_wc_flags, nullptr);
  EXPECT_NE(cq->read_byte_len, nullptr);
  EXPECT_NE(cq->read_completion_ts, nullptr);
  EXPECT_EQ(cq->read_imm_data, nullptr);
  EXPECT_EQ(cq->read_qp_num, nullptr);
  EXPECT_EQ(cq->read_completion_wallclock_ns, nullptr);
  EXPECT_EQ(cq->read_cvlan, nullptr);
  EXPECT_EQ(cq->read_flow_tag, nullptr);
  EXPECT_EQ(cq->read_tm_info, nullptr);
  EXPECT_GE(cq->cqe, 4);
  EXPECT_EQ(cq->context, dev.ctx());
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

// IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: "will not pass to error state if overrun, CQE
// always will be written to next entry": the CQ keeps the newest completions, no
// IBV_EVENT_CQ_ERR is raised, and the CQ goes on working.
TEST(CqEx, IgnoringOverrunKeepsTheNewestAndRaisesNoEvent) {
  FlushingQp q(/*cqe=*/2, 0, 16, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
  ASSERT_TRUE(q.ready());
  q.flush_sends(5);
  std::vector<uint64_t> ids;
  for (const ExWc& wc : drain_ex(q.cqx)) ids.push_back(wc.wr_id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{3, 4}));
  const int flags = fcntl(q.ctx()->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(q.ctx()->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  ibv_async_event event{};
  EXPECT_EQ(ibv_get_async_event(q.ctx(), &event), -1) << "event " << event.event_type;
  EXPECT_EQ(errno, EAGAIN);
  q.flush_sends(1);
  EXPECT_EQ(drain_ex(q.cqx).size(), 1u);
}

// IBV_CREATE_CQ_ATTR_SINGLE_THREADED: no lock is taken, polling works the same.
TEST(CqEx, SingleThreadedCqPolls) {
  FlushingQp q(8, IBV_WC_STANDARD_FLAGS, 16, IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
  ASSERT_TRUE(q.ready());
  q.flush_sends(3);
  const std::vector<ExWc> got = drain_ex(q.cqx);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wr_id, i);
}

// The CQ made by ibv_create_cq_ex reports to its completion channel: armed with
// ibv_req_notify_cq on ibv_cq_ex_to_cq(), the event names that CQ and its
// cq_context; acknowledged, it is destroyed with ibv_destroy_cq.
TEST(CqEx, CompletionChannelNamesTheExtendedCq) {
  PairOptions options = extended();
  options.with_channel = true;
  Pair pair(options);
  ASSERT_NE(pair.a.cqx, nullptr);
  ASSERT_EQ(ibv_req_notify_cq(pair.a.cq, 0), 0);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, sge_of(pair.a, 0, 8), 3, pair.b.addr(),
                      pair.b.mr->rkey),
            0);
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  ASSERT_EQ(ibv_get_cq_event(pair.a.channel, &cq, &context), 0);
  EXPECT_EQ(cq, ibv_cq_ex_to_cq(pair.a.cqx));
  EXPECT_EQ(context, &pair.a);
  ibv_ack_cq_events(cq, 1);
  const std::vector<ExWc> got = take_ex(pair.a.cqx, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 3u);
}

// ibv_query_device_ex(3) reports the clock truthfully: timestamps are given
// (completion_timestamp_mask != 0) and counted in nanoseconds (1 GHz, in kHz).
TEST(CqEx, DeviceReportsItsCompletionClock) {
  Device dev;
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(dev.ctx(), nullptr, &attr), 0);
  EXPECT_EQ(attr.completion_timestamp_mask, (uint64_t(1) << 63) - 1);
  EXPECT_EQ(attr.hca_core_clock, 1'000'000u);
}

// ibv_query_rt_values_ex(3) marks the raw clock as queried and reads the device
// clock (CLOCK_MONOTONIC nanoseconds): between two readings of that clock.
TEST(CqEx, RawClockIsTheDeviceClock) {
  Device dev;
  const int64_t before = clock_ns(CLOCK_MONOTONIC);
  ibv_values_ex values{};
  values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(ibv_query_rt_values_ex(dev.ctx(), &values), 0);
  const int64_t after = clock_ns(CLOCK_MONOTONIC);
  EXPECT_EQ(values.comp_mask, uint32_t(IBV_VALUES_MASK_RAW_CLOCK));
  EXPECT_LT(values.raw_clock.tv_nsec, 1'000'000'000);
  const int64_t raw = int64_t(values.raw_clock.tv_sec) * 1'000'000'000 + values.raw_clock.tv_nsec;
  EXPECT_GE(raw, before);
  EXPECT_LE(raw, after);
}

}  // namespace
}  // namespace softrdma::verbs::testing
