// What only the same-host path does (docs/decisions/same-host.md): a posted list of
// WRITEs leaves in one system call and still completes, or fails, WQE by WQE; a
// peer QP that cannot take requests yet is retried as a lost request; the target
// publishes its keys' revocation. The behaviour both paths share is tested by
// RcPathTest, RcOpsTest and RcErrorTest over both.
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <functional>
#include <vector>

#include "engine/rc_fixture.h"

namespace softrdma::engine::testing {
namespace {

constexpr size_t kDst = 128 * 1024;

class RcHostTest : public RcHostPairTest {
 protected:
  // A list of `n` WRITEs of 64 bytes, WR i from a's offset 64i to b's kDst + 64i;
  // `adjust` may change one.
  int post_list(int n, const std::function<void(int, ibv_send_wr&)>& adjust = {}) {
    std::vector<ibv_sge> sges(static_cast<size_t>(n));
    std::vector<ibv_send_wr> wrs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      sges[size_t(i)] = ibv_sge{a.addr(size_t(64 * i)), 64, a.mr->key};
      ibv_send_wr& wr = wrs[size_t(i)];
      wr.wr_id = uint64_t(i);
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &sges[size_t(i)];
      wr.num_sge = 1;
      wr.wr.rdma.remote_addr = b.addr(kDst + size_t(64 * i));
      wr.wr.rdma.rkey = b.mr->key;
      wr.next = i + 1 < n ? &wrs[size_t(i + 1)] : nullptr;
      if (adjust) adjust(i, wr);
    }
    return post_wr(a, wrs[0]);
  }
  // Four fresh pages of b's (`region`), registered for remote WRITEs; null when
  // they could not be mapped or registered.
  Mr* four_pages_of_b(uint8_t*& region) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    region = static_cast<uint8_t*>(p);
    int err = 0;
    return b.device->reg_mr(b.pd, region, 4 * page, uint64_t(uintptr_t(region)),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, err);
  }
  // A list of 32 WRITEs of bytes from `seed`: each completes in order and lands.
  void post_list_and_check_it_landed(uint32_t seed) {
    fill(a, 0, 64 * 32, seed);
    ASSERT_EQ(post_list(32), 0);
    pump();
    auto wcs = poll(a.scq);
    ASSERT_EQ(wcs.size(), 32u);
    for (size_t i = 0; i < wcs.size(); ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wcs[i].wr_id, i);
    }
    EXPECT_TRUE(same(a, 0, b, kDst, 64 * 32));
    EXPECT_EQ(a.counters().host_writes.load(), 32u);
  }
};

// Peers that copy by cross-memory attach (no shared pages): what the batch is for.
class RcHostCallsTest : public RcHostTest {
 protected:
  void SetUp() override {
    RcHostTest::SetUp();
    RcOptions options;
    options.shared_pages = 0;
    connect(options);
  }
};

TEST_F(RcHostCallsTest, APostedListOfWritesLandsAndCompletesInOrder) {
  post_list_and_check_it_landed(7);
  EXPECT_EQ(a.counters().host_bytes.load(), 64u * 32);
  EXPECT_EQ(a.counters().tx_packets.load(), 0u) << "nothing on the wire";
  EXPECT_EQ(a.counters().host_calls.load(), 1u) << "the list in one system call";
  EXPECT_EQ(a.qp->counters().host_operations.load(), 32u);
}

// b's MR is on shared pages (samehost/shared_pages.h): the same list lands by
// stores, in order, without a system call.
TEST_F(RcHostTest, OnSharedPagesAListOfWritesLandsWithoutASystemCall) {
  post_list_and_check_it_landed(9);
  EXPECT_EQ(a.counters().host_mapped.load(), 32u);
  EXPECT_EQ(a.counters().host_calls.load(), 0u);
}

// WR 5 of 10 names a key b never registered: WRs 0-4 land and succeed, WR 5 gets the
// NAK's status, the rest are flushed and never written, and b's QP ends too.
TEST_F(RcHostCallsTest, AFailureInsideAListFailsThatWriteAlone) {
  fill(a, 0, 64 * 10, 3);
  ASSERT_EQ(post_list(10, [&](int i, ibv_send_wr& wr) {
              if (i == 5) wr.wr.rdma.rkey = b.mr->key ^ 0x77;
            }),
            0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty() && b.qp->state() == IBV_QPS_ERR; }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    const ibv_wc_status want = i < 5 ? IBV_WC_SUCCESS
                               : i == 5 ? IBV_WC_REM_ACCESS_ERR
                                        : IBV_WC_WR_FLUSH_ERR;
    EXPECT_EQ(wcs[i].status, want) << "wr " << i;
  }
  EXPECT_TRUE(same(a, 0, b, kDst, 64 * 5));
  const std::array<uint8_t, 64 * 4> zeros{};
  EXPECT_EQ(std::memcmp(&b.mem[kDst + 64 * 6], zeros.data(), zeros.size()), 0);
  EXPECT_EQ(a.counters().host_refused.load(), 1u);
  EXPECT_EQ(b.counters().peer_faults_taken.load(), 1u);
}

