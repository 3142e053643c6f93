// Registered memory of a traffic node: page-aligned regions and a FIFO arena for
// buffers that are released in the order they were taken (work completions of one
// queue arrive in posting order).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>

struct ibv_mr;
struct ibv_pd;

namespace softrdma::traffic {

// A page-aligned allocation registered with ibv_reg_mr (deregistered on destruction).
class Region {
 public:
  Region() = default;
  ~Region();
  Region(Region&&) noexcept;
  Region& operator=(Region&&) noexcept;

  // Null-equivalent (empty) Region and a message in `error` on failure.
  static Region allocate(ibv_pd* pd, uint64_t bytes, int access, std::string& error);

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(data_); }
  uint32_t key() const;   // lkey, for local scatter/gather entries
  uint32_t rkey() const;  // for the peer's one-sided operations
  std::span<uint8_t> span(uint64_t offset, uint64_t length) const {
    return {data_ + offset, length};
  }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void release();
  ibv_mr* mr_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Circular allocator over [0, capacity): alloc() takes from the tail, free_oldest()
// returns the oldest allocation. 64-byte aligned offsets.
class FifoArena {
 public:
  explicit FifoArena(uint64_t capacity = 0) : capacity_(capacity) {}
  std::optional<uint64_t> alloc(uint64_t bytes);
  void free_oldest();
  uint64_t used() const { return used_; }

 private:
  uint64_t capacity_;
  uint64_t tail_ = 0;
  uint64_t used_ = 0;           // bytes taken, including skipped ends
  std::deque<uint64_t> taken_;  // bytes each allocation consumed, oldest first
};

}  // namespace softrdma::traffic
