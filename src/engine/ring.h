// A fixed-capacity FIFO with stable indices: work queues keep their WQEs here and
// the roles walk them by index (head = oldest outstanding, tail = next free).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace softrdma::engine {

template <typename T>
class Ring {
 public:
  explicit Ring(uint32_t capacity = 0)
      : slots_(std::bit_ceil(std::max<uint32_t>(capacity, 1))), capacity_(capacity) {}

  uint32_t capacity() const { return capacity_; }
  uint32_t size() const { return tail_ - head_; }
  bool empty() const { return head_ == tail_; }
  bool full() const { return size() == capacity(); }

  // Indices grow forever (mod 2^32). The storage has a power-of-two number of slots
  // (at least the capacity) so that slot(index) = index mod slot_count() stays
  // continuous where the index wraps from 2^32-1 to 0: with a capacity that does not
  // divide 2^32 (a queue of 500 WQEs), two live indices would share a slot there.
  uint32_t slot_count() const { return uint32_t(slots_.size()); }
  uint32_t slot(uint32_t index) const { return index & (slot_count() - 1); }
  uint32_t head() const { return head_; }
  uint32_t tail() const { return tail_; }
  T& at(uint32_t index) { return slots_[slot(index)]; }
  const T& at(uint32_t index) const { return slots_[slot(index)]; }
  T& front() { return at(head_); }

  T& push() { return at(tail_++); }
  void pop() { ++head_; }
  void clear() { head_ = tail_ = 0; }

 private:
  std::vector<T> slots_;
  uint32_t capacity_;
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
};

}  // namespace softrdma::engine
