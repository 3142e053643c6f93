// Registered memory munmap'ed without ibv_dereg_mr (issue 6, defect 1;
// docs/decisions/memory-faults.md), through the verbs API as an application sees it:
// a peer's WRITE, READ or ATOMIC to it completes with IBV_WC_REM_ACCESS_ERR at the
// requester, the target QP goes to Error with IBV_EVENT_QP_ACCESS_ERR, and the
// process lives on (the counter is checked by the engine's tests).
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

// The application's munmap, as the engine sees it: the pages are gone and any
// access faults. Done by mapping PROT_NONE over them in one step, because after a
// plain munmap another thread (the engine's, ASan's allocator) may map something
// else at the same address before the peer's access arrives, and the access would
// then succeed.
void discard_pages(void* mem, size_t length) {
  ASSERT_EQ(mmap(mem, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), mem);
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 30000) == 1 && (p.revents & POLLIN);
}

ibv_qp_state state_of(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

// Sets an environment variable for the scope's life (a device opened in it reads it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

class UnmappedTarget : public ::testing::TestWithParam<ibv_wr_opcode> {};

// Where the target's pages are not shared with same-host peers (shared pages stay
// the MR's until ibv_dereg_mr, as pinned pages: RcHostTest.OnSharedPagesAPage...).
TEST_P(UnmappedTarget, RemoteAccessErrorAndTheProcessLives) {
  ScopedEnv no_shared_pages("SOFTRDMA_SHARED_PAGES_MB", "0");
  Pair pair(PairOptions{.two_contexts = true});
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ibv_mr* target = ibv_reg_mr(pair.b.pd, mem, 2 * page, kAllAccess);
  ASSERT_NE(target, nullptr);
  discard_pages(mem, 2 * page);  // the application unmapped it and forgot ibv_dereg_mr

  const ibv_wr_opcode opcode = GetParam();
  const bool atomic = opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  const uint32_t length = atomic ? 8 : uint32_t(page + 100);
  ibv_sge sge{pair.a.addr(0), length, pair.a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (atomic) {
    wr.wr.atomic.remote_addr = uint64_t(uintptr_t(mem));
    wr.wr.atomic.rkey = target->rkey;
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = uint64_t(uintptr_t(mem));
    wr.wr.rdma.rkey = target->rkey;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(pair.a.qp, &wr, &bad), 0);
  auto wcs = poll_n(pair.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wcs[0].status);

  ASSERT_TRUE(readable(pair.b.ctx->async_fd));
  ibv_async_event event{};
  ASSERT_EQ(ibv_get_async_event(pair.b.ctx, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(event.element.qp, pair.b.qp);
  ibv_ack_async_event(&event);
  EXPECT_EQ(state_of(pair.b.qp), IBV_QPS_ERR);
  EXPECT_EQ(ibv_dereg_mr(target), 0);
  munmap(mem, 2 * page);
}

INSTANTIATE_TEST_SUITE_P(Operations, UnmappedTarget,
                         ::testing::Values(IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ,
                                           IBV_WR_ATOMIC_FETCH_AND_ADD),
                         [](const auto& info) {
                           switch (info.param) {
                             case IBV_WR_RDMA_WRITE: return std::string("Write");
                             case IBV_WR_RDMA_READ: return std::string("Read");
                             default: return std::string("Atomic");
                           }
                         });

// The local side: a SEND from a buffer that is gone completes with a local
// protection error.
TEST(UnmappedSource, SendIsLocalProtectionError) {
  Pair pair;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ibv_mr* source = ibv_reg_mr(pair.a.pd, mem, page, kAllAccess);
  ASSERT_NE(source, nullptr);
  discard_pages(mem, page);
  ASSERT_EQ(post_recv(pair.b.qp, {pair.b.addr(0), 256, pair.b.mr->lkey}, 9), 0);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_SEND, {uint64_t(uintptr_t(mem)), 200, source->lkey}, 1), 0);
  auto wcs = poll_n(pair.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wcs[0].status);
  EXPECT_EQ(state_of(pair.a.qp), IBV_QPS_ERR);
  EXPECT_EQ(ibv_dereg_mr(source), 0);
  munmap(mem, page);
}

}  // namespace
}  // namespace softrdma::verbs::testing
