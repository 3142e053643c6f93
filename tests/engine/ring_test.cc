// Ring: the fixed-capacity FIFO the work queues keep their WQEs in (engine/ring.h).
#include "engine/ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace softrdma::engine {
namespace {

// A new ring is empty, not full, and has the capacity it was made with.
TEST(Ring, StartsEmpty) {
  Ring<int> ring(4);
  EXPECT_EQ(ring.capacity(), 4u);
  EXPECT_EQ(ring.size(), 0u);
  EXPECT_TRUE(ring.empty());
  EXPECT_FALSE(ring.full());
  EXPECT_EQ(ring.head(), ring.tail());
}

// Elements come out in the order they went in (a work queue is FIFO, IBA 10.8.3).
TEST(Ring, FirstInFirstOut) {
  Ring<int> ring(4);
  for (int i = 0; i < 3; ++i) ring.push() = i;
  EXPECT_EQ(ring.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ring.front(), i);
    ring.pop();
  }
  EXPECT_TRUE(ring.empty());
}

// Filling to capacity makes it full; popping one makes room again.
TEST(Ring, FullAtCapacity) {
  Ring<int> ring(3);
  ring.push() = 1;
  ring.push() = 2;
  EXPECT_FALSE(ring.full());
  ring.push() = 3;
  EXPECT_TRUE(ring.full());
  EXPECT_EQ(ring.size(), 3u);
  ring.pop();
  EXPECT_FALSE(ring.full());
  EXPECT_EQ(ring.size(), 2u);
}

// Indices keep growing across wrap-around; at(index) names the same element as
// long as it is in the ring (the roles walk the queue by index).
TEST(Ring, StableIndicesAcrossWrap) {
  Ring<int> ring(3);
  for (int round = 0; round < 10; ++round) {
    const uint32_t index = ring.tail();
    ring.push() = round;
    EXPECT_EQ(ring.at(index), round);
    if (ring.size() == 2) {
      EXPECT_EQ(ring.at(ring.head()), round - 1);
      ring.pop();
    }
  }
  EXPECT_EQ(ring.tail(), 10u);
  EXPECT_EQ(ring.head(), 9u);
  EXPECT_EQ(ring.front(), 9);
}

// clear() empties the ring at once (modify_qp to Reset, IBA 10.3.1).
TEST(Ring, ClearEmpties) {
  Ring<int> ring(2);
  ring.push() = 1;
  ring.push() = 2;
  ring.clear();
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.size(), 0u);
  ring.push() = 3;
  EXPECT_EQ(ring.front(), 3);
}

// A ring of capacity 0 (a QP created with max_recv_wr 0 and an SRQ, say) is full
// from the start, so nothing is ever pushed into it.
TEST(Ring, CapacityZeroIsAlwaysFull) {
  Ring<int> ring(0);
  EXPECT_EQ(ring.capacity(), 0u);
  EXPECT_TRUE(ring.empty());
  EXPECT_TRUE(ring.full());
}

// Consecutive indices name different slots, also where the 32-bit index wraps
// from 2^32-1 to 0: otherwise a long-lived work queue (4 billion WQEs) whose depth
// does not divide 2^32 (ibv_rc_pingpong asks for 500) would overwrite a live WQE.
TEST(Ring, ConsecutiveIndicesNeverShareASlotAcrossWrap) {
  for (uint32_t capacity : {2u, 3u, 4u, 5u, 7u, 8u, 100u, 500u}) {
    Ring<int> ring(capacity);
    const uint32_t last = std::numeric_limits<uint32_t>::max();
    bool aliased = false;
    // Every window of `capacity` consecutive indices that straddles the wrap.
    for (uint32_t j = 0; j < capacity && !aliased; ++j) {
      const uint32_t first = last - j;
      for (uint32_t d = 1; d < capacity && !aliased; ++d) {
        const uint32_t other = first + d;  // wraps past 2^32-1
        if (&ring.at(first) == &ring.at(other)) {
          aliased = true;
          ADD_FAILURE() << "capacity " << capacity << ": indices " << first << " and " << other
                        << " (" << d << " apart) share a slot";
        }
      }
    }
  }
}

// size() counts what was pushed and not yet popped (tail - head, mod 2^32).
TEST(Ring, SizeCountsOutstandingElements) {
  Ring<int> ring(8);
  for (int i = 0; i < 5; ++i) ring.push() = i;
  for (int i = 0; i < 2; ++i) ring.pop();
  EXPECT_EQ(ring.size(), 3u);
  EXPECT_EQ(ring.tail() - ring.head(), 3u);
}

}  // namespace
}  // namespace softrdma::engine
