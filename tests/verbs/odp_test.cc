// Registration variants through the C API: on-demand paging (ibv_reg_mr(3)
// IBV_ACCESS_ON_DEMAND, implicit ODP, ibv_advise_mr(3)), MRs addressed by an IOVA
// (ibv_reg_mr_iova(3)), and dma-buf MRs answered honestly.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "verbs/verbs_fixture.h"

// The function itself, not the header's inline dispatcher.
#undef ibv_reg_mr_iova

namespace softrdma::verbs::testing {
namespace {

constexpr int kOdp = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE;

// ibv_query_device_ex(3): ODP and implicit ODP, for every operation of every
// transport served, SRQ receives included; XRC has RC's.
TEST(Odp, DeviceReportsOdpCaps) {
  Device dev;
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(dev.ctx(), nullptr, &attr), 0);
  EXPECT_EQ(attr.odp_caps.general_caps, uint64_t(IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  const uint32_t rc = attr.odp_caps.per_transport_caps.rc_odp_caps;
  EXPECT_EQ(rc, uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                         IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                         IBV_ODP_SUPPORT_SRQ_RECV));
  EXPECT_EQ(attr.odp_caps.per_transport_caps.ud_odp_caps,
            uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV));
  EXPECT_FALSE(attr.odp_caps.per_transport_caps.uc_odp_caps & IBV_ODP_SUPPORT_READ);
  EXPECT_EQ(attr.xrc_odp_caps, rc);
}

// Memory not mapped yet: refused without ODP (EFAULT, as the kernel's pinning
// fails), registered with it; pages mapped later are reached.
TEST(Odp, OnDemandMrMayCoverUnmappedMemory) {
  Pair pair;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* hole = mmap(nullptr, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  ASSERT_EQ(munmap(hole, 2 * page), 0);
  EXPECT_EQ(ibv_reg_mr(pair.b.pd, hole, 2 * page, kAllAccess), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* mr = ibv_reg_mr(pair.b.pd, hole, 2 * page, kAllAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  void* mapped = mmap(hole, 2 * page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (mapped == hole) {  // the range was still free: the peer writes into the new pages
    std::memcpy(pair.a.buf.data(), "on demand", 9);
    ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, {pair.a.addr(0), 9, pair.a.mr->lkey}, 1,
                        uintptr_t(hole) + page, mr->rkey),
              0);
    auto wcs = poll_n(pair.a.cq, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(static_cast<char*>(hole) + page, "on demand", 9), 0);
  }
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  if (mapped != MAP_FAILED) munmap(mapped, 2 * page);
}

// Implicit ODP (ibv_reg_mr(pd, NULL, SIZE_MAX, ...ON_DEMAND)): one key for the whole
// address space, addresses as they are; without ON_DEMAND it is EINVAL.
TEST(Odp, ImplicitMrReachesAnyAddress) {
  Pair pair;
  ibv_mr* implicit = ibv_reg_mr(pair.b.pd, nullptr, SIZE_MAX, kAllAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(implicit, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_reg_mr(pair.b.pd, nullptr, SIZE_MAX, kAllAccess), nullptr);
  EXPECT_EQ(errno, EINVAL);
  std::vector<uint8_t> elsewhere(64, 0);  // never registered by itself
  std::memcpy(pair.a.buf.data(), "implicit", 8);
  ASSERT_EQ(post_send(pair.a.qp, IBV_WR_RDMA_WRITE, {pair.a.addr(0), 8, pair.a.mr->lkey}, 1,
                      uintptr_t(elsewhere.data()), implicit->rkey),
            0);
  auto wcs = poll_n(pair.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(elsewhere.data(), "implicit", 8), 0);
  EXPECT_EQ(ibv_dereg_mr(implicit), 0);
}

// ibv_advise_mr(3): a prefetch of ODP memory succeeds; the man page's errors for
// the rest.
TEST(Odp, AdviseMrChecksItsArguments) {
  Pair pair;
  Side& b = pair.b;
  ibv_mr* odp = ibv_reg_mr(b.pd, b.buf.data(), 4096, kOdp);
  ibv_mr* odp_ro = ibv_reg_mr(b.pd, b.buf.data(), 4096, IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(odp, nullptr);
  ASSERT_NE(odp_ro, nullptr);
  ibv_sge sge{b.addr(0), 4096, odp->lkey};
  for (auto advice : {IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                      IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT}) {
    EXPECT_EQ(ibv_advise_mr(b.pd, ibv_advise_mr_advice(advice), IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1),
              0);
    EXPECT_EQ(ibv_advise_mr(b.pd, ibv_advise_mr_advice(advice), 0, &sge, 1), 0);
  }
  const auto prefetch = ibv_advise_mr_advice(IBV_ADVISE_MR_ADVICE_PREFETCH);
  EXPECT_EQ(ibv_advise_mr(b.pd, prefetch, 2, &sge, 1), EINVAL);   // unknown flag
  EXPECT_EQ(ibv_advise_mr(b.pd, prefetch, 0, &sge, 0), EINVAL);   // no SGE
  EXPECT_EQ(ibv_advise_mr(b.pd, ibv_advise_mr_advice(7), 0, &sge, 1), EOPNOTSUPP);
  ibv_sge beyond{b.addr(4000), 200, odp->lkey};
  EXPECT_EQ(ibv_advise_mr(b.pd, prefetch, 0, &beyond, 1), EFAULT);
  ibv_sge bad_key{b.addr(0), 8, odp->lkey ^ 0x5a5a5a5a};
  EXPECT_EQ(ibv_advise_mr(b.pd, prefetch, 0, &bad_key, 1), EFAULT);
  ibv_sge pinned{b.addr(0), 8, b.mr->lkey};  // not an ODP MR
  EXPECT_EQ(ibv_advise_mr(b.pd, prefetch, 0, &pinned, 1), EINVAL);
  ibv_sge read_only{b.addr(0), 8, odp_ro->lkey};
  EXPECT_EQ(ibv_advise_mr(b.pd, ibv_advise_mr_advice(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE), 0,
                          &read_only, 1),
            EPERM);
  EXPECT_EQ(ibv_advise_mr(pair.a.pd, prefetch, 0, &sge, 1), EPERM);  // another PD's key
  EXPECT_EQ(ibv_dereg_mr(odp), 0);
  EXPECT_EQ(ibv_dereg_mr(odp_ro), 0);
}

// ibv_reg_mr_iova(3): peers and local SGEs both address the MR by its IOVA.
TEST(RegMrIova, PeersAndLocalSgesUseTheIova) {
  Pair pair;
  Side& a = pair.a;
  Side& b = pair.b;
  constexpr uint64_t kIova = 0x7000000000ull;
  ibv_mr* target = ibv_reg_mr_iova(b.pd, b.buf.data() + 4096, 8192, kIova, kAllAccess);
  ASSERT_NE(target, nullptr) << "errno " << errno;
  EXPECT_EQ(target->addr, b.buf.data() + 4096);
  ibv_mr* source = ibv_reg_mr_iova2(a.pd, a.buf.data(), 4096, kIova, kAllAccess);
  ASSERT_NE(source, nullptr);
  std::memcpy(a.buf.data() + 16, "by iova!", 8);
  ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, {kIova + 16, 8, source->lkey}, 1, kIova + 100,
                      target->rkey),
            0);
  auto wcs = poll_n(a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(b.buf.data() + 4096 + 100, "by iova!", 8), 0);
  // Its host address is not an address of the MR.
  ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_READ, {kIova, 8, source->lkey}, 2,
                      uintptr_t(b.buf.data() + 4096), target->rkey),
            0);
  wcs = poll_n(a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(target), 0);
  EXPECT_EQ(ibv_dereg_mr(source), 0);
}

// dma-buf memory belongs to another device's driver: EOPNOTSUPP, as the man page
// lets a provider answer.
TEST(RegDmabufMr, NotSupported) {
  Pair pair;
  EXPECT_EQ(ibv_reg_dmabuf_mr(pair.a.pd, 0, 4096, 0, 3, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

}  // namespace
}  // namespace softrdma::verbs::testing
