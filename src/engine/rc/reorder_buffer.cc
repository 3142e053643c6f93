#include "engine/rc/reorder_buffer.h"

#include <algorithm>

#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {

ReorderBuffer::Slot& ReorderBuffer::slot(uint32_t psn) {
  if (slots_.empty()) slots_.resize(kSlots);
  return slots_[psn % kSlots];
}

bool ReorderBuffer::hold(uint32_t psn, std::span<const uint8_t> packet) {
  Slot& s = slot(psn);
  if (s.used && s.psn == psn) return false;
  if (!s.used) ++count_;
  s.psn = psn;
  s.used = true;
  s.bytes.assign(packet.begin(), packet.end());
  return true;
}

std::span<uint8_t> ReorderBuffer::held(uint32_t psn) {
  if (count_ == 0) return {};
  Slot& s = slot(psn);
  if (!s.used || s.psn != psn) return {};
  return s.bytes;
}

void ReorderBuffer::release(uint32_t psn) {
  if (count_ == 0) return;
  Slot& s = slot(psn);
  if (!s.used || s.psn != psn) return;
  s.used = false;
  --count_;
}

void ReorderBuffer::clear() {
  for (Slot& s : slots_) s.used = s.asked = false;
  count_ = 0;
}

void ReorderBuffer::mark_asked(uint32_t psn, uint32_t next_request_psn, Nanos when) {
  Slot& s = slot(psn);
  s.asked = true;
  s.asked_psn = psn;
  s.asked_before = next_request_psn;
  s.asked_at = when;
}

bool ReorderBuffer::answer_pending(uint32_t psn, uint32_t newest_heard,
                                   Nanos deadline_for_ask) const {
  if (slots_.empty()) return false;
  const Slot& s = slots_[psn % kSlots];
  return s.asked && s.asked_psn == psn && wire::psn_before(newest_heard, s.asked_before) &&
         s.asked_at > deadline_for_ask;
}

// By PSN over the bitmap's span, until every held one is found: a SACK goes out
// per burst while a gap is open, and most of the slots are empty.
void ReorderBuffer::describe(uint32_t first_missing, std::span<uint8_t> bitmap) const {
  if (slots_.empty()) return;
  const uint32_t bits = uint32_t(std::min<size_t>(bitmap.size() * 8, kSlots));
  uint32_t found = 0;
  for (uint32_t i = 0; i < bits && found < count_; ++i) {
    const uint32_t psn = wire::psn_add(first_missing, int32_t(i + 1));
    const Slot& s = slots_[psn % kSlots];
    if (!s.used || s.psn != psn) continue;
    wire::sack_mark(bitmap, i);
    ++found;
  }
}

}  // namespace softrdma::engine::rc
