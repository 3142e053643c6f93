// A fixed-capacity FIFO with stable indices: work queues keep their WQEs here and
// the roles walk them by index (head = oldest outstanding, tail = next free).
//
// One producer and one consumer may use it at the same time without a lock
// (docs/decisions/threading.md): the producer is the posting thread (posts to one
// queue are serialised by the QP's post lock), the consumer the engine's owner.
// The producer fills slot(tail) and then publishes it with a release store of
// tail_; the consumer's acquire load of tail_ makes the slot's contents visible.
// Symmetrically the consumer's release store of head_ (pop) hands a slot back,
// and the producer's acquire load in full() sees that the slot is free.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory_resource>
#include <vector>

namespace softrdma::engine {

template <typename T>
class Ring {
 public:
  // `memory`: where the slots live (a parent domain's allocator, verbs/domains.cc).
  explicit Ring(uint32_t capacity = 0,
                std::pmr::memory_resource* memory = std::pmr::get_default_resource())
      : slots_(std::bit_ceil(std::max<uint32_t>(capacity, 1)), memory), capacity_(capacity) {}

  uint32_t capacity() const { return capacity_; }
  uint32_t size() const { return tail() - head(); }
  bool empty() const { return head() == tail(); }
  bool full() const { return size() == capacity(); }

  // Indices grow forever (mod 2^32). The storage has a power-of-two number of slots
  // (at least the capacity) so that slot(index) = index mod slot_count() stays
  // continuous where the index wraps from 2^32-1 to 0: with a capacity that does not
  // divide 2^32 (a queue of 500 WQEs), two live indices would share a slot there.
  uint32_t slot_count() const { return uint32_t(slots_.size()); }
  uint32_t slot(uint32_t index) const { return index & (slot_count() - 1); }
  uint32_t head() const { return head_.load(std::memory_order_acquire); }
  uint32_t tail() const { return tail_.load(std::memory_order_acquire); }
  T& at(uint32_t index) { return slots_[slot(index)]; }
  const T& at(uint32_t index) const { return slots_[slot(index)]; }
  T& front() { return at(head()); }
  const T& front() const { return at(head()); }

  // Producer: fill the slot push_slot() returns, then publish() it.
  T& push_slot() { return at(tail_.load(std::memory_order_relaxed)); }
  void publish() { tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  // Producer and consumer in one thread (tests, the engine's own queues).
  T& push() {
    T& slot = push_slot();
    publish();
    return slot;
  }
  // Consumer.
  void pop() { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  // Only while neither side runs (the QP is reset under both of its locks).
  void clear() {
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
  }

 private:
  std::pmr::vector<T> slots_;
  uint32_t capacity_;
  std::atomic<uint32_t> head_{0};  // written by the consumer only
  std::atomic<uint32_t> tail_{0};  // written by the producer only
};

}  // namespace softrdma::engine
