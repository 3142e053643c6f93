// Device memory through the C API (ibv_alloc_dm(3)): host memory the device owns,
// copied in and out in 4-byte words, registered as zero-based MRs.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs/verbs_fixture.h"

namespace softrdma::verbs::testing {
namespace {

uint64_t max_dm_size(ibv_context* ctx) {
  ibv_device_attr_ex attr{};
  EXPECT_EQ(ibv_query_device_ex(ctx, nullptr, &attr), 0);
  return attr.max_dm_size;
}

ibv_dm* alloc(ibv_context* ctx, size_t length, uint32_t log_align = 0) {
  ibv_alloc_dm_attr attr{length, log_align, 0};
  return ibv_alloc_dm(ctx, &attr);
}

// Bytes copied in come back out; the offset and length are words, in range.
TEST(DeviceMemory, CopiesRoundTripInWords) {
  Device dev;
  ASSERT_GT(max_dm_size(dev.ctx()), 0u);
  ibv_dm* dm = alloc(dev.ctx(), 256, 6);
  ASSERT_NE(dm, nullptr) << "errno " << errno;
  const char text[] = "device memory, word by word.";  // 29 bytes: 28 copied
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 8, text, 28), 0);
  char back[28] = {};
  ASSERT_EQ(ibv_memcpy_from_dm(back, dm, 8, 28), 0);
  EXPECT_EQ(std::memcmp(back, text, 28), 0);
  uint32_t zero = 1;
  ASSERT_EQ(ibv_memcpy_from_dm(&zero, dm, 252, 4), 0);
  EXPECT_EQ(zero, 0u);  // allocated zeroed
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 3, text, 4), EINVAL);    // unaligned offset
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 4, text, 3), EINVAL);    // unaligned length
  EXPECT_EQ(ibv_memcpy_from_dm(back, dm, 256, 4), EINVAL);  // past the end
  EXPECT_EQ(ibv_memcpy_from_dm(back, dm, 252, 8), EINVAL);
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

