// What an RC responder on a selective-repeat connection holds beyond a gap
// (docs/decisions/selective-repeat.md): copies of request packets that arrived
// after a lost one, executed in PSN order once the gap fills. The requests keep
// IBA's order of execution (9.5) and every check the in-order path makes; only
// what waits is copied, and only while a gap is open.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/clock.h"

namespace softrdma::engine::rc {

class ReorderBuffer {
 public:
  // Slots by PSN modulo this: a power of two above the PSNs one SACK describes
  // (the wide one, wire/sack.h).
  static constexpr uint32_t kSlots = 1024;

  // Holds a copy of `packet`, whose PSN is `psn`; false when it is held already.
  bool hold(uint32_t psn, std::span<const uint8_t> packet);
  // The copy held for `psn`, empty when none.
  std::span<uint8_t> held(uint32_t psn);
  void release(uint32_t psn);
  void clear();
  uint32_t count() const { return count_; }
  // Marks in `bitmap` (wire/sack.h) the PSNs held after `first_missing`.
  void describe(uint32_t first_missing, std::span<uint8_t> bitmap) const;
  // The completer's note of READ response PSNs asked for again
  // (completer_selective.cc), kept here so that a QP that never lost any pays nothing.
  // `next_request_psn`: the first PSN the requester had not sent when it asked
  // at `when`. A response at or beyond it answers a later request, so the answer
  // to this ask, which the responder sends first, was lost.
  void mark_asked(uint32_t psn, uint32_t next_request_psn, Nanos when);
  // Asked for, and the answer may still come: nothing from a later request has
  // been heard (`newest_heard`, the newest response PSN held), and it was asked
  // after `deadline_for_ask` (RACK's clock, RFC 8985 §6.2: an answer overdue by
  // a round trip and a reordering allowance is lost).
  bool answer_pending(uint32_t psn, uint32_t newest_heard, Nanos deadline_for_ask) const;

 private:
  struct Slot {
    uint32_t psn = 0;
    bool used = false;
    bool asked = false;
    uint32_t asked_psn = 0;
    uint32_t asked_before = 0;  // the requester's next PSN when it was asked
    Nanos asked_at = 0;
    std::vector<uint8_t> bytes;  // kept allocated: a lossy connection reuses it
  };
  Slot& slot(uint32_t psn);

  std::vector<Slot> slots_;  // allocated at the first packet held
  uint32_t count_ = 0;
};

}  // namespace softrdma::engine::rc
