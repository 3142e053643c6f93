#include "traffic/buffers.h"

#include <sys/mman.h>

#include <cstring>

#include <infiniband/verbs.h>

namespace softrdma::traffic {

Region::~Region() { release(); }

Region::Region(Region&& o) noexcept { *this = std::move(o); }

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    release();
    mr_ = o.mr_;
    data_ = o.data_;
    size_ = o.size_;
    o.mr_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void Region::release() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  if (data_ != nullptr) munmap(data_, size_);
  mr_ = nullptr;
  data_ = nullptr;
}

uint32_t Region::key() const { return mr_ != nullptr ? mr_->lkey : 0; }

uint32_t Region::rkey() const { return mr_ != nullptr ? mr_->rkey : 0; }

Region Region::allocate(ibv_pd* pd, uint64_t bytes, int access, std::string& error) {
  Region r;
  bytes = (bytes + 4095) & ~uint64_t(4095);
  // Anonymous mappings: untouched pages cost nothing, so regions sized for the
  // largest message stay cheap for runs of small ones.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    error = "mmap of " + std::to_string(bytes) + " bytes: " + std::strerror(errno);
    return r;
  }
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = bytes;
  r.mr_ = ibv_reg_mr(pd, p, bytes, access);
  if (r.mr_ == nullptr) {
    error = "ibv_reg_mr of " + std::to_string(bytes) + " bytes: " + std::strerror(errno);
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
