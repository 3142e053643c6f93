#include "engine/rc/response_queue.h"

#include <algorithm>

namespace softrdma::engine::rc {

namespace {
// Selective repeat asks for each missing part of a READ alone
// (completer_selective.cc): room for that many more answers to repeats.
constexpr size_t kSelectiveParts = 32;
}  // namespace

// Go-back-N: max_dest_rd_atomic new requests (IBA 9.5) with one slot more each
// and two spare, as before this queue had its own kinds (a peer a little over
// the limit is served); the repeats a retry brings, as many plus two. Selective
// repeat: every request within the span, and the parts asked for alone.
ResponseQueue::Limits ResponseQueue::limits_for(uint32_t max_dest_rd_atomic, bool selective,
                                                uint32_t span) {
  const size_t outstanding = std::max<uint32_t>(1, max_dest_rd_atomic);
  Limits limits;
  limits.duplicates = outstanding + 2 + (selective ? kSelectiveParts : 0);
  limits.new_requests = selective ? std::max<size_t>(span, 2 * outstanding + 2)
                                  : 2 * outstanding + 2;
  return limits;
}

void ResponseQueue::reset(Limits limits) {
  limits_ = limits;
  clear();
  // What a connection usually holds at most; it grows when its peer asks for more.
  const size_t initial = limits.duplicates + std::min(limits.new_requests, limits.duplicates);
  slots_.assign(std::max<size_t>(1, initial), QueuedResponse{});
}

bool ResponseQueue::admits(bool duplicate) const {
  if (duplicate) return duplicates_ < limits_.duplicates;
  return count_ - duplicates_ < limits_.new_requests;
}

void ResponseQueue::make_room() {
  if (count_ < slots_.size()) return;
  const size_t most = limits_.new_requests + limits_.duplicates;
  std::vector<QueuedResponse> grown(std::max(count_ + 1, std::min(slots_.size() * 2, most)));
  for (size_t i = 0; i < count_; ++i) grown[i] = slots_[index(i)];
  slots_ = std::move(grown);
  head_ = 0;
}

void ResponseQueue::push_back(const QueuedResponse& r) {
  make_room();
  slots_[index(count_)] = r;
  ++count_;
  if (r.duplicate) ++duplicates_;
}

void ResponseQueue::push_front(const QueuedResponse& r) {
  make_room();
  head_ = (head_ + slots_.size() - 1) % slots_.size();
  slots_[head_] = r;
  ++count_;
  if (r.duplicate) ++duplicates_;
}

void ResponseQueue::pop_front() {
  if (slots_[head_].duplicate) --duplicates_;
  head_ = (head_ + 1) % slots_.size();
  --count_;
}

void ResponseQueue::pop_back() {
  if (back().duplicate) --duplicates_;
  --count_;
}

void ResponseQueue::clear() {
  head_ = 0;
  count_ = 0;
  duplicates_ = 0;
}

}  // namespace softrdma::engine::rc
