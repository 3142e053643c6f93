// Gather/scatter lists (IBA 10.7.2 / ibv_post_send(3) sg_list): message bytes are
// copied across several SGEs, each checked through the MR table when touched.
#include "engine/sgl.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "engine/device.h"
#include "engine/roce/family.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine {
namespace {

namespace fake = transport::fake;

class SglTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = net_.attach(fake::ipv4_gid(10, 0, 0, 1));
    device_ = std::make_unique<Device>(DeviceConfig{}, *transport_, roce::RoceFamily::maker());
    int err = 0;
    pd_ = device_->alloc_pd(err);
    other_pd_ = device_->alloc_pd(err);
    // Three separate buffers, three MRs (one with an iova of its own).
    for (size_t i = 0; i < 3; ++i) {
      bufs_[i].assign(64, 0);
      for (size_t j = 0; j < 64; ++j) bufs_[i][j] = uint8_t(i * 64 + j);
      const uint64_t iova = i == 2 ? 0x7000000 : addr(i, 0);
      mrs_[i] = device_->reg_mr(pd_, bufs_[i].data(), 64, iova, IBV_ACCESS_LOCAL_WRITE, err);
      ASSERT_NE(mrs_[i], nullptr);
    }
  }

  uint64_t addr(size_t buf, size_t offset) const {
    return buf == 2 ? 0x7000000 + offset : uint64_t(uintptr_t(bufs_[buf].data() + offset));
  }
  Sge sge(size_t buf, size_t offset, uint32_t length) const {
    return Sge{addr(buf, offset), length, mrs_[buf]->key};
  }

  bool gather_into(const std::vector<Sge>& list, uint64_t offset, std::vector<uint8_t>& out,
                   const Pd* pd = nullptr) {
    std::vector<Sge> copy = list;
    SgeList sgl{copy.data(), uint32_t(copy.size())};
    auto access = device_->mrs().access();
    return gather(access, pd != nullptr ? pd : pd_, sgl, offset, out);
  }
  bool scatter_from(const std::vector<Sge>& list, uint64_t offset,
                    const std::vector<uint8_t>& data, const Pd* pd = nullptr) {
    std::vector<Sge> copy = list;
    SgeList sgl{copy.data(), uint32_t(copy.size())};
    auto access = device_->mrs().access();
    return scatter(access, pd != nullptr ? pd : pd_, sgl, offset, data);
  }

  fake::FakeNetwork net_;
  std::unique_ptr<fake::FakeTransport> transport_;
  std::unique_ptr<Device> device_;
  Pd* pd_ = nullptr;
  Pd* other_pd_ = nullptr;
  std::vector<uint8_t> bufs_[3];
  Mr* mrs_[3] = {};
};

// The message is the SGEs' bytes in list order (IBA 10.7.2.1); gather reads them in
// one go and from any message offset, also across SGE boundaries.
TEST_F(SglTest, GatherAcrossSeveralSges) {
  const std::vector<Sge> list = {sge(0, 10, 5), sge(1, 0, 7), sge(2, 60, 4)};
  std::vector<uint8_t> expect;
  for (int j = 10; j < 15; ++j) expect.push_back(uint8_t(j));
  for (int j = 0; j < 7; ++j) expect.push_back(uint8_t(64 + j));
  for (int j = 60; j < 64; ++j) expect.push_back(uint8_t(128 + j));
  SgeList view{const_cast<Sge*>(list.data()), 3};
  EXPECT_EQ(total_length(view), 16u);

  std::vector<uint8_t> out(16);
  ASSERT_TRUE(gather_into(list, 0, out));
  EXPECT_EQ(out, expect);

  for (uint64_t offset = 0; offset <= 16; ++offset) {
    for (size_t len = 0; offset + len <= 16; ++len) {
      std::vector<uint8_t> part(len, 0xee);
      ASSERT_TRUE(gather_into(list, offset, part)) << offset << "+" << len;
      EXPECT_TRUE(std::equal(part.begin(), part.end(), expect.begin() + long(offset)))
          << offset << "+" << len;
    }
  }
}

// Scatter writes the message into the SGEs in order, from any offset, across
// boundaries, and touches nothing outside them.
TEST_F(SglTest, ScatterAcrossSeveralSges) {
  const std::vector<Sge> list = {sge(0, 4, 3), sge(1, 10, 2), sge(2, 0, 5)};
  std::vector<uint8_t> data(10);
  std::iota(data.begin(), data.end(), uint8_t(200));
  const auto before = bufs_[0];
  ASSERT_TRUE(scatter_from(list, 0, data));
  EXPECT_EQ(bufs_[0][3], before[3]);
  EXPECT_EQ(bufs_[0][4], 200);
  EXPECT_EQ(bufs_[0][6], 202);
  EXPECT_EQ(bufs_[0][7], before[7]);
  EXPECT_EQ(bufs_[1][9], 64 + 9);
  EXPECT_EQ(bufs_[1][10], 203);
  EXPECT_EQ(bufs_[1][11], 204);
  EXPECT_EQ(bufs_[1][12], 64 + 12);
  EXPECT_EQ(bufs_[2][0], 205);
  EXPECT_EQ(bufs_[2][4], 209);
  EXPECT_EQ(bufs_[2][5], 128 + 5);

  // A later packet of the same message lands at its offset (segmented SEND).
  ASSERT_TRUE(scatter_from(list, 2, std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(bufs_[0][6], 1);
  EXPECT_EQ(bufs_[1][10], 2);
  EXPECT_EQ(bufs_[1][11], 3);
  EXPECT_EQ(bufs_[2][0], 4);
  EXPECT_EQ(bufs_[2][1], 206);
}

// Zero-length SGEs contribute nothing and are stepped over.
TEST_F(SglTest, ZeroLengthSgesAreSkipped) {
  const std::vector<Sge> list = {sge(0, 0, 0), sge(0, 1, 2), sge(1, 5, 0), sge(1, 0, 2),
                                 sge(2, 0, 0)};
  std::vector<uint8_t> out(4);
  ASSERT_TRUE(gather_into(list, 0, out));
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 2, 64, 65}));
  std::vector<uint8_t> empty;
  EXPECT_TRUE(gather_into({}, 0, empty)) << "an empty message from an empty list";
}

