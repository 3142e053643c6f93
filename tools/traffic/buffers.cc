#include "traffic/buffers.h"

#include <sys/mman.h>

#include <cstring>

#include "engine/device.h"

namespace softrdma::traffic {

Region::~Region() { release(); }

Region::Region(Region&& o) noexcept { *this = std::move(o); }

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    release();
    device_ = o.device_;
    mr_ = o.mr_;
    data_ = o.data_;
    size_ = o.size_;
    o.device_ = nullptr;
    o.mr_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void Region::release() {
  if (mr_ != nullptr) device_->dereg_mr(mr_);
  if (data_ != nullptr) munmap(data_, size_);
  mr_ = nullptr;
  data_ = nullptr;
}

uint32_t Region::key() const { return mr_ != nullptr ? mr_->key : 0; }

Region Region::allocate(engine::Device& device, engine::Pd* pd, uint64_t bytes, int access,
                        std::string& error) {
  Region r;
  bytes = (bytes + 4095) & ~uint64_t(4095);
  // Anonymous mappings: untouched pages cost nothing, so regions sized for the
  // largest message stay cheap for runs of small ones.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    error = "mmap of " + std::to_string(bytes) + " bytes: " + std::strerror(errno);
    return r;
  }
  r.device_ = &device;
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = bytes;
  int err = 0;
  r.mr_ = device.reg_mr(pd, p, bytes, reinterpret_cast<uint64_t>(p), access, err);
  if (r.mr_ == nullptr) {
    error = "reg_mr of " + std::to_string(bytes) + " bytes: " + std::strerror(err);
    r.release();
  }
  return r;
}

std::optional<uint64_t> FifoArena::alloc(uint64_t bytes) {
  bytes = (std::max<uint64_t>(bytes, 1) + 63) & ~uint64_t(63);
  if (used_ == 0) tail_ = 0;  // empty: start over at 0, no wasted end
  if (bytes > capacity_) return std::nullopt;
  // Occupied: the circular range ending at tail_. A buffer never wraps: when it
  // does not fit before the end, the end is skipped (counted as used).
  const bool wrap = tail_ + bytes > capacity_;
  const uint64_t skip = wrap ? capacity_ - tail_ : 0;
  if (used_ + skip + bytes > capacity_) return std::nullopt;
  const uint64_t start = wrap ? 0 : tail_;
  tail_ = start + bytes;
  used_ += skip + bytes;
  taken_.push_back(skip + bytes);
  return start;
}

void FifoArena::free_oldest() {
  used_ -= taken_.front();
  taken_.pop_front();
}

}  // namespace softrdma::traffic
