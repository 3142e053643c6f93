// The completer's side of selective repeat (docs/decisions/selective-repeat.md):
// READ responses and ATOMIC ACKs beyond a gap are held, as the responder holds
// requests, and the gap is asked for again at once, alone, with a READ request
// for just the missing PSNs (IBA 9.7.4.1.4: a READ request may start at any PSN
// of what was asked; softrdma's responder answers any such range behind its
// expected PSN, responder.cc on_duplicate).
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/completer.h"
#include "engine/rc/connection.h"
#include "engine/rc/selective_repeat.h"
#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {

using namespace wire;

// The PSN of the response the oldest WQE that needs one waits for.
std::optional<uint32_t> Completer::awaited_response() const {
  Ring<SendWqe>& sq = conn_.qp().sq();
  for (uint32_t i = sq.head(); i != sq.tail(); ++i) {
    const SendWqe& w = sq.at(i);
    if (w.state == SendState::kQueued) break;
    if (w.needs_response() && !w.on_host && w.state != SendState::kComplete)
      return psn_add(w.first_psn, int32_t(w.read_packets_received));
  }
  return std::nullopt;
}

bool Completer::hold_response(PacketView packet, Nanos /*now*/) {
  if (!conn_.recovery().selective()) return false;
  const std::optional<uint32_t> awaited = awaited_response();
  if (!awaited) return false;
  const int32_t ahead = psn_diff(packet.psn(), *awaited);
  if (ahead <= 0) return false;
  EngineCounters& counters = conn_.qp().ctx().counters;
  if (ahead > int32_t(kSackSpan)) {
    bump(counters.reorder_dropped);
    return true;
  }
  if (responses_held_.hold(packet.psn(), packet.bytes())) bump(counters.reorder_held);
  repair_read_gaps();
  return true;
}

// What is held at the awaited PSN runs, in order, until the next gap.
void Completer::run_held_responses(Nanos now) {
  while (responses_held_.count() > 0) {
    const std::optional<uint32_t> awaited = awaited_response();
    if (!awaited) {
      responses_held_.clear();  // nothing waits for a response any more
      return;
    }
    std::span<uint8_t> bytes = responses_held_.held(*awaited);
    if (bytes.empty()) return;
    PacketView held(bytes);
    if (held.info().is(kOpReadResponse)) {
      on_read_response(held, now);
    } else {
      on_atomic_ack(held, now);
    }
    responses_held_.release(*awaited);
  }
}

// Each run of PSNs not held, from the awaited one up to the last held (a probe:
// up to the end of what each READ asked for), that was not asked for since the
// last probe: one READ request for it, within the READ it belongs to and what
// that READ has asked for so far. A responder answers each request in PSN order,
// so a response held after a gap means the gap was lost (unless the address's
// hand-over reordered them: then a part comes twice, which costs only its bytes).
// An ATOMIC's lost ACK, or a READ's whose request was lost, is the requester's
// loss recovery's (a SACK, a probe): not asked here.
bool Completer::repair_read_gaps(bool probe) {
  std::optional<uint32_t> awaited = awaited_response();
  if (!awaited || (responses_held_.count() == 0 && !probe)) return false;
  // Bit i: PSN awaited + i is held (wire/sack.h's layout, from awaited - 1).
  std::array<uint8_t, kSackBitmapBytes> held{};
  responses_held_.describe(psn_add(*awaited, -1), held);
  uint32_t end = 0;  // one past the last held (a probe: past what was asked)
  for (uint32_t i = 0; i < kSackSpan; ++i)
    if (sack_marked(held, i)) end = i + 1;
  if (probe) end = kSackSpan;
  bool asked = false;
  Ring<SendWqe>& sq = conn_.qp().sq();
  for (uint32_t at = 0; at < end;) {
    const uint32_t psn = psn_add(*awaited, int32_t(at));
    if (sack_marked(held, at) || responses_held_.asked(psn)) {
      ++at;
      continue;
    }
    // The READ holding psn, and how far its asked-for range lies missing.
    SendWqe* read = nullptr;
    for (uint32_t i = sq.head(); i != sq.tail() && read == nullptr; ++i) {
      SendWqe& w = sq.at(i);
      if (w.state == SendState::kQueued) break;
      const int32_t into = psn_diff(psn, w.first_psn);
      if (w.is_read() && into >= 0 && uint32_t(into) < w.read_requested) read = &w;
    }
    if (read == nullptr) {
      ++at;
      continue;
    }
    const uint32_t from = uint32_t(psn_diff(psn, read->first_psn));
    uint32_t count = 1;
    while (from + count < read->read_requested && at + count < end &&
           !sack_marked(held, at + count))
      ++count;
    for (uint32_t k = 0; k < count; ++k) responses_held_.mark_asked(psn_add(psn, int32_t(k)));
    bump(conn_.qp().ctx().counters.read_gaps_asked);
    conn_.requester().rerequest_read(*read, from, count);
    asked = true;
    at += count;
  }
  return asked;
}

}  // namespace softrdma::engine::rc
