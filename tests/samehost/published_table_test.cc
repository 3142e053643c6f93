// The lock-free table of a node segment (samehost/published_table.h): one writer,
// readers that never see a half-written entry, tombstones that keep probe chains.
#include "samehost/published_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace softrdma::samehost {
namespace {

using Table = PublishedTable<3>;

struct Storage {
  explicit Storage(uint32_t capacity) : slots(new Table::Slot[capacity]()), table(slots.get(), capacity) {}
  std::unique_ptr<Table::Slot[]> slots;
  Table table;
};

TEST(PublishedTable, WhatIsPutIsFoundAndWhatIsErasedIsNot) {
  Storage s(16);
  ASSERT_TRUE(s.table.put(7, {1, 2, 3}));
  ASSERT_TRUE(s.table.put(9, {4, 5, 6}));
  EXPECT_EQ(s.table.get(7), (Table::Value{1, 2, 3}));
  EXPECT_EQ(s.table.get(9), (Table::Value{4, 5, 6}));
  EXPECT_FALSE(s.table.get(8).has_value());
  ASSERT_TRUE(s.table.put(7, {7, 7, 7}));  // replaced in place
  EXPECT_EQ(s.table.get(7), (Table::Value{7, 7, 7}));
  EXPECT_TRUE(s.table.erase(7));
  EXPECT_FALSE(s.table.get(7).has_value());
  EXPECT_FALSE(s.table.erase(7));
  EXPECT_EQ(s.table.get(9), (Table::Value{4, 5, 6}));
}

// Every key of a full table stays reachable while others around it are erased and
// their tombstones reused; one key more than the slots is refused.
TEST(PublishedTable, ErasedKeysLeaveEveryOtherKeyReachable) {
  constexpr uint32_t kCapacity = 64;
  Storage s(kCapacity);
  for (uint32_t k = 1; k <= kCapacity; ++k) ASSERT_TRUE(s.table.put(k * 977, {k, 0, 0}));
  EXPECT_FALSE(s.table.put(999'999, {0, 0, 0})) << "full";
  for (uint32_t k = 1; k <= kCapacity; k += 2) ASSERT_TRUE(s.table.erase(k * 977));
  for (uint32_t k = 2; k <= kCapacity; k += 2) EXPECT_EQ(s.table.get(k * 977)->at(0), k) << k;
  for (uint32_t k = 1; k <= kCapacity; k += 2) EXPECT_FALSE(s.table.get(k * 977).has_value());
  for (uint32_t k = 1; k <= kCapacity; k += 2) ASSERT_TRUE(s.table.put(k * 31, {k, 1, 0}));
  for (uint32_t k = 1; k <= kCapacity; k += 2) EXPECT_EQ(s.table.get(k * 31)->at(1), 1u);
}

// put_new (the owner knows the key is absent) fills a table, refuses one more,
// reuses tombstones, and every key it placed is found by a reader's walk.
TEST(PublishedTable, PutNewFillsReusesTombstonesAndStaysReachable) {
  constexpr uint32_t kCapacity = 64;
  Storage s(kCapacity);
  for (uint32_t k = 1; k <= kCapacity; ++k) ASSERT_TRUE(s.table.put_new(k, {k, 0, 0}));
  EXPECT_FALSE(s.table.put_new(1000, {0, 0, 0})) << "full";
  for (uint32_t k = 1; k <= kCapacity; k += 3) ASSERT_TRUE(s.table.erase(k));
  for (uint32_t k = 1; k <= kCapacity; k += 3) ASSERT_TRUE(s.table.put_new(k + 5000, {k, 1, 0}));
  for (uint32_t k = 1; k <= kCapacity; ++k) {
    if (k % 3 == 1) {
      EXPECT_FALSE(s.table.get(k).has_value()) << k;
      EXPECT_EQ(s.table.get(k + 5000)->at(1), 1u) << k;
    } else {
      EXPECT_EQ(s.table.get(k)->at(0), k) << k;
    }
  }
  ASSERT_TRUE(s.table.put(2, {9, 9, 9}));  // put still replaces in place
  EXPECT_EQ(s.table.get(2), (Table::Value{9, 9, 9}));
}

// A slot its writer left mid-write (a peer that died there) is never returned.
TEST(PublishedTable, ASlotLeftMidWriteIsNotReturned) {
  Storage s(8);
  ASSERT_TRUE(s.table.put(5, {1, 1, 1}));
  for (uint32_t i = 0; i < 8; ++i)
    if (s.slots[i].key.load() == 5) s.slots[i].seq.fetch_add(1);  // odd: being written
  EXPECT_FALSE(s.table.get(5).has_value());
}

// A reader racing the writer sees one whole value or the other, never a mix.
TEST(PublishedTable, AReaderNeverSeesAMixOfTwoValues) {
  Storage s(8);
  ASSERT_TRUE(s.table.put(3, {0, 0, 0}));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, seen{0};
  std::thread reader([&] {
    while (!stop.load()) {
      auto v = s.table.get(3);
      if (!v) continue;
      seen.fetch_add(1);
      if ((*v)[0] != (*v)[1] || (*v)[1] != (*v)[2]) torn.fetch_add(1);
    }
  });
  // Writes until the reader has looked many times (it may start late on a busy host).
  for (uint64_t i = 1; seen.load() < 20'000; ++i) s.table.put(3, {i, i, i});
  stop.store(true);
  reader.join();
  EXPECT_GT(seen.load(), 0u);
  EXPECT_EQ(torn.load(), 0u);
}

}  // namespace
}  // namespace softrdma::samehost
