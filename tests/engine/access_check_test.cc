// The one access check (engine/access_check.h) alone: each rule of IBA 10.2.4.2,
// 9.4.5, 10.6.3 and 10.6.7.3 refused with the verdict the responder's NAK carries,
// for a key of this process (an Mr or a bound Mw) and for the same key as a
// same-host peer sees it (a published samehost::KeyGrant).
#include "engine/roce/family.h"
#include "engine/access_check.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "engine/device.h"
#include "engine/pd.h"
#include "samehost/node_segment.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;

constexpr uint32_t kQpn = 0x42;
constexpr uint32_t kOtherQpn = 0x43;
constexpr uint64_t kMaxMsg = 1u << 20;
constexpr uint64_t kBase = 0x10000;
constexpr uint64_t kLength = 4096;
constexpr int kRemoteAll =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// What a key is, whichever process holds it.
struct KeySpec {
  bool other_pd = false;
  int access = IBV_ACCESS_LOCAL_WRITE | kRemoteAll;
  bool window = false;
  ibv_mw_type type = IBV_MW_TYPE_1;
  uint32_t bound_qpn = 0;  // a type 2 window's QP
  bool zero_based = false;
};

enum class Source { kLocal, kGranted };

class AccessCheckTest : public ::testing::TestWithParam<Source> {
 protected:
  void SetUp() override {
    transport_ = net_.attach(fake::ipv4_gid(10, 0, 0, 1));
    device_ = std::make_unique<Device>(DeviceConfig{}, *transport_, roce::RoceFamily::maker());
    int err = 0;
    pd_ = device_->alloc_pd(err);
    other_pd_ = device_->alloc_pd(err);
    ASSERT_NE(pd_, nullptr);
    ASSERT_NE(other_pd_, nullptr);
  }

  // The key as the check sees it: built from an Mr / Mw, or from the grant its
  // owner would publish for it (MrTable::publish).
  KeyView key(const KeySpec& s) {
    Pd* pd = s.other_pd ? other_pd_ : pd_;
    const uint64_t named = s.zero_based ? 0 : kBase;
    if (GetParam() == Source::kGranted) {
      samehost::KeyGrant g{};
      g.host_addr = 0x7f0000000000;
      g.iova = named;
      g.length = kLength;
      g.pd = pd->handle();
      g.access = uint32_t(s.access);
      g.qpn = s.window && s.type == IBV_MW_TYPE_2 ? s.bound_qpn : 0;
      return KeyView::of(g);
    }
    if (!s.window) {
      mr_.pd = pd;
      mr_.iova = named;
      mr_.length = kLength;
      mr_.access = s.access;
      return KeyView::of(mr_);
    }
    mw_.pd = pd;
    mw_.type = s.type;
    mw_.rkey = 0x1234;
    mw_.bound = true;
    mw_.va = kBase;
    mw_.length = kLength;
    mw_.access = s.access | (s.zero_based ? IBV_ACCESS_ZERO_BASED : 0);
    mw_.qpn = s.bound_qpn;
    KeyView view;
    EXPECT_TRUE(KeyView::of(mw_, mw_.rkey, view));
    return view;
  }

  // The PD a request must find, in the same source's terms.
  uint64_t qp_pd() const { return GetParam() == Source::kGranted ? pd_->handle() : pd_id(pd_); }
  RemoteAccess request(int need, uint64_t va, uint64_t length, uint32_t qpn = kQpn) const {
    return RemoteAccess{need, va, length, qp_pd(), qpn};
  }

  Verdict decide(const KeySpec& s, const RemoteAccess& r, uint32_t qp_access = kRemoteAll,
                 bool atomic = false) {
    const KeyView view = key(s);
    uint64_t offset = 0;
    return check_remote_access(qp_access, kMaxMsg, atomic, r, &view, offset);
  }
  AccessError why(const KeySpec& s, const RemoteAccess& r) {
    const KeyView view = key(s);
    uint64_t offset = 0;
    return check_key(&view, r, offset);
  }

