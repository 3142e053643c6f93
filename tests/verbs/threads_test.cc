// Thread safety of the verbs calls (DESIGN.md §5, docs/decisions/threading.md):
// several threads post to one QP, several post to different QPs of one context,
// and a thread polls the CQ they share meanwhile. Every WR completes exactly once,
// each thread's WRs complete in the order it posted them (a send queue completes
// in order, IBA 10.8.3.1), and every byte lands where its WR said.
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

constexpr uint32_t kSlot = 8;  // each WRITE puts one uint64_t in a slot of its own

// wr_id = poster << 32 | sequence; the value written is the wr_id too.
uint64_t wr_id_of(uint32_t poster, uint32_t seq) { return uint64_t(poster) << 32 | seq; }

// Posts `count` signaled 8-byte WRITEs to `qp`, slot by slot from `first_slot` of
// the target buffer; a full send queue (ENOMEM) is waited out, as applications do.
void post_writes(ibv_qp* qp, Side& from, Side& to, uint32_t poster, uint32_t count,
                 uint32_t first_slot, std::vector<uint64_t>& values) {
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t slot = first_slot + i;
    values[slot] = wr_id_of(poster, i);
    ibv_sge sge{from.addr(slot * kSlot), kSlot, from.mr->lkey};
    std::memcpy(from.buf.data() + slot * kSlot, &values[slot], kSlot);
    int rc;
    while ((rc = post_send(qp, IBV_WR_RDMA_WRITE, sge, values[slot], to.addr(slot * kSlot),
                           to.mr->rkey)) == ENOMEM) {
      std::this_thread::yield();
    }
    ASSERT_EQ(rc, 0) << "poster " << poster << " WR " << i;
  }
}

// Polls `cq` until `n` completions arrived; checks each is a successful WRITE
// seen once, and that each poster's sequence numbers rise.
void expect_completions(ibv_cq* cq, uint32_t posters, uint32_t per_poster) {
  const auto wcs = poll_n(cq, int(posters * per_poster));
  ASSERT_EQ(wcs.size(), size_t(posters) * per_poster);
  std::map<uint32_t, int64_t> last_seq;
  std::vector<uint64_t> seen;
  for (const ibv_wc& wc : wcs) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    ASSERT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    const uint32_t poster = uint32_t(wc.wr_id >> 32);
    const int64_t seq = int64_t(wc.wr_id & 0xffffffff);
    auto [it, fresh] = last_seq.emplace(poster, -1);
    EXPECT_LT(it->second, seq) << "poster " << poster << " completed out of order";
    it->second = seq;
    seen.push_back(wc.wr_id);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "a WR completed twice";
}

void expect_landed(Side& to, const std::vector<uint64_t>& values) {
  for (size_t slot = 0; slot < values.size(); ++slot) {
    uint64_t got;
    std::memcpy(&got, to.buf.data() + slot * kSlot, kSlot);
    ASSERT_EQ(got, values[slot]) << "slot " << slot;
  }
}

// Two threads post to the same QP while a third polls its CQ.
TEST(VerbsThreads, TwoThreadsPostToOneQpWhileAThirdPolls) {
  constexpr uint32_t kPerPoster = 3000;
  Pair pair(PairOptions{.cqe = 8192, .max_send_wr = 64, .buffer = 2 * kPerPoster * kSlot});
  std::vector<uint64_t> values(2 * kPerPoster);
  std::thread poller([&] { expect_completions(pair.a.cq, 2, kPerPoster); });
  std::thread p0([&] { post_writes(pair.a.qp, pair.a, pair.b, 0, kPerPoster, 0, values); });
  std::thread p1(
      [&] { post_writes(pair.a.qp, pair.a, pair.b, 1, kPerPoster, kPerPoster, values); });
  p0.join();
  p1.join();
  poller.join();
  expect_landed(pair.b, values);
}

// One context, one CQ for all: a QP per posting thread, connected to a QP of its
// own on the same device, and a polling thread.
TEST(VerbsThreads, ThreadsPostToTheirOwnQpsSharingOneCq) {
  constexpr uint32_t kPosters = 3;
  constexpr uint32_t kPerPoster = 2000;
  Pair pair(PairOptions{.cqe = 8192, .max_send_wr = 64,
                        .buffer = kPosters * kPerPoster * kSlot});
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(pair.a.ctx, 1, 1, &gid), 0);
  std::vector<ibv_qp*> senders, targets;
  for (uint32_t i = 0; i < kPosters; ++i) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = pair.a.cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {64, 4, 1, 1, 0};
    senders.push_back(ibv_create_qp(pair.a.pd, &init));
    init.send_cq = init.recv_cq = pair.b.cq;
    targets.push_back(ibv_create_qp(pair.b.pd, &init));
    ASSERT_NE(senders.back(), nullptr);
    ASSERT_NE(targets.back(), nullptr);
    ibv_gid gid_b{};
    ASSERT_EQ(ibv_query_gid(pair.b.ctx, 1, 1, &gid_b), 0);
    Pair::connect(senders.back(), targets.back()->qp_num, gid_b, 1);
    Pair::connect(targets.back(), senders.back()->qp_num, gid, 1);
  }
  std::vector<uint64_t> values(kPosters * kPerPoster);
  std::thread poller([&] { expect_completions(pair.a.cq, kPosters, kPerPoster); });
  std::vector<std::thread> posters;
  for (uint32_t p = 0; p < kPosters; ++p) {
    posters.emplace_back([&, p] {
      post_writes(senders[p], pair.a, pair.b, p, kPerPoster, p * kPerPoster, values);
    });
  }
  for (auto& t : posters) t.join();
  poller.join();
  expect_landed(pair.b, values);
  for (uint32_t i = 0; i < kPosters; ++i) {
    EXPECT_EQ(ibv_destroy_qp(senders[i]), 0);
    EXPECT_EQ(ibv_destroy_qp(targets[i]), 0);
  }
}

}  // namespace
}  // namespace softrdma::verbs::testing