// ibv_alloc_dm(3): EINVAL for what cannot be asked, ENOMEM past max_dm_size; what
// is freed can be allocated again.
TEST(DeviceMemory, AllocationIsBoundedByMaxDmSize) {
  Device dev;
  const uint64_t max = max_dm_size(dev.ctx());
  EXPECT_EQ(alloc(dev.ctx(), 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_alloc_dm_attr masked{64, 0, 1};
  EXPECT_EQ(ibv_alloc_dm(dev.ctx(), &masked), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(alloc(dev.ctx(), 64, 30), nullptr);  // an alignment beyond a page
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(alloc(dev.ctx(), max + 1), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_dm* most = alloc(dev.ctx(), max * 3 / 4);
  ASSERT_NE(most, nullptr);
  EXPECT_EQ(alloc(dev.ctx(), max / 2), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_EQ(ibv_free_dm(most), 0);
  ibv_dm* half = alloc(dev.ctx(), max / 2);
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(ibv_free_dm(half), 0);
}

// ibv_reg_dm_mr(3): zero based only, within the DM; the DM cannot be freed under
// its MR. A peer WRITEs into it through the MR; the owner reads it by copying.
TEST(DeviceMemory, ZeroBasedMrServesAPeer) {
  Pair pair;
  Side& a = pair.a;
  Side& b = pair.b;
  ibv_dm* dm = alloc(b.ctx, 4096);
  ASSERT_NE(dm, nullptr);
  constexpr unsigned kAccess = IBV_ACCESS_ZERO_BASED | kAllAccess;
  EXPECT_EQ(ibv_reg_dm_mr(b.pd, dm, 0, 4096, kAllAccess), nullptr);  // not zero based
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_reg_dm_mr(b.pd, dm, 1024, 4096, kAccess), nullptr);  // past the DM
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* mr = ibv_reg_dm_mr(b.pd, dm, 1024, 2048, kAccess);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_free_dm(dm), EBUSY);
  std::memcpy(a.buf.data(), "into the device!", 16);
  ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, {a.addr(0), 16, a.mr->lkey}, 1, 8, mr->rkey), 0);
  auto wcs = poll_n(a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  char back[16];
  ASSERT_EQ(ibv_memcpy_from_dm(back, dm, 1024 + 8, 16), 0);
  EXPECT_EQ(std::memcmp(back, "into the device!", 16), 0);
  // The MR's addresses start at 0: 2048 is its end.
  ASSERT_EQ(post_send(a.qp, IBV_WR_RDMA_WRITE, {a.addr(0), 16, a.mr->lkey}, 2, 2040, mr->rkey),
            0);
  wcs = poll_n(a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

// Device memory as a local buffer: a SEND gathers from it.
TEST(DeviceMemory, SendGathersFromDeviceMemory) {
  Pair pair;
  Side& a = pair.a;
  Side& b = pair.b;
  ibv_dm* dm = alloc(a.ctx, 64);
  ASSERT_NE(dm, nullptr);
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 0, "sent from dm", 12), 0);
  ibv_mr* mr = ibv_reg_dm_mr(a.pd, dm, 0, 64, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv(b.qp, {b.addr(0), 64, b.mr->lkey}, 4), 0);
  ASSERT_EQ(post_send(a.qp, IBV_WR_SEND, {0, 12, mr->lkey}, 3), 0);
  EXPECT_EQ(poll_n(a.cq, 1).at(0).status, IBV_WC_SUCCESS);
  auto got = poll_n(b.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].byte_len, 12u);
  EXPECT_EQ(std::memcmp(b.buf.data(), "sent from dm", 12), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

// ibv_import_dm(3): a context imported from a dup of the cmd_fd reaches the DM by
// its handle; both handles see the same memory. The allocated DM cannot be freed
// while a handle is imported on it or an MR (through either handle) is on it;
// unimport releases the imported handle and leaves the DM.
TEST(DeviceMemory, ImportedHandleSharesTheMemory) {
  Device dev;
  ibv_context* imported = ibv_import_device(dup(dev.ctx()->cmd_fd));
  ASSERT_NE(imported, nullptr) << "errno " << errno;
  ibv_dm* dm = alloc(dev.ctx(), 128);
  ASSERT_NE(dm, nullptr);
  ASSERT_TRUE(dm->comp_mask & IBV_DM_MASK_HANDLE);
  ibv_dm* copy = ibv_import_dm(imported, dm->handle);
  ASSERT_NE(copy, nullptr) << "errno " << errno;
  EXPECT_EQ(copy->context, imported);
  EXPECT_EQ(copy->handle, dm->handle);
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 16, "written by one!!", 16), 0);
  char back[16] = {};
  ASSERT_EQ(ibv_memcpy_from_dm(back, copy, 16, 16), 0);
  EXPECT_EQ(std::memcmp(back, "written by one!!", 16), 0);
  EXPECT_EQ(ibv_memcpy_from_dm(back, copy, 128, 4), EINVAL);  // the same bounds

  EXPECT_EQ(ibv_free_dm(dm), EBUSY) << "a handle is imported on it";
  EXPECT_EQ(ibv_free_dm(copy), EBUSY) << "the allocated handle still exists";
  ibv_pd* pd = ibv_alloc_pd(imported);
  ASSERT_NE(pd, nullptr);
  ibv_mr* mr = ibv_reg_dm_mr(pd, copy, 0, 128, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  ibv_unimport_dm(copy);
  EXPECT_EQ(ibv_free_dm(dm), EBUSY) << "an MR made through the import is still on it";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(imported), 0);
}

// Unknown handles and a null context are EINVAL; a freed DM cannot be imported;
// unimport of an allocated (not imported) DM leaves it.
TEST(DeviceMemory, ImportErrors) {
  Device dev;
  ibv_dm* dm = alloc(dev.ctx(), 64);
  ASSERT_NE(dm, nullptr);
  const uint32_t handle = dm->handle;
  errno = 0;
  EXPECT_EQ(ibv_import_dm(nullptr, handle), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_import_dm(dev.ctx(), handle + 100000), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_unimport_dm(dm);  // not imported: nothing happens
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 0, "live", 4), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
  errno = 0;
  EXPECT_EQ(ibv_import_dm(dev.ctx(), handle), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softrdma::verbs::testing