  fake::FakeNetwork net_;
  std::unique_ptr<fake::FakeTransport> transport_;
  std::unique_ptr<Device> device_;
  Pd* pd_ = nullptr;
  Pd* other_pd_ = nullptr;
  Mr mr_;
  Mw mw_;
};

TEST_P(AccessCheckTest, ARequestWithinTheKeyIsAllowedAtItsOffset) {
  const KeyView view = key({});
  uint64_t offset = 0;
  EXPECT_EQ(check_remote_access(kRemoteAll, kMaxMsg, false,
                                request(IBV_ACCESS_REMOTE_WRITE, kBase + 100, 200), &view, offset),
            Verdict::kDone);
  EXPECT_EQ(offset, 100u);
  // The last byte of the key is in it.
  EXPECT_EQ(check_key(&view, request(IBV_ACCESS_REMOTE_READ, kBase + kLength - 1, 1), offset),
            AccessError::kNone);
  EXPECT_EQ(offset, kLength - 1);
}

TEST_P(AccessCheckTest, AQpWithoutTheRightIsAnInvalidRequest) {
  // IBA 10.2.4.2: the QP's qp_access_flags come first, whatever the key allows.
  EXPECT_EQ(decide({}, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8), IBV_ACCESS_REMOTE_READ),
            Verdict::kInvalidRequest);
  EXPECT_EQ(decide({}, request(IBV_ACCESS_REMOTE_READ, kBase, 8), IBV_ACCESS_REMOTE_WRITE),
            Verdict::kInvalidRequest);
  EXPECT_EQ(decide({}, request(IBV_ACCESS_REMOTE_ATOMIC, kBase, 8), IBV_ACCESS_REMOTE_WRITE, true),
            Verdict::kInvalidRequest);
  EXPECT_FALSE(qp_allows(0, IBV_ACCESS_REMOTE_READ));
  EXPECT_TRUE(qp_allows(kRemoteAll, IBV_ACCESS_REMOTE_ATOMIC));
}

TEST_P(AccessCheckTest, AMessageLongerThanMaxMsgSizeIsAnInvalidRequest) {
  KeySpec huge;
  EXPECT_EQ(decide(huge, request(IBV_ACCESS_REMOTE_READ, kBase, kMaxMsg + 1)),
            Verdict::kInvalidRequest);
  EXPECT_EQ(check_message(request(IBV_ACCESS_REMOTE_READ, kBase, kMaxMsg), kMaxMsg, false),
            Verdict::kDone);
}

TEST_P(AccessCheckTest, AnUnalignedAtomicIsAnInvalidRequest) {
  // IBA 9.4.5 (o9-13), before the key: an access error would be the wrong NAK.
  EXPECT_EQ(decide({}, request(IBV_ACCESS_REMOTE_ATOMIC, kBase + 4, 8), kRemoteAll, true),
            Verdict::kInvalidRequest);
  EXPECT_EQ(decide({}, request(IBV_ACCESS_REMOTE_ATOMIC, kBase + 8, 8), kRemoteAll, true),
            Verdict::kDone);
}

TEST_P(AccessCheckTest, NoKeyIsARemoteAccessError) {
  uint64_t offset = 0;
  EXPECT_EQ(check_key(nullptr, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8), offset),
            AccessError::kBadKey);
  EXPECT_EQ(check_remote_access(kRemoteAll, kMaxMsg, false,
                                request(IBV_ACCESS_REMOTE_WRITE, kBase, 8), nullptr, offset),
            Verdict::kRemoteAccess);
}

TEST_P(AccessCheckTest, AZeroLengthMessageNeedsNoKey) {
  uint64_t offset = 1;
  EXPECT_EQ(check_remote_access(kRemoteAll, kMaxMsg, false,
                                request(IBV_ACCESS_REMOTE_READ, 0xdead, 0), nullptr, offset),
            Verdict::kDone);
  EXPECT_EQ(offset, 0u);
}

