// A hash table that lives in a node segment (node_segment.h): its owner process
// writes it, processes of the same host read it without taking a lock.
//
// Open addressing with linear probing over a power-of-two number of slots; each
// slot has a sequence lock (odd while the owner writes it), so a reader copies a
// slot and keeps the copy only if the sequence was even and unchanged around it.
// Every field is an atomic: readers and the writer race by design, and a torn read
// is detected, never undefined. A removed key leaves a tombstone so that the
// probe chains of keys after it stay intact; the owner reuses tombstones.
//
// Readers trust nothing in the segment: the capacity is the one they mapped, and a
// probe never walks more than the whole table.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace softrdma::samehost {

template <size_t Words>
struct PublishedSlot {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> state;  // kEmpty, kLive, kTombstone
  std::atomic<uint32_t> key;
  std::atomic<uint32_t> unused;
  std::array<std::atomic<uint64_t>, Words> words;
};

template <size_t Words>
class PublishedTable {
 public:
  using Value = std::array<uint64_t, Words>;
  using Slot = PublishedSlot<Words>;
  static constexpr uint32_t kEmpty = 0, kLive = 1, kTombstone = 2;

  PublishedTable() = default;
  // `capacity` slots (a power of two) at `slots`, zero-filled when new.
  PublishedTable(Slot* slots, uint32_t capacity) : slots_(slots), mask_(capacity - 1) {}
  uint32_t capacity() const { return mask_ + 1; }

  // Owner only (one writer). Inserts or replaces; false when the table is full.
  bool put(uint32_t key, const Value& value) {
    Slot* target = nullptr;
    for (uint32_t probe = 0, i = home(key); probe < capacity(); ++probe, i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      const uint32_t state = s.state.load(std::memory_order_relaxed);
      if (state == kLive && s.key.load(std::memory_order_relaxed) == key) {
        target = &s;
        break;
      }
      if (state != kLive && target == nullptr) target = &s;
      if (state == kEmpty) break;
    }
    if (target == nullptr) return false;
    write(*target, kLive, key, value);
    return true;
  }
  // Owner only, for a key it knows is not live (it keeps its own index): the first
  // slot of the key's chain that is not live, without walking the rest of the
  // chain to look for the key. False when the table is full. A table whose empty
  // slots are used up has chains as long as the table; `put` walks all of them.
  bool put_new(uint32_t key, const Value& value) {
    for (uint32_t probe = 0, i = home(key); probe < capacity(); ++probe, i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.state.load(std::memory_order_relaxed) == kLive) continue;
      write(s, kLive, key, value);
      return true;
    }
    return false;
  }
  // Owner only. False when the key was not there.
  bool erase(uint32_t key) {
    Slot* s = find_live(key);
    if (s == nullptr) return false;
    write(*s, kTombstone, key, Value{});
    return true;
  }

  // Any process: a consistent copy of the key's value, or nothing.
  std::optional<Value> get(uint32_t key) const {
    for (uint32_t probe = 0, i = home(key); probe < capacity(); ++probe, i = (i + 1) & mask_) {
      uint32_t state, found;
      Value value;
      if (!read(slots_[i], state, found, value)) return std::nullopt;
      if (state == kEmpty) return std::nullopt;
      if (state == kLive && found == key) return value;
    }
    return std::nullopt;
  }

 private:
  // Fibonacci hashing: keys that differ in their high bits (random R_Keys) and in
  // their low bits (consecutive QPNs) both spread.
  uint32_t home(uint32_t key) const { return (key * 2654435769u) >> 7 & mask_; }

  Slot* find_live(uint32_t key) {
    for (uint32_t probe = 0, i = home(key); probe < capacity(); ++probe, i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      const uint32_t state = s.state.load(std::memory_order_relaxed);
      if (state == kEmpty) return nullptr;
      if (state == kLive && s.key.load(std::memory_order_relaxed) == key) return &s;
    }
    return nullptr;
  }

  static void write(Slot& s, uint32_t state, uint32_t key, const Value& value) {
    const uint32_t seq = s.seq.load(std::memory_order_relaxed);
    s.seq.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.state.store(state, std::memory_order_relaxed);
    s.key.store(key, std::memory_order_relaxed);
    for (size_t w = 0; w < Words; ++w) s.words[w].store(value[w], std::memory_order_relaxed);
    s.seq.store(seq + 2, std::memory_order_release);
  }

  // A stable snapshot of the slot; false if the writer kept it busy (a peer that
  // died mid-write leaves the sequence odd forever: the reader gives up).
  static bool read(const Slot& s, uint32_t& state, uint32_t& key, Value& value) {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const uint32_t before = s.seq.load(std::memory_order_acquire);
      if (before & 1) continue;
      state = s.state.load(std::memory_order_relaxed);
      key = s.key.load(std::memory_order_relaxed);
      for (size_t w = 0; w < Words; ++w) value[w] = s.words[w].load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) == before) return true;
    }
    return false;
  }

  Slot* slots_ = nullptr;
  uint32_t mask_ = 0;
};

}  // namespace softrdma::samehost
