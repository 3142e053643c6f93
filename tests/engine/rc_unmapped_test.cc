// Registered memory that the application munmap'ed without ibv_dereg_mr (issue 6,
// defect 1; docs/decisions/memory-faults.md). A peer's access to it must not crash
// this process: it ends as an ODP-capable RNIC ends it, with a remote access error
// NAK (IBA 9.7.5.2.4) and both QPs in Error; this side's own unmapped buffers give a
// local protection error (IBA 10.8.3.1). Each case is counted.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "engine/guarded_memory.h"
#include "engine/rc_fixture.h"

namespace softrdma::engine::testing {
namespace {

bool has_event(Device& d, ibv_event_type type) {
  AsyncEvent e;
  while (d.next_async_event(e))
    if (e.type == type) return true;
  return false;
}

class RcUnmappedTest : public RcPairTest {
 protected:
  void TearDown() override {
    for (auto [addr, len] : mapped_) munmap(addr, len);
    RcPairTest::TearDown();
  }

  // Registers `pages` fresh pages on `n` (all access rights), then takes the pages
  // from `first_gone` on away: the MR stays registered over memory that is gone.
  // They are replaced at once (MAP_FIXED) by an inaccessible mapping rather than
  // unmapped and left free: an allocation of the test's own (ASan's allocator, under
  // load) could otherwise land in the freed range, and the access would succeed.
  // An access faults the same way (SIGSEGV) and takes the same path.
  Mr* register_then_unmap(Node& n, size_t pages, size_t first_gone = 0) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    std::memset(p, 0x5a, pages * page);
    int err = 0;
    Mr* mr = n.device->reg_mr(n.pd, p, pages * page, uint64_t(uintptr_t(p)),
                              options_.mr_access, err);
    EXPECT_NE(mr, nullptr) << err;
    uint8_t* gone = static_cast<uint8_t*>(p) + first_gone * page;
    EXPECT_EQ(mmap(gone, (pages - first_gone) * page, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0),
              static_cast<void*>(gone));
    mapped_.push_back({p, pages * page});
    return mr;
  }

  // Posts from a to `target` (an MR of b) at its start.
  int post_to(Mr* target, ibv_wr_opcode opcode, uint32_t length) {
    return post_with(a, opcode, 0, length, 0, 1, [&](ibv_send_wr& wr, ibv_sge&) {
      if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
        wr.wr.atomic.remote_addr = target->iova;
        wr.wr.atomic.rkey = target->key;
      } else {
        wr.wr.rdma.remote_addr = target->iova;
        wr.wr.rdma.rkey = target->key;
      }
    });
  }

  // The requester's WQE ended with `status`, both QPs are in Error.
  void expect_failed(ibv_wc_status status) {
    ASSERT_TRUE(run_until([&] { return a.qp->sq().empty(); }));
    auto wcs = poll(a.scq);
    ASSERT_GE(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, status);
    EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
  }
  void expect_remote_access_error() {
    expect_failed(IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
    EXPECT_TRUE(has_event(*b.device, IBV_EVENT_QP_ACCESS_ERR));
    EXPECT_EQ(b.counters().peer_access_unmapped.load(), 1u);
  }

  std::vector<std::pair<void*, size_t>> mapped_;
};

// The guarded copy itself: a fault on either side is a false return.
TEST_F(RcUnmappedTest, GuardedCopyReportsAFaultInsteadOfDying) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  uint8_t buf[64] = {1};
  const uint64_t before = guarded_faults();
  EXPECT_TRUE(guarded_copy(buf, p, sizeof buf));
  EXPECT_FALSE(guarded_copy(p, buf, sizeof buf));  // read-only page: SIGSEGV on write
  munmap(p, page);
  EXPECT_FALSE(guarded_copy(buf, p, sizeof buf));
  uint64_t original = 0;
  EXPECT_FALSE(guarded_atomic(AtomicOp::kFetchAdd, static_cast<uint64_t*>(p), 0, 1, original));
  EXPECT_EQ(guarded_faults(), before + 3);
  // The thread goes on normally afterwards: a second fault is caught too.
  EXPECT_FALSE(guarded_copy(buf, p, sizeof buf));
}

// A file mapping whose file shrank: touching the page past the end raises SIGBUS,
// which the guarded copy turns into a false return as well.
TEST_F(RcUnmappedTest, GuardedCopyReportsSigbus) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const int fd = memfd_create("softrdma-sigbus", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t(page)), 0);
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  uint8_t buf[64] = {};
  EXPECT_TRUE(guarded_copy(p, buf, sizeof buf));
  ASSERT_EQ(ftruncate(fd, 0), 0);
  const uint64_t before = guarded_faults();
  EXPECT_FALSE(guarded_copy(buf, p, sizeof buf));
  EXPECT_EQ(guarded_faults(), before + 1);
  munmap(p, page);
  close(fd);
}

