// 24-bit PSN arithmetic (IBA 9.7.1): modulo 2^24, compared within half the space.
#include "wire/psn.h"

#include <gtest/gtest.h>

#include <random>

namespace softrdma::wire {
namespace {

constexpr uint32_t kHalf = 1u << 23;

TEST(PsnTest, AddWrapsAtTwoToThe24) {
  EXPECT_EQ(psn_add(0xfffff8, 8), 0u);
  EXPECT_EQ(psn_add(0xfffff8, 12), 4u);
  EXPECT_EQ(psn_add(0, -1), kPsnMask);
  EXPECT_EQ(psn_add(3, -5), 0xfffffeu);
  EXPECT_EQ(psn_add(5, int64_t(1) << 24), 5u);  // a whole turn
  EXPECT_EQ(psn_add(0xabcdef, 0), 0xabcdefu);
}

TEST(PsnTest, DiffIsSignedAcrossTheWrap) {
  EXPECT_EQ(psn_diff(4, 0xfffffc), 8);   // the rc_seq_nak vector's gap
  EXPECT_EQ(psn_diff(0xfffffc, 4), -8);
  EXPECT_EQ(psn_diff(100, 100), 0);
  EXPECT_EQ(psn_diff(kHalf - 1, 0), int32_t(kHalf - 1));  // farthest ahead
  EXPECT_EQ(psn_diff(kHalf, 0), -int32_t(kHalf));         // half a turn: behind
  // Bits above 24 are not part of a PSN and must not change the answer.
  EXPECT_EQ(psn_diff(0xff000005, 0x00000003), 2);
}

TEST(PsnTest, BeforeIsAStrictOrderWithinTheWindow) {
  EXPECT_TRUE(psn_before(0xfffffe, 1));
  EXPECT_FALSE(psn_before(1, 0xfffffe));
  EXPECT_FALSE(psn_before(7, 7));
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100'000; ++i) {
    const uint32_t a = uint32_t(rng()) & kPsnMask;
    const int64_t step = int64_t(rng() % (kHalf - 1)) + 1;  // 1 .. 2^23 - 1
    const uint32_t b = psn_add(a, step);
    ASSERT_TRUE(psn_before(a, b)) << a << " " << step;
    ASSERT_FALSE(psn_before(b, a)) << a << " " << step;
    ASSERT_EQ(psn_diff(b, a), step);
    ASSERT_EQ(psn_add(b, -step), a);
  }
}

}  // namespace
}  // namespace softrdma::wire
