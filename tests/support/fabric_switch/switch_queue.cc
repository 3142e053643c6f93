#include "fabric_switch/switch_queue.h"

#include <algorithm>

namespace softrdma::fabric {

Verdict SwitchPort::arrive(uint32_t bytes, bool ect, Nanos now) {
  ++stats_.arrived;
  stats_.arrived_bytes += bytes;
  if (queue_bytes_ + bytes > config_.buffer_bytes) {
    ++stats_.dropped;
    return Verdict::kDrop;
  }
  const bool mark = ect && config_.mark_bytes != 0 && queue_bytes_ >= config_.mark_bytes;
  // Serialization at the link's rate, after whatever the link still holds.
  const Nanos start = std::max(now, link_free_at_);
  const Nanos departure = start + Nanos(uint64_t(bytes) * 8 * 1'000'000'000 / config_.rate_bits_per_s);
  link_free_at_ = departure;
  queue_.push_back({bytes, departure});
  queue_bytes_ += bytes;
  stats_.max_queue_bytes = std::max(stats_.max_queue_bytes, queue_bytes_);
  if (!mark) return Verdict::kQueue;
  ++stats_.marked;
  return Verdict::kQueueMarked;
}

void SwitchPort::depart() {
  if (queue_.empty()) return;
  queue_bytes_ -= queue_.front().bytes;
  queue_.pop_front();
  ++stats_.departed;
}

}  // namespace softrdma::fabric
