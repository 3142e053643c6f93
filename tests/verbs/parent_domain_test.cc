// Thread and parent domains through the C API (ibv_alloc_td(3),
// ibv_alloc_parent_domain(3)): a parent domain is usable wherever its PD is.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

void* use_default_alloc(ibv_pd*, void*, size_t, size_t, uint64_t) { return IBV_ALLOCATOR_USE_DEFAULT; }
void unexpected_free(ibv_pd*, void*, void*, uint64_t) { ADD_FAILURE() << "freed what it never gave"; }

// An allocator that counts what it hands out and gets back (pd_context points here).
struct Ledger {
  ibv_pd* domain = nullptr;
  int allocated = 0;
  int freed = 0;
  bool aligned = true;
  uint64_t type = 0;
};

void* counting_alloc(ibv_pd* pd, void* context, size_t size, size_t alignment, uint64_t type) {
  auto* ledger = static_cast<Ledger*>(context);
  EXPECT_EQ(pd, ledger->domain);
  void* p = nullptr;
  if (posix_memalign(&p, std::max(alignment, sizeof(void*)), size) != 0) return nullptr;
  std::memset(p, 0, size);  // "the callback makes sure the allocated buffer is ... zeros"
  ledger->aligned = ledger->aligned && uintptr_t(p) % alignment == 0;
  ledger->type = type;
  ++ledger->allocated;
  return p;
}

void counting_free(ibv_pd*, void* context, void* ptr, uint64_t) {
  ++static_cast<Ledger*>(context)->freed;
  free(ptr);
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap = {4, 4, 1, 1, 0};
  return ibv_create_qp(pd, &attr);
}

// A QP made with a parent domain that has allocators takes its queues from them
// (softrdma's resource type 1) and gives them back when destroyed; the parent
// domain cannot go while the QP exists. IBV_ALLOCATOR_USE_DEFAULT means the heap.
TEST(ParentDomain, QpQueuesComeFromItsAllocator) {
  Device dev;
  ibv_pd* pd = ibv_alloc_pd(dev.ctx());
  ibv_cq* cq = ibv_create_cq(dev.ctx(), 8, nullptr, nullptr, 0);
  Ledger ledger;
  ibv_parent_domain_init_attr attr{};
  attr.pd = pd;
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  attr.alloc = counting_alloc;
  attr.free = counting_free;
  attr.pd_context = &ledger;
  ibv_pd* parent = ibv_alloc_parent_domain(dev.ctx(), &attr);
  ASSERT_NE(parent, nullptr) << "errno " << errno;
  ledger.domain = parent;
  ibv_qp* qp = make_qp(parent, cq);
  ASSERT_NE(qp, nullptr) << "errno " << errno;
  EXPECT_GT(ledger.allocated, 0);
  EXPECT_TRUE(ledger.aligned);
  EXPECT_EQ(ledger.type, 1u);
  EXPECT_EQ(ibv_dealloc_pd(parent), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ledger.freed, ledger.allocated);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  attr.alloc = use_default_alloc;
  attr.free = unexpected_free;
  parent = ibv_alloc_parent_domain(dev.ctx(), &attr);
  ASSERT_NE(parent, nullptr);
  qp = make_qp(parent, cq);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// A QP and an MR made with a parent domain (with a thread domain and allocators)
// carry traffic; the PD and TD stay busy while the parent domain holds them.
TEST(ParentDomain, StandsInForItsPd) {
  Pair pair;
  Side& b = pair.b;
  ibv_td_init_attr td_attr{};
  ibv_td* td = ibv_alloc_td(b.ctx, &td_attr);
  ASSERT_NE(td, nullptr) << "errno " << errno;
  int cookie = 0;
  ibv_parent_domain_init_attr attr{};
  attr.pd = b.pd;
  attr.td = td;
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  attr.alloc = use_default_alloc;
  attr.free = unexpected_free;
  attr.pd_context = &cookie;
  ibv_pd* parent = ibv_alloc_parent_domain(b.ctx, &attr);
  ASSERT_NE(parent, nullptr) << "errno " << errno;
  EXPECT_EQ(parent->context, b.ctx);
  EXPECT_EQ(ibv_dealloc_pd(b.pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY);
  // An MR of the parent domain serves b's QP (created with the PD): one protection.
  ibv_mr* mr = ibv_reg_mr(parent, b.buf.data(), 4096, kAllAccess);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->pd, parent);
  std::memcpy(pair.a.buf.data(), "parental", 8);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, {pair.a.addr(0), 8, pair.a.mr->lkey}, 1,
                      b.addr(64), mr->rkey),
            0);
  auto wcs = poll_n(pair.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(b.buf.data() + 64, "parental", 8), 0);
  // A QP created with the parent domain.
  ibv_qp* qp = make_qp(parent, b.cq);
  ASSERT_NE(qp, nullptr) << "errno " << errno;
  EXPECT_EQ(qp->pd, parent);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
}

// ibv_alloc_parent_domain(3): the PD "can't be NULL"; unknown comp_mask bits,
// half a pair of allocators, a parent domain of a parent domain: EINVAL.
TEST(ParentDomain, RefusesWhatTheManPageForbids) {
  Pair pair;
  ibv_parent_domain_init_attr attr{};
  EXPECT_EQ(ibv_alloc_parent_domain(pair.a.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.pd = pair.a.pd;
  attr.comp_mask = 1u << 7;
  EXPECT_EQ(ibv_alloc_parent_domain(pair.a.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  attr.alloc = use_default_alloc;
  EXPECT_EQ(ibv_alloc_parent_domain(pair.a.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.comp_mask = 0;
  ibv_pd* parent = ibv_alloc_parent_domain(pair.a.ctx, &attr);
  ASSERT_NE(parent, nullptr);
  attr.pd = parent;
  EXPECT_EQ(ibv_alloc_parent_domain(pair.a.ctx, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  ibv_td_init_attr td_attr{1};
  EXPECT_EQ(ibv_alloc_td(pair.a.ctx, &td_attr), nullptr);  // unknown comp_mask
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softrdma::verbs::testing
