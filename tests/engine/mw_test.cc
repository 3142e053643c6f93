// Memory windows in the key table (IBA 10.6.7; engine/mw.h): what a bind and an
// invalidation must satisfy, and how a window's R_Key reaches memory.
#include "engine/mw.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "engine/mr.h"
#include "engine/pd.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;

constexpr uint32_t kQpn = 0x42;
constexpr uint32_t kOtherQpn = 0x43;
constexpr int kBindable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

class MwTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = net_.attach(fake::ipv4_gid(10, 0, 0, 1));
    device_ = std::make_unique<Device>(DeviceConfig{}, *transport_, roce::RoceFamily::maker());
    int err = 0;
    pd_ = device_->alloc_pd(err);
    other_pd_ = device_->alloc_pd(err);
    ASSERT_NE(pd_, nullptr);
    ASSERT_NE(other_pd_, nullptr);
    buf_.assign(4096, 0);
    mr_ = reg(kBindable);
  }

  Mr* reg(int access, Pd* pd = nullptr) {
    int err = 0;
    Mr* mr = device_->reg_mr(pd != nullptr ? pd : pd_, buf_.data(), buf_.size(),
                             uintptr_t(buf_.data()), access, err);
    EXPECT_NE(mr, nullptr) << "errno " << err;
    return mr;
  }

  Mw* alloc(ibv_mw_type type, Pd* pd = nullptr) {
    int err = 0;
    Mw* mw = device_->alloc_mw(pd != nullptr ? pd : pd_, type, err);
    EXPECT_NE(mw, nullptr) << "errno " << err;
    return mw;
  }

  // A bind of [offset, offset + length) of `mr`, the window's key moved on by one.
  MwBind bind_of(const Mw& mw, const Mr& mr, uint64_t offset, uint64_t length, int access) {
    MwBind b;
    b.window_rkey = mw.rkey;
    b.new_rkey = ibv_inc_rkey(mw.rkey);
    b.mr_key = mr.key;
    b.has_mr = true;
    b.by_bind_verb = mw.type == IBV_MW_TYPE_1;
    b.addr = mr.iova + offset;
    b.length = length;
    b.access = access;
    return b;
  }

  uint8_t* remote(uint32_t rkey, uint64_t va, uint64_t len, int need, uint32_t qpn,
                  AccessError& why) {
    return device_->mrs().access().resolve_remote(rkey, pd_, qpn, va, len, need, why);
  }

  uint64_t va(size_t offset) const { return uint64_t(uintptr_t(buf_.data() + offset)); }

  fake::FakeNetwork net_;
  std::unique_ptr<fake::FakeTransport> transport_;
  std::unique_ptr<Device> device_;
  Pd* pd_ = nullptr;
  Pd* other_pd_ = nullptr;
  std::vector<uint8_t> buf_;
  Mr* mr_ = nullptr;
};