// A fault outside softrdma's guarded copies still reaches the handler that was
// there before (here the default action): softrdma must not swallow real crashes.
TEST_F(RcUnmappedTest, OtherFaultsStillCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        node_directory_.remove();  // the child's own; it dies without destructors
        volatile int* nowhere = nullptr;
        *nowhere = 1;
      },
      "");
}

// A WRITE into munmap'ed registered memory: remote access error NAK, both QPs to
// Error, IBV_EVENT_QP_ACCESS_ERR at the target, and the process lives.
TEST_F(RcUnmappedTest, WriteToUnmappedMemoryIsRemoteAccessError) {
  Mr* target = register_then_unmap(b, 2);
  ASSERT_EQ(post_to(target, IBV_WR_RDMA_WRITE, 100), 0);
  expect_remote_access_error();
}

// A READ of three pages whose last page is gone: the responses of the mapped part
// go out, then the NAK; the READ fails as a whole.
TEST_F(RcUnmappedTest, ReadReachingUnmappedMemoryIsRemoteAccessError) {
  const uint32_t page = uint32_t(sysconf(_SC_PAGESIZE));
  Mr* target = register_then_unmap(b, 3, 2);
  ASSERT_EQ(post_to(target, IBV_WR_RDMA_READ, 3 * page), 0);
  expect_remote_access_error();
}

TEST_F(RcUnmappedTest, AtomicOnUnmappedMemoryIsRemoteAccessError) {
  Mr* target = register_then_unmap(b, 1);
  ASSERT_EQ(post_to(target, IBV_WR_ATOMIC_FETCH_AND_ADD, 8), 0);
  expect_remote_access_error();
}

// A SEND into a receive buffer that is gone: the receive WQE completes with a local
// protection error at b, the requester sees a remote operational error (as for a
// receive SGE with a bad lkey).
TEST_F(RcUnmappedTest, SendIntoUnmappedReceiveBufferFailsBothSides) {
  Mr* target = register_then_unmap(b, 1);
  ibv_sge sge{target->iova, 256, target->key};
  ibv_recv_wr wr{};
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(b.qp->post_recv(&wr, &bad), 0);
  ASSERT_EQ(post(a, IBV_WR_SEND, 0, 100, 0, 1), 0);
  expect_failed(IBV_WC_REM_OP_ERR);
  auto recvs = poll(b.rcq);
  ASSERT_GE(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].wr_id, 7u);
  EXPECT_EQ(recvs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(b.counters().peer_access_unmapped.load(), 1u);
}

// This side's own send buffer is gone: local protection error, nothing sent.
TEST_F(RcUnmappedTest, SendFromUnmappedBufferIsLocalProtectionError) {
  Mr* source = register_then_unmap(a, 1);
  ASSERT_EQ(post_with(a, IBV_WR_SEND, 0, 100, 0, 1,
                      [&](ibv_send_wr&, ibv_sge& sge) {
                        sge.addr = source->iova;
                        sge.lkey = source->key;
                      }),
            0);
  expect_failed(IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(a.counters().local_access_unmapped.load(), 1u);
}

// A READ whose local buffer is gone: the first response cannot be placed.
TEST_F(RcUnmappedTest, ReadIntoUnmappedBufferIsLocalProtectionError) {
  Mr* sink = register_then_unmap(a, 1);
  ASSERT_EQ(post_with(a, IBV_WR_RDMA_READ, 0, 100, 0, 1,
                      [&](ibv_send_wr&, ibv_sge& sge) {
                        sge.addr = sink->iova;
                        sge.lkey = sink->key;
                      }),
            0);
  expect_failed(IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(a.counters().local_access_unmapped.load(), 1u);
}

// Inline data is read at post time, on the application's thread: an unmapped
// address completes with a local protection error instead of crashing the post.
TEST_F(RcUnmappedTest, InlineSendFromUnmappedAddressIsLocalProtectionError) {
  if (a.qp->cap().max_inline_data < 64) GTEST_SKIP() << "QP has no inline data room";
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* gone = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  munmap(gone, page);
  ASSERT_EQ(post_with(a, IBV_WR_SEND, 0, 64, 0, 1,
                      [&](ibv_send_wr& wr, ibv_sge& sge) {
                        wr.send_flags |= IBV_SEND_INLINE;
                        sge.addr = uint64_t(uintptr_t(gone));
                        sge.lkey = 0;
                      }),
            0);
  expect_failed(IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(a.counters().local_access_unmapped.load(), 1u);
}

}  // namespace
}  // namespace softrdma::engine::testing
