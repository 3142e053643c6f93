#include "engine/rc/completer.h"

#include <algorithm>
#include <cstring>

#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/sgl.h"
#include "wire/ack_hold.h"
#include "wire/messages.h"
#include "wire/psn.h"
#include "wire/sack.h"

namespace softrdma::engine::rc {

using namespace wire;

void Completer::reset(uint32_t sq_psn, Nanos /*now*/) {
  const ibv_qp_attr& attr = conn_.qp().attr();
  una_psn_ = sq_psn & kPsnMask;
  retries_left_ = attr.retry_cnt;
  rnr_retries_left_ = attr.rnr_retry;
  deadline_ = kNever;
  probe_deadline_ = kNever;
  probes_ = 0;
  read_rerequested_ = false;
  responses_held_.clear();
  publish_held();
  rto_.reset();
}

bool Completer::outstanding() const {
  return psn_diff(conn_.requester().next_psn(), una_psn_) > 0;
}

void Completer::on_first_send(uint32_t psn) {
  if (rto_.wants_sample()) rto_.on_first_send(psn, conn_.qp().ctx().clock.now());
}

// Never shorter than the QP's Local ACK Timeout (IBA 9.7.6.1.1), longer when the
// measured round trip is, doubling with each consecutive timeout, bounded.
Nanos Completer::retry_interval(uint32_t extra_doublings) const {
  const int64_t floor = ack_timeout_ns(conn_.qp().attr().timeout);
  return rto_.interval(floor == INT64_MAX ? kNever : floor,
                       conn_.qp().ctx().config.max_retry_interval_ns, extra_doublings);
}

void Completer::restart_timer(Nanos now) {
  const Nanos wait = retry_interval();
  deadline_ = wait == kNever ? kNever : now + wait;
  probe_deadline_ = kNever;
  if (conn_.recovery().selective()) probe_deadline_ = std::min(deadline_, now + probe_interval());
  conn_.qp().arm_timer(deadline());
}

// Two smoothed round trips (RFC 8985 §7.2's PTO), at least kMinProbeNs: ACKs are
// coalesced (AckReq every few packets) and a software peer's come when its
// scheduler lets them. Doubles with each unanswered probe.
// While READ responses are held behind gaps, what is awaited is the answers to
// asks, due within answer_wait() (the responder sends them ahead of its queue).
Nanos Completer::probe_interval() const {
  constexpr Nanos kMinProbeNs = 200'000;
  constexpr Nanos kUnmeasuredNs = 1'000'000;
  Nanos base = rto_.measured() ? std::max(kMinProbeNs, 2 * rto_.srtt()) : kUnmeasuredNs;
  if (responses_held_.count() > 0) base = std::min(base, answer_wait());
  return base << std::min<uint32_t>(probes_, 16);
}

// RACK-TLP probes silence (RFC 8985 §7.2): a READ response held behind a gap
// advances nothing, but says the peer is there and what was asked is arriving,
// so the probe waits again. (A probe while a READ's responses still streamed in
// asked for all of them again: 125 k duplicates in 10 s at 5 % loss.) A SACK
// does not re-arm it: a WRITE's probe resends one packet, and re-arming it on
// SACKs measured no better (loopback, 5 % loss: 530–560 against 526–641 MB/s).
void Completer::peer_heard(Nanos now) {
  if (probe_deadline_ == kNever) return;
  probes_ = 0;
  probe_deadline_ = std::min(deadline_, now + probe_interval());
}

void Completer::on_probe_timer(Nanos now) {
  probe_deadline_ = kNever;
  if (!sending_state() || !outstanding()) return;
  // A READ waiting for responses: the probe asks for the gaps whose answers are
  // overdue and for the tail nothing was heard of (completer_selective.cc), and
  // nothing more while every answer may still come: resending the READ's
  // request from the loss recovery's oldest PSN would ask for all of it again.
  const bool reads_waiting = responses_held_.count() > 0 || last_response_asked();
  const bool asked = reads_waiting && repair_read_gaps(now, true);
  const std::optional<uint32_t> psn =
      reads_waiting ? std::nullopt
                    : conn_.recovery().on_probe(una_psn_, conn_.requester().high_psn());
  if (asked) bump(conn_.qp().ctx().counters.tail_probes);
  if (psn) {
    bump(conn_.qp().ctx().counters.tail_probes);
    conn_.requester().resend_from(*psn);
    conn_.requester().run(now);
  }
  ++probes_;
  const Nanos next = now + probe_interval();
  if (next < deadline_) probe_deadline_ = next;
  conn_.qp().arm_timer(deadline());
}

void Completer::on_sent(Nanos now) {
  if (!conn_.acknowledged()) return complete_unacknowledged();
  complete_local_heads();
  if (deadline_ == kNever && outstanding()) restart_timer(now);
}

// IBA 9.8 (UC): no response will come; a WQE is complete once its last packet is
// on its way (its completion becomes visible after the turn's send, Device::turn).
void Completer::complete_unacknowledged() {
  Ring<SendWqe>& sq = conn_.qp().sq();
  while (!sq.empty() && sq.front().state == SendState::kSent) {
    una_psn_ = psn_add(sq.front().last_psn(), 1);
    complete_head(IBV_WC_SUCCESS);
  }
}

// A bind or local invalidation (executed when the requester reached it) completes as
// soon as it is the oldest WQE: nothing on the wire answers it.
void Completer::complete_local_heads() {
  Ring<SendWqe>& sq = conn_.qp().sq();
  while (!sq.empty() && (sq.front().is_local() || sq.front().on_host) &&
         sq.front().state == SendState::kSent)
    complete_head(IBV_WC_SUCCESS);
}

void Completer::on_response(PacketView packet, Nanos now, Nanos arrival) {
  response_arrival_ = arrival;
  take_response(packet, now);
  response_arrival_ = 0;
}

void Completer::take_response(PacketView packet, Nanos now) {
  const ibv_qp_state state = conn_.qp().state();
  if (state != IBV_QPS_RTS && state != IBV_QPS_SQD) return;
  const uint32_t psn = packet.psn();
  const OpcodeInfo& info = packet.info();
  // IBA 9.7.5.2.1: a response outside [una, first PSN never sent) answers nothing
  // outstanding (a late duplicate, or a ghost): ignore it. A SACK whose gap is at
  // una acknowledges nothing new (an ACK came first) but names what is held.
  const uint32_t lowest = info.is(kOpSack) ? psn_add(una_psn_, -1) : una_psn_;
  if (psn_before(psn, lowest) || !psn_before(psn, conn_.requester().high_psn())) {
    if (conn_.liveness().answers_probe(psn)) return;  // the peer is alive: nothing else
    bump(conn_.qp().ctx().counters.out_of_sequence_responses);
    return;
  }
  if (info.is(kOpAck)) {
    on_ack(packet, now);
  } else if (info.any(kOpReadResponse | kOpAtomicAck)) {
    if (hold_response(packet, now)) return;
    if (info.is(kOpReadResponse)) {
      on_read_response(packet, now);
    } else {
      on_atomic_ack(packet, now);
    }
    if (responses_held_.count() > 0) run_held_responses(now);
  } else if (info.is(kOpSack)) {
    on_sack(packet, now);
  }
}

// Selective repeat (selective_repeat.h): acknowledges as an ACK does, then resends
// what the loss recovery finds lost. Not charged to retry_cnt: the responder is
// plainly alive and making progress; a resend that is lost again is found by the
// next SACK, or by the timer, which is charged.
void Completer::on_sack(PacketView packet, Nanos now) {
  EngineCounters& counters = conn_.qp().ctx().counters;
  LossRecovery& recovery = conn_.recovery();
  const size_t bitmap_bytes = sack_bitmap_bytes(conn_.sack_span());
  const size_t hold_bytes = conn_.ack_hold() ? kAckHoldBytes : 0;
  if (!recovery.selective() || packet.payload().size() != bitmap_bytes + hold_bytes ||
      syndrome::type(uint8_t(packet.get(aeth::kSyndrome))) != syndrome::kAck) {
    bump(counters.sacks_refused);
    return;
  }
  bump(counters.sacks_received);
  const std::span<const uint8_t> bitmap = packet.payload().first(bitmap_bytes);
  if (hold_bytes != 0) take_hold(packet.payload().subspan(bitmap_bytes));
  if (!acknowledge_through(packet.psn(), now) || sq_empty_or_unsent()) return;
  const uint32_t first_missing = psn_add(packet.psn(), 1);
  // The newest PSN held, if it was ever sent (a SACK naming more is a bad one:
  // its newest would hide the next SACKs' news).
  if (const std::optional<uint32_t> bit = sack_last_marked(bitmap)) {
    const uint32_t newest = psn_add(first_missing, int32_t(*bit) + 1);
    if (psn_before(newest, conn_.requester().high_psn())) {
      conn_.rate().on_sacked(newest, now, sample_end(now));
      conn_.publish_rate();
    }
  }
  const std::optional<uint32_t> lost =
      recovery.on_sack(una_psn_, first_missing, bitmap, conn_.requester().high_psn());
  if (!lost) return;
  conn_.rate().on_loss(now, conn_.requester().high_psn());
  conn_.requester().resend_from(*lost);
  conn_.requester().run(now);
}

// The responder held what this response answers for the time it names: that is
// not the network's, and the round trip ends that much earlier (wire/ack_hold.h).
void Completer::take_hold(std::span<const uint8_t> hold) {
  if (response_arrival_ != 0) response_arrival_ -= read_ack_hold(hold.first<kAckHoldBytes>());
}

void Completer::on_ack(PacketView packet, Nanos now) {
  if (packet.opcode() == op::kRcTimedAck) {
    // Only agreed connections' responders send it: from any other, or malformed,
    // refused as a SACK would be.
    if (!conn_.ack_hold() || packet.payload().size() != kAckHoldBytes) {
      bump(conn_.qp().ctx().counters.sacks_refused);
      return;
    }
    take_hold(packet.payload());
  }
  const uint8_t syn = uint8_t(packet.get(aeth::kSyndrome));
  if (syndrome::type(syn) == syndrome::kAck) {
    acknowledge_through(packet.psn(), now);
  } else {
    on_nak(syn, packet.psn(), now);
  }
}

bool Completer::acknowledge_through(uint32_t psn, Nanos now) {
  Ring<SendWqe>& sq = conn_.qp().sq();
  bool progressed = false;
  bool lost_response = false;
  while (!sq.empty() && sq.front().state != SendState::kQueued) {
    SendWqe& w = sq.front();
    if (w.is_local() || w.on_host) {  // executed already; every WQE before it has completed
      complete_head(IBV_WC_SUCCESS);
      continue;
    }
    if (w.needs_response()) {
      // IBA 9.7.5.2.3: responses come in PSN order, so an ACK at or beyond the
      // response still awaited means that response was lost: ask again from there.
      const uint32_t awaited = psn_add(w.first_psn, w.read_packets_received);
      lost_response = !psn_before(psn, awaited);
      break;
    }
    const uint32_t last = w.last_psn();
    if (psn_before(psn, last)) {
      if (!psn_before(psn, una_psn_)) {  // part of a long message acknowledged
        una_psn_ = psn_add(psn, 1);
        progressed = true;
      }
      break;
    }
    una_psn_ = psn_add(last, 1);
    complete_head(IBV_WC_SUCCESS);
    progressed = true;
  }
  if (progressed) progress_made(now);
  if (lost_response && responses_held_.count() > 0) {
    repair_read_gaps(now);  // selective repeat: what is missing is asked for
  } else if (lost_response && !read_rerequested_) {
    retry(una_psn_, now);
  }
  return !lost_response;
}

void Completer::on_nak(uint8_t syn, uint32_t psn, Nanos now) {
  EngineCounters& counters = conn_.qp().ctx().counters;
  // A NAK acknowledges everything before its PSN (IBA 9.7.5.2.2).
  if (!acknowledge_through(psn_add(psn, -1), now)) return;
  if (sq_empty_or_unsent()) return;
  if (syndrome::type(syn) == syndrome::kRnrNak) {
    bump(counters.rnr_naks_received);
    // IBA 9.7.5.2.8: rnr_retry 7 retries forever.
    if (conn_.qp().attr().rnr_retry != 7) {
      if (rnr_retries_left_ == 0) return fail_head(IBV_WC_RNR_RETRY_EXC_ERR, now);
      --rnr_retries_left_;
    }
    const Nanos wait = Nanos(kRnrTimerMicros[syndrome::value(syn)]) * 1000;
    conn_.requester().on_loss(psn, LossCause::kRnr, now);
    conn_.requester().pause_until(now + wait);
    conn_.qp().arm_timer(now + wait);
    deadline_ = kNever;  // no ACK timeout, nor probe, while waiting out the RNR timer
    probe_deadline_ = kNever;
    return;
  }
  if (syndrome::type(syn) != syndrome::kNak) {  // IBA Table 42: reserved type
    bump(counters.out_of_sequence_responses);
    return;
  }
  switch (syndrome::value(syn)) {
    case syndrome::kNakPsnSequence:
      bump(counters.seq_naks_received);
      return retry(psn, now);
    case syndrome::kNakInvalidRequest:
      bump(counters.error_naks_received);
      return fail_head(IBV_WC_REM_INV_REQ_ERR, now);
    case syndrome::kNakRemoteAccess:
      bump(counters.error_naks_received);
      return fail_head(IBV_WC_REM_ACCESS_ERR, now);
    default:  // remote operational error, or a reserved code
      bump(counters.error_naks_received);
      return fail_head(IBV_WC_REM_OP_ERR, now);
  }
}

bool Completer::sq_empty_or_unsent() {
  Ring<SendWqe>& sq = conn_.qp().sq();
  return sq.empty() || sq.front().state == SendState::kQueued;
}

void Completer::on_read_response(PacketView packet, Nanos now) {
  const uint32_t psn = packet.psn();
  // A READ response acknowledges every request before it (IBA 9.7.5.2.1).
  if (!acknowledge_through(psn_add(psn, -1), now)) return;
  if (sq_empty_or_unsent() || !conn_.qp().sq().front().is_read()) return;
  SendWqe& w = conn_.qp().sq().front();
  if (psn != psn_add(w.first_psn, w.read_packets_received)) {
    bump(conn_.qp().ctx().counters.out_of_sequence_responses);
    return;
  }
  if (!response_in_place(w, packet)) {
    bump(conn_.qp().ctx().counters.bad_read_responses);
    return;
  }
  const uint32_t mtu = conn_.path().mtu;
  const uint64_t offset = uint64_t(w.read_packets_received) * mtu;
  const uint64_t expected = std::min<uint64_t>(mtu, w.length - std::min<uint64_t>(offset, w.length));
  std::span<uint8_t> data = packet.payload();
  if (data.size() != expected) return fail_head(IBV_WC_BAD_RESP_ERR, now);
  if (!place(w, offset, data)) return fail_head(IBV_WC_LOC_PROT_ERR, now);
  ++w.read_packets_received;
  una_psn_ = psn_add(psn, 1);
  if (w.read_packets_received == w.npackets) complete_head(IBV_WC_SUCCESS);
  progress_made(now);
}

// IBA 9.7.5.2.5 / 9.2.1: the responses to one READ request are FIRST, MIDDLE ...,
// LAST, or a single ONLY, and those with an AETH carry an ACK. A packet at the
// awaited PSN that breaks this (an ONLY inside a longer request, a LAST where FIRST
// belongs, a NAK syndrome) is not data of this READ: it is dropped and counted,
// and the retry timer asks again (issue 6 defect 2).
// A re-request from inside a READ (IBA 9.7.5.1.2: the responder re-executes it
// from its PSN) may be answered in either of two forms: afresh (FIRST at the
// re-requested PSN, as softrdma's responder does) or as the continuation of the
// first request for that range (MIDDLE ... LAST, as Linux Soft-RoCE does; its own
// completer takes both). Late responses to the first request have the second
// form too. Both are the same bytes at the same PSNs, so both are taken.
bool Completer::response_in_place(const SendWqe& w, PacketView packet) const {
  const uint32_t i = w.read_packets_received;
  if (i >= w.next_packet) return false;  // not asked for yet
  const bool acked = !packet.info().has(Header::kAeth) ||
                     syndrome::type(uint8_t(packet.get(aeth::kSyndrome))) == syndrome::kAck;
  // Selective repeat asks again for parts of a request (completer_selective.cc):
  // its answers begin anywhere; the PSN says where the bytes go.
  if (conn_.recovery().selective()) return acked;
  if (i < w.read_chunk_begin) return false;  // not asked for now
  const uint8_t opcode = uint8_t(packet.get(bth::kOpcode)) & 0x1f;
  const auto in_request = [&](uint32_t begin, uint32_t end) {
    return opcode == message_operation(MessageKind::kReadResponse, i - begin, end - begin);
  };
  const bool in_sequence = in_request(w.read_chunk_begin, w.next_packet) ||
                           (w.read_range_begin < w.read_chunk_begin &&
                            in_request(w.read_range_begin, w.read_requested));
  return in_sequence && acked;
}

void Completer::on_atomic_ack(PacketView packet, Nanos now) {
  const uint32_t psn = packet.psn();
  if (!acknowledge_through(psn_add(psn, -1), now)) return;
  if (sq_empty_or_unsent()) return;
  SendWqe& w = conn_.qp().sq().front();
  if (!w.is_atomic() || w.first_psn != psn) return;
  // IBA 9.4.5: the original remote value lands in the local buffer (host order).
  const uint64_t original = packet.get(atomic_ack_eth::kOriginalData);
  uint8_t bytes[8];
  std::memcpy(bytes, &original, sizeof bytes);
  if (!place(w, 0, bytes)) return fail_head(IBV_WC_LOC_PROT_ERR, now);
  w.read_packets_received = 1;
  una_psn_ = psn_add(psn, 1);
  complete_head(IBV_WC_SUCCESS);
  progress_made(now);
}

// Writes response bytes into the WQE's local buffers; false (counted when the
// memory was unmapped) is a local protection error (IBA 10.8.3.1).
bool Completer::place(const SendWqe& w, uint64_t offset, std::span<const uint8_t> data) {
  Qp& qp = conn_.qp();
  AccessError why = AccessError::kNone;
  if (scatter(qp.ctx().mrs.access(), qp.pd(), w.sgl, offset, data, &why)) return true;
  if (why == AccessError::kUnmapped) bump(qp.ctx().counters.local_access_unmapped);
  return false;
}

void Completer::complete_head(ibv_wc_status status) {
  conn_.qp().sq().front().state = SendState::kComplete;
  conn_.qp().complete_send_head(status);
}

void Completer::fail_head(ibv_wc_status status, Nanos now) {
  if (!sending_state()) return;
  if (!conn_.qp().sq().empty()) conn_.qp().sq().front().status = status;
  conn_.fail(now, std::nullopt);
}

// Forward progress reloads both retry counts (IBA 9.7.6.1.3: they count
// consecutive failures) and lets the requester use the space it freed.
void Completer::progress_made(Nanos now) {
  const ibv_qp_attr& attr = conn_.qp().attr();
  retries_left_ = attr.retry_cnt;
  rnr_retries_left_ = attr.rnr_retry;
  read_rerequested_ = false;
  probes_ = 0;
  rto_.on_acknowledged(una_psn_, now);
  // The delay control's sample; a response's progress ends its round trip at the
  // response's arrival.
  conn_.rate().on_acknowledged(una_psn_, now, sample_end(now));
  conn_.publish_rate();
  deadline_ = kNever;
  probe_deadline_ = kNever;
  if (outstanding()) restart_timer(now);
  conn_.requester().on_progress(una_psn_, now);
  conn_.requester().run(now);
}

void Completer::retry(uint32_t psn, Nanos now, Cause cause) {
  if (!sending_state()) return;
  EngineCounters& counters = conn_.qp().ctx().counters;
  // This retry's place in the run without progress; retry_cnt + 1 is the one refused.
  raise_to(counters.retry_streak_max, conn_.qp().attr().retry_cnt - retries_left_ + 1u);
  if (retries_left_ == 0) return fail_head(IBV_WC_RETRY_EXC_ERR, now);
  --retries_left_;
  bump(counters.retries);
  // Late responses to what was sent before this retry must not trigger another:
  // one retry per gap until progress or the next timeout.
  read_rerequested_ = true;
  rto_.on_retry();  // Karn: what is resent times no round trip
  if (cause != Cause::kTimeout) conn_.rate().on_loss(now, conn_.requester().high_psn());
  conn_.requester().on_loss(psn, cause == Cause::kTimeout ? LossCause::kTimeout : LossCause::kNak,
                           now);
  restart_timer(now);
  conn_.requester().run(now);
}

bool Completer::sending_state() const {
  const ibv_qp_state s = conn_.qp().state();
  return s == IBV_QPS_RTS || s == IBV_QPS_SQD;
}

void Completer::stop_timers() {
  deadline_ = kNever;
  probe_deadline_ = kNever;
  read_rerequested_ = false;
}

void Completer::on_timer(Nanos now) {
  if (probe_deadline_ != kNever && now >= probe_deadline_ && now < deadline_)
    return on_probe_timer(now);
  if (deadline_ == kNever || now < deadline_) return;
  deadline_ = kNever;
  if (!sending_state()) return;  // a timer left from before Error/Reset
  if (!outstanding()) return;
  bump(conn_.qp().ctx().counters.retransmit_timeouts);
  rto_.on_timeout();  // the retry's timer waits twice as long (RFC 6298 5.5)
  conn_.rate().on_timeout(now);
  retry(una_psn_, now, Cause::kTimeout);
}

}  // namespace softrdma::engine::rc