// The batch's one copy fails part-way (b unmapped a page of its MR without
// deregistering it): the WRITEs before that page land and succeed, the one into it
// fails as on the wire (remote access error), the rest are flushed unwritten.
TEST_F(RcHostCallsTest, ACopyThatFailsPartWayFailsTheWriteThatMetTheHole) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  uint8_t* region = nullptr;
  Mr* mr = four_pages_of_b(region);
  ASSERT_NE(mr, nullptr) << "mapped and registered";
  ASSERT_EQ(munmap(region + 2 * page, page), 0);
  fill(a, 0, 64 * 4, 5);
  ASSERT_EQ(post_list(4, [&](int i, ibv_send_wr& wr) {
              wr.wr.rdma.remote_addr = uint64_t(uintptr_t(region + size_t(i) * page));
              wr.wr.rdma.rkey = mr->key;
            }),
            0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty() && b.qp->state() == IBV_QPS_ERR; }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 4u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[2].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wcs[3].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(std::memcmp(region, &a.mem[0], 64), 0);
  EXPECT_EQ(std::memcmp(region + page, &a.mem[64], 64), 0);
  EXPECT_EQ(region[3 * page], 0) << "the WRITE after the failed one was not executed";
  EXPECT_GE(a.counters().host_calls.load(), 2u) << "the batch, then each WRITE alone";
  munmap(region, 2 * page);
  munmap(region + 3 * page, page);
}

// On shared pages, an MR's pages stay the MR's until ibv_dereg_mr, as an RDMA
// NIC's pinned pages: b unmaps one and maps a fresh page at its address; a's WRITE
// there succeeds into the MR's page, and the fresh page is untouched (a system
// call would have written whatever is mapped there now).
TEST_F(RcHostTest, OnSharedPagesAPageUnmappedWithoutDeregStaysTheMrs) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  uint8_t* region = nullptr;
  Mr* mr = four_pages_of_b(region);
  ASSERT_NE(mr, nullptr) << "mapped and registered";
  ASSERT_NE(mr->pages, nullptr) << "the region's pages are shared";
  ASSERT_EQ(mmap(region + 2 * page, page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            region + 2 * page);
  fill(a, 0, 64, 5);
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_WRITE, 0, 64, 0, 1,
                      [&](ibv_send_wr& wr, ibv_sge&) {
                        wr.wr.rdma.remote_addr = uint64_t(uintptr_t(region + 2 * page));
                        wr.wr.rdma.rkey = mr->key;
                      }),
            0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  const std::array<uint8_t, 64> zeros{};
  EXPECT_EQ(std::memcmp(region + 2 * page, zeros.data(), 64), 0) << "the fresh page is untouched";
  EXPECT_EQ(b.device->dereg_mr(mr), 0);
  munmap(region, 4 * page);
}

// The peer's QP is still in INIT when a's WRITE comes: a lost request, retried at
// the QP's interval; it lands once b reaches RTR.
TEST_F(RcHostTest, APeerQpNotYetReadyIsRetriedUntilItIs) {
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(b.qp->modify(reset, IBV_QP_STATE), 0);
  fill(a, 0, 64, 9);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 64, kDst, 1), 0);
  pump();
  EXPECT_TRUE(poll(a.scq).empty());
  EXPECT_GE(a.counters().host_peer_not_ready.load(), 1u);
  connect_qp(*b.qp, *a.device, a.qp->qpn(), options_.b_psn, options_.a_psn, options_.b_qp_access,
             options_);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(a, 0, b, kDst, 64));
}

// A peer QP that never becomes ready: retry_cnt retries, then RETRY_EXC_ERR.
TEST_F(RcHostTest, APeerQpThatNeverBecomesReadyExhaustsTheRetries) {
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(b.qp->modify(reset, IBV_QP_STATE), 0);
  ASSERT_EQ(post(a, IBV_WR_RDMA_WRITE, 0, 64, kDst, 1), 0);
  ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }, 10'000'000'000));
  auto wcs = poll(a.scq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(a.counters().host_peer_not_ready.load(), uint64_t(options_.retry_cnt) + 1);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
}

}  // namespace
}  // namespace softrdma::engine::testing