TEST_P(AccessCheckTest, AKeyOfAnotherPdIsARemoteAccessError) {
  KeySpec s;
  s.other_pd = true;
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8)), AccessError::kWrongPd);
  EXPECT_EQ(decide(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8)), Verdict::kRemoteAccess);
}

TEST_P(AccessCheckTest, AKeyWithoutTheRightIsARemoteAccessError) {
  KeySpec s;
  s.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8)), AccessError::kNoPermission);
  EXPECT_EQ(decide(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8)), Verdict::kRemoteAccess);
  EXPECT_EQ(decide(s, request(IBV_ACCESS_REMOTE_ATOMIC, kBase, 8), kRemoteAll, true),
            Verdict::kRemoteAccess);
  EXPECT_EQ(decide(s, request(IBV_ACCESS_REMOTE_READ, kBase, 8)), Verdict::kDone);
}

TEST_P(AccessCheckTest, ARangeOutsideTheKeyIsARemoteAccessError) {
  const KeySpec s;
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_READ, kBase - 1, 8)), AccessError::kOutOfBounds);
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_READ, kBase + kLength - 7, 8)),
            AccessError::kOutOfBounds);
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_READ, kBase, kLength + 1)), AccessError::kOutOfBounds);
  // A range whose end wraps past 2^64 is not taken for a short one.
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_READ, kBase + 8, UINT64_MAX - 4)),
            AccessError::kOutOfBounds);
  EXPECT_EQ(decide(s, request(IBV_ACCESS_REMOTE_READ, kBase + kLength, 1)), Verdict::kRemoteAccess);
}

TEST_P(AccessCheckTest, AType2WindowServesOnlyTheQpItWasBoundThrough) {
  // IBA 10.6.7.2.2 / 10.6.7.3: type 2B.
  KeySpec s;
  s.window = true;
  s.type = IBV_MW_TYPE_2;
  s.bound_qpn = kQpn;
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8)), AccessError::kNone);
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8, kOtherQpn)), AccessError::kWrongPd);
  EXPECT_EQ(decide(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8, kOtherQpn)),
            Verdict::kRemoteAccess);
}

TEST_P(AccessCheckTest, AType1WindowServesEveryQpOfItsPd) {
  KeySpec s;
  s.window = true;
  s.type = IBV_MW_TYPE_1;
  EXPECT_EQ(why(s, request(IBV_ACCESS_REMOTE_WRITE, kBase, 8, kOtherQpn)), AccessError::kNone);
}

TEST_P(AccessCheckTest, AZeroBasedWindowIsNamedFromZero) {
  KeySpec s;
  s.window = true;
  s.type = IBV_MW_TYPE_2;
  s.bound_qpn = kQpn;
  s.zero_based = true;
  const KeyView view = key(s);
  uint64_t offset = 0;
  EXPECT_EQ(check_key(&view, request(IBV_ACCESS_REMOTE_READ, 16, 8), offset), AccessError::kNone);
  EXPECT_EQ(offset, 16u);
  EXPECT_EQ(check_key(&view, request(IBV_ACCESS_REMOTE_READ, kLength, 1), offset),
            AccessError::kOutOfBounds);
}

INSTANTIATE_TEST_SUITE_P(KeySources, AccessCheckTest,
                         ::testing::Values(Source::kLocal, Source::kGranted), [](const auto& info) {
                           return info.param == Source::kLocal ? "MrOrMw" : "PublishedGrant";
                         });

// IBA 10.6.7.1: a window that is not Valid, or named by a key it is no longer
// bound under, has no rights at all: no view of it.
TEST(AccessCheckWindow, AFreeWindowOrAStaleKeyGivesNoView) {
  Mw mw;
  mw.rkey = 0x1234;
  mw.bound = false;
  KeyView view;
  EXPECT_FALSE(KeyView::of(mw, 0x1234, view));
  mw.bound = true;
  EXPECT_FALSE(KeyView::of(mw, 0x1235, view));
  EXPECT_TRUE(KeyView::of(mw, 0x1234, view));
}

}  // namespace
}  // namespace softrdma::engine
