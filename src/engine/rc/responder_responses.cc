// The responder's queue of READ responses and ATOMIC acknowledgements (IBA
// 9.7.5.1.2, 9.7.5.1.7), produced a burst at a time by the engine's turn
// (threading.md). Part of Responder, split from responder.cc by concern.
#include "engine/rc/responder.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "engine/device.h"
#include "engine/guarded_memory.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/sgl.h"
#include "samehost/host.h"
#include "wire/messages.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

using namespace wire;

// `duplicate`: an answer to a repeated request. Those may not take the room the
// new READ/ATOMICs the requester may have outstanding need, however many copies
// the network delivers (response_queue.h); a refused duplicate is answered when
// the requester asks again.
bool Responder::queue_response(const Response& response, bool duplicate) {
  if (!responses_.admits(duplicate)) {
    bump(conn_.qp().ctx().counters.responses_refused);
    return false;
  }
  Response r = response;
  r.duplicate = duplicate;
  if (duplicate && selective_) {
    // A part asked for again goes first, ahead of what is queued (a READ being
    // sent included: it goes on from where it was): the requester holds every
    // later response until this one fills its gap, so behind the queue it cost
    // a whole pipe of waiting (docs/decisions/selective-repeat.md). A requester
    // that agreed to selective repeat takes responses in any order.
    responses_.push_front(r);
  } else {
    responses_.push_back(r);
  }
  // The responses acknowledge everything before them; not a part of a READ that
  // selective repeat asked for again (behind what the pending ACK covers).
  if (!duplicate || !selective_) {
    ack_pending_ = false;
    ack_twice_ = false;
  }
  conn_.qp().want_tx();
  return true;
}

// A duplicate READ restarts the responses from its PSN (IBA 9.7.5.1.2): what was
// queued from there on is dropped; the requester resends those requests too.
void Responder::drop_responses_from(uint32_t psn) {
  while (!responses_.empty() && psn_diff(responses_.back().psn, psn) >= 0) responses_.pop_back();
}

void Responder::produce_all() {
  const Nanos now = conn_.qp().ctx().clock.now();
  while (produce(UINT32_MAX, now)) {
  }
}

bool Responder::produce(uint32_t budget, Nanos now) {
  if (!ready_to_receive(conn_.qp().state())) responses_.clear();
  // READ responses are this side's data: the pacer's (rate_control.h); a held
  // connection goes on from its timer (RcConnection::on_timer).
  RateControl& rate = conn_.rate();
  const uint32_t packet_bytes = paced_packet_bytes(conn_.path());
  const bool paced = !responses_.empty() && rate.paced();
  if (paced) budget = std::min(budget, rate.packets_allowed(now, packet_bytes));
  while (!responses_.empty() && budget > 0) {
    Response& r = responses_.front();
    if (r.is_read) {
      const std::optional<uint32_t> produced = send_read_packets(r, budget);
      if (paced && produced) rate.on_sent(uint64_t(*produced) * packet_bytes);
      if (!produced) {
        // The responses before it went out; the NAK names the first one missing,
        // the one the requester awaits (an older PSN would read as a stale ACK).
        responses_.clear();
        fail(unmapped(), nak_psn_, now);
        return false;
      }
      budget -= *produced;
      if (r.sent != packets_for(r.len, conn_.path().mtu)) break;
    } else {
      send_atomic_ack(r);
      --budget;
    }
    responses_.pop_front();
  }
  // Held by the pacer: its timer resumes the responses, not another turn at once.
  if (paced) conn_.arm_pacer_timer();
  if (!responses_.empty()) return !paced || !rate.bucket_held();
  // ACKs of later requests waited for the responses (PSN order, IBA 9.7.5.1.6).
  on_burst_end();
  return false;
}

// IBA 9.7.5.1.7: FIRST/LAST/ONLY carry an AETH; every response takes one PSN.
std::optional<uint32_t> Responder::send_read_packets(Response& r, uint32_t budget) {
  Qp& qp = conn_.qp();
  const uint32_t mtu = conn_.path().mtu;
  const uint32_t n = packets_for(r.len, mtu);
  const MrTable& mrs = qp.ctx().mrs;
  // The range resolved when the READ executed serves while no MR went since;
  // after a dereg every chunk is looked up again (a revoked one ends the READ).
  if (r.generation != mrs.generation()) r.host = nullptr;
  uint32_t produced = 0;
  for (; r.sent < n && produced < budget; ++r.sent, ++produced) {
    const uint32_t i = r.sent;
    const uint32_t chunk = std::min<uint32_t>(mtu, r.len - i * mtu);
    const uint8_t opcode =
        conn_.opcode(message_operation(MessageKind::kReadResponse, i, n));
    AccessError why;
    const uint8_t* src = chunk == 0         ? nullptr
                         : r.host != nullptr ? r.host + uint64_t(i) * mtu
                                             : mrs.access().resolve_remote(
                                                   r.rkey, qp.pd(), qp.qpn(),
                                                   r.va + uint64_t(i) * mtu, chunk,
                                                   IBV_ACCESS_REMOTE_READ, why);
    if (chunk != 0 && src == nullptr) {  // revoked mid-READ: the requester retries
      r.sent = n;
      return produced;
    }
    PacketView out = conn_.emit(opcode, chunk, psn_add(r.psn, i));
    if (out.info().has(Header::kAeth)) {
      out.set(aeth::kSyndrome, syndrome::ack());
      out.set(aeth::kMsn, r.msn);
    }
    if (chunk != 0 && !guarded_copy(out.payload().data(), src, chunk)) {
      conn_.tx().discard_last();
      nak_psn_ = psn_add(r.psn, i);
      return std::nullopt;
    }
    if (i == 0 && r.repeat_first) conn_.tx().repeat_last();
  }
  return produced;
}

}  // namespace softrdma::engine::rc
