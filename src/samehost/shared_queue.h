// A bounded queue in shared memory that any process of the host may push to and
// one process (its owner) pops from: Vyukov's bounded queue, with the cells'
// sequence numbers saying whose turn each cell is. The node segment's fault queue
// is one; the same-host path's completion inboxes will be others
// (docs/decisions/same-host.md, "Not yet").
//
// Producers trust nothing: a full queue refuses (the caller reports an overrun), a
// producer that dies between claiming a cell and filling it leaves that cell
// unpublished, which the owner sees as "nothing more yet" — the queue stops there
// rather than deliver a half-written entry. Values are arrays of atomic words, so
// a racing reader never reads a torn value as undefined behaviour.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace softrdma::samehost {

template <size_t Words>
struct SharedCell {
  std::atomic<uint64_t> seq;
  std::array<std::atomic<uint64_t>, Words> words;
};

struct SharedQueueHeader {
  std::atomic<uint64_t> head;  // next to pop (owner)
  std::atomic<uint64_t> tail;  // next to claim (producers, by compare-exchange)
};

template <size_t Words>
class SharedQueue {
 public:
  using Value = std::array<uint64_t, Words>;
  using Cell = SharedCell<Words>;

  SharedQueue() = default;
  // `capacity` cells (a power of two) at `cells`, with `header`; the owner calls
  // init() once on new memory.
  SharedQueue(SharedQueueHeader* header, Cell* cells, uint64_t capacity)
      : header_(header), cells_(cells), mask_(capacity - 1) {}
  void init() {
    header_->head.store(0, std::memory_order_relaxed);
    header_->tail.store(0, std::memory_order_relaxed);
    for (uint64_t i = 0; i <= mask_; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  // Any process. False when the queue is full (or kept busy by racing producers).
  bool push(const Value& value) {
    uint64_t tail = header_->tail.load(std::memory_order_relaxed);
    for (int attempt = 0; attempt < 1024; ++attempt) {
      Cell& cell = cells_[tail & mask_];
      const uint64_t seq = cell.seq.load(std::memory_order_acquire);
      const int64_t lag = int64_t(seq - tail);
      if (lag == 0) {
        if (header_->tail.compare_exchange_weak(tail, tail + 1, std::memory_order_relaxed)) {
          for (size_t w = 0; w < Words; ++w) cell.words[w].store(value[w], std::memory_order_relaxed);
          cell.seq.store(tail + 1, std::memory_order_release);
          return true;
        }
      } else if (lag < 0) {
        return false;  // the owner has not popped this cell's last round yet: full
      } else {
        tail = header_->tail.load(std::memory_order_relaxed);
      }
    }
    return false;
  }

  // The owner only. False when nothing (more) is published.
  bool pop(Value& out) {
    const uint64_t head = header_->head.load(std::memory_order_relaxed);
    Cell& cell = cells_[head & mask_];
    if (cell.seq.load(std::memory_order_acquire) != head + 1) return false;
    for (size_t w = 0; w < Words; ++w) out[w] = cell.words[w].load(std::memory_order_relaxed);
    cell.seq.store(head + mask_ + 1, std::memory_order_release);
    header_->head.store(head + 1, std::memory_order_relaxed);
    return true;
  }

  // The owner: a couple of loads, for a check on every poll.
  bool empty() const {
    return header_->head.load(std::memory_order_relaxed) ==
           header_->tail.load(std::memory_order_acquire);
  }
  uint64_t capacity() const { return mask_ + 1; }

 private:
  SharedQueueHeader* header_ = nullptr;
  Cell* cells_ = nullptr;
  uint64_t mask_ = 0;
};

}  // namespace softrdma::samehost