// IBA 10.6.7.2: the window's R_Key is its index (upper 24 bits) and a key byte;
// windows and MRs never share an index, so an R_Key names one object.
TEST_F(MwTest, WindowsGetDistinctIndicesApartFromMrKeys) {
  std::vector<Mw*> windows;
  for (int i = 0; i < 200; ++i) windows.push_back(alloc(i % 2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1));
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_NE(mw_index(windows[i]->rkey), 0u);
    EXPECT_NE(mw_index(windows[i]->rkey), mw_index(mr_->key));
    for (size_t j = i + 1; j < windows.size(); ++j)
      EXPECT_NE(mw_index(windows[i]->rkey), mw_index(windows[j]->rkey));
  }
  int err = 0;
  EXPECT_EQ(device_->alloc_mw(pd_, ibv_mw_type(3), err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

// A bound type 1 window reaches the MR's memory with its own rights and range,
// from any QP of its PD; an unbound one reaches nothing.
TEST_F(MwTest, Type1WindowGrantsItsRangeAndRights) {
  Mw* mw = alloc(IBV_MW_TYPE_1);
  AccessError why;
  EXPECT_EQ(remote(mw->rkey, va(0), 8, IBV_ACCESS_REMOTE_WRITE, kQpn, why), nullptr);
  const MwBind b = bind_of(*mw, *mr_, 1024, 512, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(device_->mrs().bind(b, pd_, kQpn));
  EXPECT_EQ(mw->rkey, b.new_rkey);
  EXPECT_EQ(remote(b.new_rkey, va(1024), 512, IBV_ACCESS_REMOTE_WRITE, kOtherQpn, why),
            buf_.data() + 1024);
  EXPECT_EQ(remote(b.window_rkey, va(1024), 8, IBV_ACCESS_REMOTE_WRITE, kQpn, why), nullptr);
  EXPECT_EQ(why, AccessError::kBadKey);  // the key before the bind
  EXPECT_EQ(remote(b.new_rkey, va(1023), 8, IBV_ACCESS_REMOTE_WRITE, kQpn, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(remote(b.new_rkey, va(1530), 8, IBV_ACCESS_REMOTE_WRITE, kQpn, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  EXPECT_EQ(remote(b.new_rkey, va(1024), 8, IBV_ACCESS_REMOTE_READ, kQpn, why), nullptr);
  EXPECT_EQ(why, AccessError::kNoPermission);
  // An R_Key is not an L_Key.
  EXPECT_EQ(device_->mrs().access().resolve(b.new_rkey, pd_, va(1024), 8, 0, why), nullptr);
}

// ibv_alloc_mw(3): a type 1 window bound with zero length is invalidated; it can be
// bound again by ibv_bind_mw only (never by a posted WR, never zero based).
TEST_F(MwTest, Type1ZeroLengthBindInvalidates) {
  Mw* mw = alloc(IBV_MW_TYPE_1);
  MwBind b = bind_of(*mw, *mr_, 0, 64, IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(device_->mrs().bind(b, pd_, kQpn));
  EXPECT_EQ(mr_->windows, 1u);
  b = bind_of(*mw, *mr_, 0, 0, 0);
  ASSERT_TRUE(device_->mrs().bind(b, pd_, kQpn));
  EXPECT_EQ(mr_->windows, 0u);
  AccessError why;
  EXPECT_EQ(remote(mw->rkey, va(0), 8, IBV_ACCESS_REMOTE_READ, kQpn, why), nullptr);
  b = bind_of(*mw, *mr_, 0, 64, IBV_ACCESS_REMOTE_READ);
  b.by_bind_verb = false;
  EXPECT_FALSE(device_->mrs().bind(b, pd_, kQpn));
  b = bind_of(*mw, *mr_, 0, 64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED);
  EXPECT_FALSE(device_->mrs().bind(b, pd_, kQpn));
  // A type 1 window is not invalidated by an invalidate operation.
  ASSERT_TRUE(device_->mrs().bind(bind_of(*mw, *mr_, 0, 64, IBV_ACCESS_REMOTE_READ), pd_, kQpn));
  EXPECT_FALSE(device_->mrs().invalidate(mw->rkey, pd_, kQpn, false));
}

// IBA 10.6.7.2.2 (type 2B): bound through a QP, reachable from that QP only, zero
// based if asked, bound again only once invalidated.
TEST_F(MwTest, Type2WindowBelongsToItsQp) {
  Mw* mw = alloc(IBV_MW_TYPE_2);
  const MwBind b =
      bind_of(*mw, *mr_, 256, 256, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED);
  ASSERT_TRUE(device_->mrs().bind(b, pd_, kQpn));
  AccessError why;
  EXPECT_EQ(remote(b.new_rkey, 16, 8, IBV_ACCESS_REMOTE_WRITE, kQpn, why), buf_.data() + 272);
  EXPECT_EQ(remote(b.new_rkey, 16, 8, IBV_ACCESS_REMOTE_WRITE, kOtherQpn, why), nullptr);
  EXPECT_EQ(why, AccessError::kWrongPd);
  EXPECT_EQ(remote(b.new_rkey, 250, 8, IBV_ACCESS_REMOTE_WRITE, kQpn, why), nullptr);
  EXPECT_EQ(why, AccessError::kOutOfBounds);
  MwBind again = bind_of(*mw, *mr_, 0, 64, IBV_ACCESS_REMOTE_WRITE);
  EXPECT_FALSE(device_->mrs().bind(again, pd_, kQpn));  // o10-37.2.30: not while bound
}

// What a bind refuses (IBA C10-72..C10-76): the QP's PD, an MR of the window's PD
// registered with MW_BIND, local write under remote write/atomic, the MR's range,
// the window's own index under the new key.
TEST_F(MwTest, BindRefusesWhatIbaForbids) {
  Mw* mw = alloc(IBV_MW_TYPE_2);
  MwBind b = bind_of(*mw, *mr_, 0, 64, IBV_ACCESS_REMOTE_WRITE);
  EXPECT_FALSE(device_->mrs().bind(b, other_pd_, kQpn));  // the QP's PD is another
  Mr* unbindable = reg(IBV_ACCESS_LOCAL_WRITE);
  EXPECT_FALSE(device_->mrs().bind(bind_of(*mw, *unbindable, 0, 64, 0), pd_, kQpn));
  Mr* read_only = reg(IBV_ACCESS_MW_BIND);
  EXPECT_FALSE(device_->mrs().bind(bind_of(*mw, *read_only, 0, 64, IBV_ACCESS_REMOTE_WRITE),
                                   pd_, kQpn));
  EXPECT_TRUE(device_->mrs().bind(bind_of(*mw, *read_only, 0, 64, IBV_ACCESS_REMOTE_READ),
                                  pd_, kQpn));
  Mw* other = alloc(IBV_MW_TYPE_2);
  EXPECT_FALSE(device_->mrs().bind(bind_of(*other, *mr_, 4000, 200, 0), pd_, kQpn));
  b = bind_of(*other, *mr_, 0, 64, 0);
  b.new_rkey ^= 1u << 8;  // another window's index
  EXPECT_FALSE(device_->mrs().bind(b, pd_, kQpn));
  EXPECT_FALSE(device_->mrs().bind(bind_of(*other, *mr_, 0, 0, 0), pd_, kQpn));  // empty
  Mr* foreign = reg(kBindable, other_pd_);
  EXPECT_FALSE(device_->mrs().bind(bind_of(*other, *foreign, 0, 64, 0), pd_, kQpn));
}

// IBA 10.6.7.2.3: invalidation frees a type 2 window; from a peer only when it is
// the QP the window was bound through. An MR's key is never invalidated.
TEST_F(MwTest, InvalidationRules) {
  Mw* mw = alloc(IBV_MW_TYPE_2);
  const MwBind b = bind_of(*mw, *mr_, 0, 64, IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(device_->mrs().bind(b, pd_, kQpn));
  EXPECT_FALSE(device_->mrs().invalidate(mr_->key, pd_, kQpn, false));
  EXPECT_FALSE(device_->mrs().invalidate(b.new_rkey ^ 1, pd_, kQpn, false));  // key byte
  EXPECT_FALSE(device_->mrs().invalidate(b.new_rkey, other_pd_, kQpn, false));
  EXPECT_FALSE(device_->mrs().invalidate(b.new_rkey, pd_, kOtherQpn, true));
  const uint64_t generation = device_->mrs().generation();
  EXPECT_TRUE(device_->mrs().invalidate(b.new_rkey, pd_, kQpn, true));
  EXPECT_GT(device_->mrs().generation(), generation);  // cached translations go
  AccessError why;
  EXPECT_EQ(remote(b.new_rkey, va(0), 8, IBV_ACCESS_REMOTE_READ, kQpn, why), nullptr);
  EXPECT_FALSE(device_->mrs().invalidate(b.new_rkey, pd_, kQpn, false));  // already Free
  // Free again: it may be bound anew, under a new key.
  EXPECT_TRUE(device_->mrs().bind(bind_of(*mw, *mr_, 0, 64, 0), pd_, kQpn));
}

// ibv_alloc_mw(3): "ibv_dereg_mr() fails if any memory window is still bound to
// this MR"; deallocating the window unbinds it; a PD with windows is busy.
TEST_F(MwTest, BoundWindowsHoldTheirMrAndPd) {
  Mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_TRUE(device_->mrs().bind(bind_of(*mw, *mr_, 0, 64, 0), pd_, kQpn));
  EXPECT_EQ(device_->dereg_mr(mr_), EBUSY);
  EXPECT_EQ(device_->dealloc_pd(pd_), EBUSY);
  const uint32_t rkey = mw->rkey;
  EXPECT_EQ(device_->dealloc_mw(mw), 0);
  AccessError why;
  EXPECT_EQ(remote(rkey, va(0), 8, 0, kQpn, why), nullptr);
  EXPECT_EQ(device_->dereg_mr(mr_), 0);
  mr_ = nullptr;
  // A bind posted before the window went finds nothing.
  MwBind late;
  late.window_rkey = rkey;
  late.new_rkey = rkey + 1;
  EXPECT_FALSE(device_->mrs().bind(late, pd_, kQpn));
}

// On-demand paging (docs/decisions/odp.md): registration does not look at the
// pages; an implicit MR is the whole address space, addressed by virtual address.
TEST_F(MwTest, OnDemandRegistrationLeavesThePagesAlone) {
  int err = 0;
  std::vector<uint8_t> other(64, 7);
  Mr* implicit = device_->reg_mr(pd_, nullptr, SIZE_MAX, 0,
                                 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE, err);
  ASSERT_NE(implicit, nullptr) << "errno " << err;
  AccessError why;
  EXPECT_EQ(device_->mrs().access().resolve(implicit->key, pd_, uintptr_t(other.data()), 64,
                                            IBV_ACCESS_LOCAL_WRITE, why),
            other.data());
  EXPECT_EQ(device_->reg_mr(pd_, nullptr, SIZE_MAX, 0, IBV_ACCESS_LOCAL_WRITE, err), nullptr);
  EXPECT_EQ(err, EINVAL);  // implicit needs IBV_ACCESS_ON_DEMAND
  // ibv_advise_mr(3) prefetch checks (MrTable::check_prefetch).
  const auto& mrs = device_->mrs();
  EXPECT_EQ(mrs.check_prefetch(implicit->key, pd_, uintptr_t(other.data()), 64, true), 0);
  EXPECT_EQ(mrs.check_prefetch(implicit->key + 1, pd_, 0, 64, false), EFAULT);
  EXPECT_EQ(mrs.check_prefetch(implicit->key, other_pd_, 0, 64, false), EPERM);
  EXPECT_EQ(mrs.check_prefetch(mr_->key, pd_, va(0), 64, false), EINVAL);  // not ODP
  Mr* odp = reg(IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(mrs.check_prefetch(odp->key, pd_, va(0), 64, true), EPERM);  // not writable
  EXPECT_EQ(mrs.check_prefetch(odp->key, pd_, va(4000), 200, false), EFAULT);
}

}  // namespace
}  // namespace softrdma::engine