// A message longer than the list, or an offset past its end, fails (IBA 10.7.2.1;
// the caller reports IBV_WC_LOC_LEN_ERR, ibv_poll_cq(3)).
TEST_F(SglTest, MessageLongerThanListFails) {
  const std::vector<Sge> list = {sge(0, 0, 4), sge(1, 0, 4)};
  std::vector<uint8_t> nine(9);
  EXPECT_FALSE(gather_into(list, 0, nine));
  std::vector<uint8_t> two(2);
  EXPECT_FALSE(gather_into(list, 7, two));
  EXPECT_FALSE(gather_into(list, 100, two));
  EXPECT_FALSE(scatter_from(list, 0, std::vector<uint8_t>(9, 1)));
  EXPECT_FALSE(scatter_from(list, 8, std::vector<uint8_t>(1, 1)));
  EXPECT_TRUE(scatter_from(list, 7, std::vector<uint8_t>(1, 1)));
}

// Each SGE is checked: a bad lkey, another PD's MR, or an SGE reaching past its MR
// fails the copy (IBA 10.6.3.3 / 10.7.2.1; IBV_WC_LOC_PROT_ERR at the caller).
TEST_F(SglTest, EverySgeIsChecked) {
  std::vector<uint8_t> out(8);
  std::vector<Sge> list = {sge(0, 0, 4), sge(1, 0, 4)};
  list[1].lkey ^= 0x1;
  EXPECT_FALSE(gather_into(list, 0, out)) << "bad lkey";
  EXPECT_FALSE(scatter_from(list, 0, out)) << "bad lkey";

  list = {sge(0, 0, 4), sge(1, 0, 4)};
  EXPECT_FALSE(gather_into(list, 0, out, other_pd_)) << "another PD";

  list = {sge(0, 0, 4), sge(1, 62, 4)};  // two bytes past the end of MR 1
  EXPECT_FALSE(gather_into(list, 0, out)) << "out of bounds";
  EXPECT_FALSE(scatter_from(list, 0, out)) << "out of bounds";
  std::vector<uint8_t> six(6);
  EXPECT_TRUE(gather_into(list, 0, six)) << "the part inside the MR is fine";

  list = {sge(0, 0, 4), Sge{addr(1, 0) - 1, 4, mrs_[1]->key}};
  EXPECT_FALSE(gather_into(list, 0, out)) << "starts before the MR";
}

// Gathering needs only local read (always granted); scattering needs local write
// (ibv_reg_mr(3): "Local read access is always enabled").
TEST_F(SglTest, ScatterNeedsLocalWrite) {
  int err = 0;
  std::vector<uint8_t> ro_buf(16, 7);
  Mr* ro = device_->reg_mr(pd_, ro_buf.data(), ro_buf.size(), uint64_t(uintptr_t(ro_buf.data())),
                           IBV_ACCESS_REMOTE_READ, err);
  ASSERT_NE(ro, nullptr);
  const std::vector<Sge> list = {Sge{uint64_t(uintptr_t(ro_buf.data())), 16, ro->key}};
  std::vector<uint8_t> out(16);
  EXPECT_TRUE(gather_into(list, 0, out));
  EXPECT_EQ(out, ro_buf);
  EXPECT_FALSE(scatter_from(list, 0, std::vector<uint8_t>(16, 9)));
  EXPECT_EQ(ro_buf, std::vector<uint8_t>(16, 7));
}

// An SGE whose MR was deregistered no longer resolves (revocation is immediate).
TEST_F(SglTest, DeregisteredMrFails) {
  const std::vector<Sge> list = {sge(0, 0, 4), sge(1, 0, 4)};
  std::vector<uint8_t> out(8);
  ASSERT_TRUE(gather_into(list, 0, out));
  ASSERT_EQ(device_->dereg_mr(mrs_[1]), 0);
  EXPECT_FALSE(gather_into(list, 0, out));
  std::vector<uint8_t> four(4);
  EXPECT_TRUE(gather_into(list, 0, four)) << "the first SGE alone still resolves";
}

// total_length sums the SGE lengths in 64 bits (32 SGEs of 4 GiB-1 do not wrap).
TEST_F(SglTest, TotalLengthDoesNotWrap) {
  std::vector<Sge> list(32, Sge{0, 0xffffffffu, 1});
  SgeList sgl{list.data(), uint32_t(list.size())};
  EXPECT_EQ(total_length(sgl), 32ull * 0xffffffffull);
  SgeList none{};
  EXPECT_EQ(total_length(none), 0u);
}

}  // namespace
}  // namespace softrdma::engine
