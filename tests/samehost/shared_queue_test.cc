// The multi-producer queue of the node segment (samehost/shared_queue.h).
#include "samehost/shared_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace softrdma::samehost {
namespace {

using Queue = SharedQueue<2>;

struct Storage {
  explicit Storage(uint64_t capacity)
      : cells(new Queue::Cell[capacity]()), queue(&header, cells.get(), capacity) {
    queue.init();
  }
  SharedQueueHeader header{};
  std::unique_ptr<Queue::Cell[]> cells;
  Queue queue;
};

TEST(SharedQueue, FirstInFirstOutAcrossWrapsAndAFullQueueRefuses) {
  Storage s(8);
  Queue::Value v;
  EXPECT_TRUE(s.queue.empty());
  for (uint64_t round = 0; round < 5; ++round) {
    for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(s.queue.push({round, i}));
    EXPECT_FALSE(s.queue.push({99, 99})) << "full";
    for (uint64_t i = 0; i < 8; ++i) {
      ASSERT_TRUE(s.queue.pop(v));
      EXPECT_EQ(v, (Queue::Value{round, i}));
    }
    EXPECT_FALSE(s.queue.pop(v));
    EXPECT_TRUE(s.queue.empty());
  }
}

// Four producers and the owner at once: every value arrives once, each
// producer's in its order.
TEST(SharedQueue, ConcurrentProducersLoseNothingAndKeepTheirOrder) {
  Storage s(64);
  constexpr uint64_t kPerProducer = 20000;
  std::vector<std::thread> producers;
  for (uint64_t p = 0; p < 4; ++p) {
    producers.emplace_back([&s, p] {
      for (uint64_t i = 0; i < kPerProducer;)
        if (s.queue.push({p, i})) ++i;
        else std::this_thread::yield();
    });
  }
  std::vector<uint64_t> next(4, 0);
  Queue::Value v;
  for (uint64_t got = 0; got < 4 * kPerProducer;) {
    if (!s.queue.pop(v)) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_LT(v[0], 4u);
    ASSERT_EQ(v[1], next[v[0]]) << "producer " << v[0];
    ++next[v[0]];
    ++got;
  }
  for (auto& t : producers) t.join();
  EXPECT_FALSE(s.queue.pop(v));
}

// A producer that died after claiming a cell and before filling it: the owner
// takes nothing from there on, rather than a half-written value.
TEST(SharedQueue, ACellClaimedAndNeverFilledIsNotDelivered) {
  Storage s(8);
  ASSERT_TRUE(s.queue.push({1, 1}));
  s.header.tail.fetch_add(1);  // claimed by a producer that then died
  ASSERT_TRUE(s.queue.push({3, 3}));
  Queue::Value v;
  ASSERT_TRUE(s.queue.pop(v));
  EXPECT_EQ(v[0], 1u);
  EXPECT_FALSE(s.queue.pop(v));
}

}  // namespace
}  // namespace softrdma::samehost
