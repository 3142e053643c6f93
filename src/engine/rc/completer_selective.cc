// The completer's side of selective repeat (docs/decisions/selective-repeat.md):
// READ responses and ATOMIC ACKs beyond a gap are held, as the responder holds
// requests, and the gap is asked for again at once, alone, with a READ request
// for just the missing PSNs (IBA 9.7.4.1.4: a READ request may start at any PSN
// of what was asked; softrdma's responder answers any such range behind its
// expected PSN, responder.cc on_duplicate).
#include <algorithm>

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

bool Completer::hold_response(PacketView packet, Nanos now) {
  if (!conn_.recovery().selective()) return false;
  const std::optional<uint32_t> awaited = awaited_response();
  if (!awaited) return false;
  const int32_t ahead = psn_diff(packet.psn(), *awaited);
  if (ahead <= 0) return false;
  EngineCounters& counters = conn_.qp().ctx().counters;
  if (ahead > int32_t(conn_.sack_span())) {
    bump(counters.reorder_dropped);
    return true;
  }
  if (responses_held_.hold(packet.psn(), packet.bytes())) bump(counters.responses_held);
  publish_held();
  peer_heard(now);
  repair_read_gaps(now);
  conn_.requester().run(now);  // what is held left the pipe: the window may have room
  return true;
}

// The pipe (LossRecovery::in_flight) leaves out the responses held here: they
// arrived, and a READ whose gap is being asked for again does not stop the
// requests after it (up to the span).
void Completer::publish_held() { conn_.recovery().set_responses_held(responses_held_.count()); }

// What is held at the awaited PSN runs, in order, until the next gap.
void Completer::run_held_responses(Nanos now) {
  while (responses_held_.count() > 0) {
    const std::optional<uint32_t> awaited = awaited_response();
    if (!awaited) {
      responses_held_.clear();  // nothing waits for a response any more
      break;
    }
    std::span<uint8_t> bytes = responses_held_.held(*awaited);
    if (bytes.empty()) break;
    // Released first, so that the window the progress below opens counts it
    // once (acknowledged, no longer held); its copy stays until a later
    // response is held in its slot, which only a receive does.
    responses_held_.release(*awaited);
    publish_held();
    PacketView held(bytes);
    if (held.info().is(kOpReadResponse)) {
      on_read_response(held, now);
    } else {
      on_atomic_ack(held, now);
    }
  }
  publish_held();
}

// Each run of PSNs not held, from the awaited one up to the last held, whose
// answer is not on its way: one READ request for it, within the READ it belongs
// to and what that READ has asked for so far. A responder answers each request
// in the order they came, so a response held after a gap means the gap was lost
// (unless the address's hand-over reordered them: then a part comes twice, which
// costs only its bytes), and a response to a request sent after a gap was asked
// for means the answer to that ask was lost too (RACK's rule, RFC 8985 §6.2, in
// request order): asked again at once rather than at the next probe.
// A probe (nothing heard for a probe interval: peer_heard) asks besides for the
// tail, from the last response held to the last asked for: none of it came.
// An ATOMIC's lost ACK, or a READ's whose request was lost, is the requester's
// loss recovery's (a SACK, a probe): not asked here.
bool Completer::repair_read_gaps(Nanos now, bool probe) {
  std::optional<uint32_t> awaited = awaited_response();
  if (!awaited || (responses_held_.count() == 0 && !probe)) return false;
  // Bit i: PSN awaited + i is held (wire/sack.h's layout, from awaited - 1).
  const uint32_t span = conn_.sack_span();
  std::array<uint8_t, kWideSackBitmapBytes> bitmap{};
  const std::span<uint8_t> held(bitmap.data(), sack_bitmap_bytes(span));
  responses_held_.describe(psn_add(*awaited, -1), held);
  uint32_t end = 0;  // one past the last held
  for (uint32_t i = 0; i < span; ++i)
    if (sack_marked(held, i)) end = i + 1;
  const uint32_t newest_held = psn_add(*awaited, int32_t(end) - 1);
  if (probe) {
    // Up to the last response asked for, within what the completer can hold
    // (hold_response drops the rest).
    if (const std::optional<uint32_t> tail = last_response_asked())
      end = std::max<int32_t>(int32_t(end), std::min(psn_diff(*tail, *awaited) + 1,
                                                     int32_t(span)));
  }
  const Nanos overdue = now - answer_wait();
  bool asked = false;
  for (uint32_t at = 0; at < end;) {
    const uint32_t psn = psn_add(*awaited, int32_t(at));
    if (sack_marked(held, at) || responses_held_.answer_pending(psn, newest_held, overdue)) {
      ++at;
      continue;
    }
    uint32_t run = 1;
    while (at + run < end && !sack_marked(held, at + run)) ++run;
    const uint32_t count = ask_read_part(psn, run, now);
    asked |= count > 0;
    at += std::max(count, 1u);
  }
  return asked;
}

// Asks again for up to `count` responses from `psn`, within the READ `psn`
// belongs to and what that READ has asked for so far: how many (0: no READ
// asked for `psn`).
uint32_t Completer::ask_read_part(uint32_t psn, uint32_t count, Nanos now) {
  Ring<SendWqe>& sq = conn_.qp().sq();
  for (uint32_t i = sq.head(); i != sq.tail(); ++i) {
    SendWqe& w = sq.at(i);
    if (w.state == SendState::kQueued) break;
    const int32_t into = psn_diff(psn, w.first_psn);
    if (!w.is_read() || into < 0 || uint32_t(into) >= w.read_requested) continue;
    const uint32_t from = uint32_t(into);
    count = std::min(count, w.read_requested - from);
    const uint32_t next_request = conn_.requester().high_psn();
    for (uint32_t k = 0; k < count; ++k)
      responses_held_.mark_asked(psn_add(psn, int32_t(k)), next_request, now);
    bump(conn_.qp().ctx().counters.read_gaps_asked);
    conn_.requester().rerequest_read(w, from, count);
    return count;
  }
  return 0;
}

// How long the answer to an ask may take before it is taken for lost: the
// responder sends it ahead of its queue, so a round trip, and a quarter more
// for the jitter of a software peer's scheduling (RACK's reordering window,
// RFC 8985 §6.2, is a quarter of the least RTT). A READ asked for again whose
// answer is lost too is then asked once more at the next response held instead
// of at a probe, even when the span stops new requests (the RACK rule by
// request order above needs them). At least 100 us: a peer on the same host
// answers in tens of microseconds when it is running, and later when not.
Nanos Completer::answer_wait() const {
  constexpr Nanos kUnmeasuredNs = 1'000'000;
  constexpr Nanos kMinNs = 100'000;
  if (!rto_.measured()) return kUnmeasuredNs;
  return std::max(kMinNs, rto_.srtt() + rto_.srtt() / 4);
}

// The PSN of the last READ response asked for so far, if any READ is waiting.
std::optional<uint32_t> Completer::last_response_asked() const {
  std::optional<uint32_t> last;
  Ring<SendWqe>& sq = conn_.qp().sq();
  for (uint32_t i = sq.head(); i != sq.tail(); ++i) {
    const SendWqe& w = sq.at(i);
    if (w.state == SendState::kQueued) break;
    if (w.is_read() && w.read_requested > w.read_packets_received)
      last = psn_add(w.first_psn, int32_t(w.read_requested) - 1);
  }
  return last;
}

}  // namespace softrdma::engine::rc
