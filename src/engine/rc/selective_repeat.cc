#include "engine/rc/selective_repeat.h"

#include <algorithm>

#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {

using wire::psn_add;
using wire::psn_before;
using wire::psn_diff;

SelectiveRepeat::SelectiveRepeat(uint32_t max_window, uint32_t sack_span)
    : LossRecovery(std::min(max_window, sack_span), std::min(sack_span, kScoreboard), true),
      resume_(std::min(max_window, sack_span)) {}

void SelectiveRepeat::reset(uint32_t psn) {
  window_ = resume_.cancel();
  base_ = psn;
  marks_.fill(0);
  not_in_flight_ = 0;
}

// Every change of a PSN's marks goes through here: a PSN held or lost (to send)
// is not in flight, and the count of those is kept as the marks change.
void SelectiveRepeat::set_marks(uint32_t psn, uint8_t to) {
  uint8_t& m = marks_[psn % kScoreboard];
  const bool was_out = (m & (kHeld | kToSend)) != 0, is_out = (to & (kHeld | kToSend)) != 0;
  if (was_out != is_out) not_in_flight_ = is_out ? not_in_flight_ + 1 : not_in_flight_ - 1;
  m = to;
}

bool SelectiveRepeat::covered(uint32_t psn) const {
  const int32_t at = psn_diff(psn, base_);
  return at >= 0 && at < int32_t(kScoreboard);
}

void SelectiveRepeat::advance(uint32_t una) {
  const int32_t by = psn_diff(una, base_);
  if (by <= 0) return;
  if (by >= int32_t(kScoreboard)) {
    marks_.fill(0);
    not_in_flight_ = 0;
  } else {
    for (uint32_t psn = base_; psn != una; psn = psn_add(psn, 1)) set_marks(psn, 0);
  }
  base_ = una;
}

bool SelectiveRepeat::stays_sent(uint32_t psn) const {
  return !covered(psn) || (marks(psn) & kToSend) == 0;
}

void SelectiveRepeat::on_resent(uint32_t psn, uint32_t high) {
  if (!covered(psn)) return;
  set_marks(psn, uint8_t((marks(psn) & ~kToSend) | kResent));
  resent_high_[psn % kScoreboard] = high;
}

std::optional<uint32_t> SelectiveRepeat::mark_lost(uint32_t from, uint32_t to,
                                                   uint32_t highest_held) {
  std::optional<uint32_t> first;
  for (uint32_t psn = from; psn_before(psn, to) && covered(psn); psn = psn_add(psn, 1)) {
    const uint8_t m = marks(psn);
    if (m & (kHeld | kToSend)) continue;
    // Resent: lost again only when what was sent after the resend is held.
    const uint32_t after = (m & kResent) ? resent_high_[psn % kScoreboard] : psn_add(psn, 1);
    if (psn_diff(highest_held, after) + 1 < int32_t(kReorderThreshold)) continue;
    set_marks(psn, uint8_t(m | kToSend));
    if (!first) first = psn;
  }
  return first;
}

std::optional<uint32_t> SelectiveRepeat::on_sack(uint32_t una, uint32_t first_missing,
                                                 std::span<const uint8_t> bitmap,
                                                 uint32_t high) {
  advance(una);
  std::optional<uint32_t> highest;
  // Byte by byte: the wide SACK's 512 bits are mostly clear (what lies beyond the
  // newest held), and this runs per SACK, once per receive burst of the peer.
  for (uint32_t i = 0; i < bitmap.size() * 8; ++i) {
    if (i % 8 == 0 && bitmap[i / 8] == 0) {
      i += 7;
      continue;
    }
    if (!wire::sack_marked(bitmap, i)) continue;
    const uint32_t psn = psn_add(first_missing, int32_t(i + 1));
    if (!psn_before(psn, high) || !covered(psn)) break;  // never sent: a bad SACK
    set_marks(psn, uint8_t(marks(psn) | kHeld));
    highest = psn;
  }
  if (!highest) return std::nullopt;
  return mark_lost(first_missing, *highest, *highest);
}

// A timeout: everything not held goes again, from a small window (the tail no
// later packet revealed, or resends that were lost too). A READ response gap or a
// PSN sequence NAK names one PSN; an RNR NAK: the responder dropped everything
// from its PSN on.
Resend SelectiveRepeat::on_loss(uint32_t psn, uint32_t high, LossCause cause, Nanos /*now*/) {
  advance(psn);
  if (cause == LossCause::kTimeout) window_ = resume_.restart(psn);
  const uint32_t to = cause == LossCause::kNak ? psn_add(psn, 1) : high;
  for (uint32_t p = psn; psn_before(p, to) && covered(p); p = psn_add(p, 1)) {
    uint8_t m = cause == LossCause::kRnr ? uint8_t(0) : marks(p);
    if ((m & kHeld) == 0) m = uint8_t(m | kToSend);
    set_marks(p, m);
  }
  // The oldest always goes: its answer (an ACK, a SACK, a response) is what the
  // requester lacks. All held is possible: the responder acknowledged them while a
  // READ before them still lacked a response, and that ACK completed nothing.
  if (covered(psn)) set_marks(psn, uint8_t(marks(psn) | kToSend));
  return Resend{.from = psn, .repeat_first = cause == LossCause::kTimeout};
}

// The oldest PSN not held, or the oldest when all are (see on_loss).
std::optional<uint32_t> SelectiveRepeat::on_probe(uint32_t una, uint32_t high) {
  advance(una);
  if (!psn_before(una, high)) return std::nullopt;
  uint32_t psn = una;
  while (psn_before(psn, high) && covered(psn) && (marks(psn) & kHeld)) psn = psn_add(psn, 1);
  if (!psn_before(psn, high) || !covered(psn)) psn = una;
  set_marks(psn, uint8_t(marks(psn) | kToSend));
  return psn;
}

void SelectiveRepeat::on_acknowledged(uint32_t una, Nanos /*now*/) {
  advance(una);
  window_ = resume_.grow(una);
}

}  // namespace softrdma::engine::rc
