// The responder's response queue (src/engine/rc/response_queue.h): the two kinds
// of entry are bounded apart, and the storage grows to what is queued.
#include "engine/rc/response_queue.h"

#include <gtest/gtest.h>

#include "wire/sack.h"

namespace softrdma::engine::rc {
namespace {

QueuedResponse entry(uint32_t psn, bool duplicate) {
  QueuedResponse r;
  r.psn = psn;
  r.duplicate = duplicate;
  return r;
}

TEST(ResponseQueue, GoBackNServesTheAgreedLimitWhateverTheRepeatsTake) {
  ResponseQueue q;
  q.reset(ResponseQueue::limits_for(4, false, wire::kSackSpan));
  // The repeats a retry brings take their own room, up to max_dest_rd_atomic + 2.
  for (uint32_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(q.admits(true)) << i;
    q.push_back(entry(i, true));
  }
  EXPECT_FALSE(q.admits(true));
  // The new ones still have theirs: 2 * 4 + 2.
  for (uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(q.admits(false)) << i;
    q.push_back(entry(100 + i, false));
  }
  EXPECT_FALSE(q.admits(false));
  EXPECT_EQ(q.size(), 16u);
  EXPECT_EQ(q.duplicates(), 6u);
}

TEST(ResponseQueue, SelectiveRepeatServesEveryRequestWithinTheSpan) {
  ResponseQueue q;
  q.reset(ResponseQueue::limits_for(4, true, wire::kWideSackSpan));
  const size_t initial = q.capacity();
  for (uint32_t i = 0; i < wire::kWideSackSpan; ++i) {
    ASSERT_TRUE(q.admits(false)) << i;
    q.push_back(entry(i, false));
  }
  EXPECT_FALSE(q.admits(false)) << "a peer past its span is refused";
  EXPECT_GT(q.capacity(), initial) << "the storage grew to what was queued";
  const ResponseQueue::Limits limits = ResponseQueue::limits_for(4, true, wire::kWideSackSpan);
  EXPECT_LE(q.capacity(), limits.new_requests + limits.duplicates) << "and no further";
  // Parts asked for again still fit, ahead of the rest.
  EXPECT_TRUE(q.admits(true));
  q.push_front(entry(9999, true));
  EXPECT_EQ(q.front().psn, 9999u);
  q.pop_front();
  EXPECT_EQ(q.front().psn, 0u);
  EXPECT_EQ(q.duplicates(), 0u);
}

TEST(ResponseQueue, OrderAndCountsSurviveGrowthWithTheHeadInTheMiddle) {
  ResponseQueue q;
  q.reset(ResponseQueue::limits_for(1, true, wire::kSackSpan));
  const size_t initial = q.capacity();
  // Move the head away from slot 0, then fill past the storage: growth must
  // keep the order the ring had.
  for (uint32_t i = 0; i < 3; ++i) q.push_back(entry(i, false));
  for (uint32_t i = 0; i < 3; ++i) q.pop_front();
  for (uint32_t i = 0; i < initial; ++i) q.push_back(entry(10 + i, i % 3 == 0));
  q.push_front(entry(5, true));
  q.push_back(entry(1000, false));
  EXPECT_GT(q.capacity(), initial);
  ASSERT_EQ(q.back().psn, 1000u);
  q.pop_back();
  EXPECT_EQ(q.front().psn, 5u);
  q.pop_front();
  size_t duplicates_left = (initial + 2) / 3;  // every third pushed in the loop
  ASSERT_EQ(q.duplicates(), duplicates_left);
  for (uint32_t i = 0; i < initial; ++i) {
    ASSERT_EQ(q.front().psn, 10 + i);
    if (q.front().duplicate) --duplicates_left;
    q.pop_front();
    EXPECT_EQ(q.duplicates(), duplicates_left) << i;
  }
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.duplicates(), 0u);
}

}  // namespace
}  // namespace softrdma::engine::rc
