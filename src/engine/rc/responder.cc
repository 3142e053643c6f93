#include "engine/rc/responder.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <optional>

#include "engine/device.h"
#include "engine/guarded_memory.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/sgl.h"
#include "samehost/host.h"
#include "wire/ack_hold.h"
#include "wire/messages.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

using namespace wire;

void Responder::reset(uint32_t rq_psn, uint32_t max_dest_rd_atomic, bool selective) {
  epsn_ = rq_psn & kPsnMask;
  selective_ = selective;
  sack_pending_ = false;
  reorder_.clear();
  msn_ = 0;
  nak_outstanding_ = false;
  ack_pending_ = false;
  ack_twice_ = false;
  message_ = Message::kNone;
  recv_offset_ = 0;
  atomic_results_.assign(std::max<uint32_t>(1, max_dest_rd_atomic), AtomicResult{});
  atomic_next_ = 0;
  responses_.reset(ResponseQueue::limits_for(max_dest_rd_atomic, selective_, conn_.sack_span()));
}

void Responder::resize_atomic_results(uint32_t max_dest_rd_atomic) {
  const size_t size = std::max<uint32_t>(1, max_dest_rd_atomic);
  if (size == atomic_results_.size()) return;
  std::vector<AtomicResult> kept(size);
  // Keep the newest results: walk back from the slot written last.
  const size_t old = atomic_results_.size();
  for (size_t i = 0; i < std::min(size, old); ++i)
    kept[size - 1 - i] = atomic_results_[(atomic_next_ + old - 1 - i) % old];
  atomic_results_ = std::move(kept);
  atomic_next_ = 0;
  responses_.set_limits(ResponseQueue::limits_for(uint32_t(size), selective_, conn_.sack_span()));
}

void Responder::on_request(PacketView p, Nanos now) {
  if (!ready_to_receive(conn_.qp().state())) {
    bump(conn_.qp().ctx().counters.rx_qp_not_ready);
    return;
  }
  if (!conn_.acknowledged()) return on_unacknowledged_request(p, now);
  const int32_t ahead = psn_diff(p.psn(), epsn_);
  if (ahead < 0) return on_duplicate(p, now);
  if (ahead > 0) {
    // Selective repeat: held until the gap fills (responder_selective.cc).
    if (selective_) return hold_out_of_order(p, uint32_t(ahead));
    // IBA 9.7.5.1.3: a gap. NAK once, then drop silently until epsn arrives.
    if (!nak_outstanding_) {
      nak_outstanding_ = true;
      bump(conn_.qp().ctx().counters.seq_naks_sent);
      send_ack(syndrome::nak(syndrome::kNakPsnSequence), epsn_);
    }
    return;
  }
  nak_outstanding_ = false;
  in_order_arrival_ = taken_arrival_;
  if (execute_in_order(p, now) && reorder_.count() > 0) execute_held(now);
}

bool Responder::execute_in_order(PacketView p, Nanos now) {
  nak_psn_ = p.psn();
  const Verdict verdict = execute(p);
  switch (verdict) {
    case Verdict::kDone:
      // READ and ATOMIC are answered by their responses, which acknowledge them.
      if (p.ack_req() && !p.info().any(kOpReadRequest | kOpAtomic)) ack_pending_ = true;
      return true;
    case Verdict::kRnr:
      // IBA 9.7.5.1.4: no receive WQE. The requester retries after min_rnr_timer;
      // until then later packets are dropped without another NAK (and what was
      // held is dropped: the requester resends everything from this PSN).
      nak_outstanding_ = true;
      reorder_.clear();
      bump(conn_.qp().ctx().counters.rnr_naks_sent);
      send_ack(syndrome::rnr_nak(conn_.qp().attr().min_rnr_timer), p.psn());
      return false;
    default:
      reorder_.clear();
      fail(verdict, nak_psn_, now);
      return false;
  }
}

Responder::Verdict Responder::check_sequence_and_length(PacketView p) const {
  const OpcodeInfo& info = p.info();
  if (!info.is(kOpRequest)) return Verdict::kInvalidRequest;
  // IBA 9.7.5.1.5 (C9-92..): MIDDLE/LAST continue the message in progress; FIRST and
  // ONLY may only begin one.
  const bool continues = info.any(kOpMiddle) || (info.is(kOpLast) && !info.is(kOpFirst));
  if (message_ == Message::kNone && continues) return Verdict::kInvalidRequest;
  if (message_ == Message::kSend && !(continues && info.is(kOpSend)))
    return Verdict::kInvalidRequest;
  if (message_ == Message::kWrite && !(continues && info.is(kOpWrite)))
    return Verdict::kInvalidRequest;
  // IBA 9.7.5.1.5: FIRST and MIDDLE carry exactly one MTU, LAST and ONLY at most one.
  const size_t len = p.payload().size();
  const uint32_t mtu = conn_.path().mtu;
  if (info.any(kOpPayload)) {
    if ((info.any(kOpMiddle) || (info.is(kOpFirst) && !info.is(kOpLast))) && len != mtu)
      return Verdict::kInvalidRequest;
    if (len > mtu) return Verdict::kInvalidRequest;
  }
  // IBA 9.7.5.1.5: an opcode that carries no payload (READ request, ATOMIC) with
  // bytes after its headers is a malformed request, not a READ of a guessed length.
  if (!info.any(kOpPayload) && len != 0) return Verdict::kInvalidRequest;
  // IBA 10.2.4.2: the QP's own remote access rights (access_check.h), at every
  // packet of a message.
  const uint32_t allowed = uint32_t(conn_.qp().attr().qp_access_flags);
  if (info.any(kOpWrite | kOpAtomicWrite) && !qp_allows(allowed, IBV_ACCESS_REMOTE_WRITE))
    return Verdict::kInvalidRequest;
  if (info.is(kOpReadRequest) && !qp_allows(allowed, IBV_ACCESS_REMOTE_READ))
    return Verdict::kInvalidRequest;
  if (info.is(kOpAtomic) && !qp_allows(allowed, IBV_ACCESS_REMOTE_ATOMIC))
    return Verdict::kInvalidRequest;
  return Verdict::kDone;
}

Responder::Verdict Responder::execute(PacketView p) {
  if (Verdict v = check_sequence_and_length(p); v != Verdict::kDone) return v;
  const OpcodeInfo& info = p.info();
  // IBA A14: an XRC request names the XRC SRQ that receives it and whose PD its
  // memory accesses are checked against; one outside the QP's domain is invalid.
  if (info.has(Header::kXrceth) && !conn_.qp().select_xrc_srq(uint32_t(p.get(xrceth::kSrqn))))
    return Verdict::kInvalidRequest;
  if (info.is(kOpSend)) return do_send(p);
  if (info.is(kOpWrite)) return do_write(p);
  if (info.is(kOpAtomicWrite)) return do_atomic_write(p);
  if (info.is(kOpReadRequest)) return do_read(p);
  return do_atomic(p);
}

Responder::Verdict Responder::do_send(PacketView p) {
  const OpcodeInfo& info = p.info();
  Qp& qp = conn_.qp();
  const bool first = info.is(kOpFirst);
  // A TM SRQ matches the message by the TMH its first packet begins with
  // (tag_matching.md), and places only part of a matched one.
  RecvWqe* taken = !first          ? qp.current_recv()
                   : qp.tm_srq() ? qp.take_tm_recv(p.payload(), info.is(kOpLast))
                                 : qp.take_recv();
  if (taken == nullptr) return first ? Verdict::kRnr : Verdict::kInvalidRequest;
  if (first) recv_offset_ = 0;
  RecvWqe& recv = *taken;
  std::span<const uint8_t> data = qp.placed_part(p.payload(), first);
  if (recv_offset_ + data.size() > recv.length) {
    recv.status = IBV_WC_LOC_LEN_ERR;  // IBA 9.7.5.1.5: too long for the buffer
    return Verdict::kInvalidRequest;
  }
  AccessError why = AccessError::kNone;
  if (!scatter(qp.ctx().mrs.access(), qp.pd(), recv.sgl, recv_offset_, data, &why)) {
    // The receive buffer is this side's: a local protection error here, a remote
    // operational error for the requester, be it a bad lkey or unmapped memory.
    if (why == AccessError::kUnmapped) bump(qp.ctx().counters.peer_access_unmapped);
    recv.status = IBV_WC_LOC_PROT_ERR;
    return Verdict::kRemoteOperational;
  }
  recv_offset_ += data.size();
  message_ = Message::kSend;
  epsn_ = psn_add(epsn_, 1);
  if (info.is(kOpLast)) {
    if (Verdict v = invalidate_for_send(p); v != Verdict::kDone) return v;
    complete_receive(p, IBV_WC_RECV, uint32_t(recv_offset_));
  }
  return Verdict::kDone;
}

Responder::Verdict Responder::do_write(PacketView p) {
  const OpcodeInfo& info = p.info();
  Qp& qp = conn_.qp();
  if (info.is(kOpFirst)) {
    write_va_ = p.get(reth::kVa);
    write_rkey_ = uint32_t(p.get(reth::kRkey));
    write_length_ = uint32_t(p.get(reth::kDmaLength));
    write_remaining_ = write_length_;
    write_host_ = nullptr;
  }
  // IBA 9.7.4.1.2: WRITE with immediate consumes a receive WQE at its last packet.
  if (info.is(kOpConsumesRecv) && qp.take_recv() == nullptr) return Verdict::kRnr;
  std::span<const uint8_t> data = p.payload();
  if (data.size() > write_remaining_) return Verdict::kInvalidRequest;
  if (info.is(kOpLast) && data.size() != write_remaining_) return Verdict::kInvalidRequest;
  if (!data.empty()) {
    uint8_t* dst = write_destination();
    if (dst == nullptr) return Verdict::kRemoteAccess;
    if (!guarded_copy(dst, data.data(), data.size())) return unmapped();
  }
  write_va_ += data.size();
  write_remaining_ -= data.size();
  message_ = info.is(kOpLast) ? Message::kNone : Message::kWrite;
  epsn_ = psn_add(epsn_, 1);
  if (info.is(kOpConsumesRecv)) {
    complete_receive(p, IBV_WC_RECV_RDMA_WITH_IMM, write_length_);
  } else if (info.is(kOpLast)) {
    ++msn_;
  }
  return Verdict::kDone;
}

// Where the next `bytes` of the WRITE in progress go. The rest of the message's
// range (R_Key, PD, bounds, access) is checked once, at its first data packet, as
// IBA 9.7.5.1.? has the RETH's whole range validated, and reused while no MR was
// deregistered since (MrTable::generation): no lock or lookup per packet.
uint8_t* Responder::write_destination() {
  Qp& qp = conn_.qp();
  const MrTable& mrs = qp.ctx().mrs;
  const uint64_t placed = write_length_ - write_remaining_;
  if (write_host_ == nullptr || write_generation_ != mrs.generation()) {
    AccessError why;
    write_generation_ = mrs.generation();
    write_host_at_ = placed;
    write_host_ = mrs.access().resolve_remote(write_rkey_, qp.pd(), qp.qpn(), write_va_,
                                              write_remaining_, IBV_ACCESS_REMOTE_WRITE, why);
    if (write_host_ == nullptr) return nullptr;
  }
  return write_host_ + (placed - write_host_at_);
}

void Responder::complete_receive(PacketView p, ibv_wc_opcode opcode, uint32_t byte_len) {
  const OpcodeInfo& info = p.info();
  Qp& qp = conn_.qp();
  ibv_wc wc{};
  wc.wr_id = qp.current_recv()->wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = qp.qpn();
  wc.src_qp = conn_.path().dest_qpn;
  if (info.has(Header::kImmDt)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = htonl(uint32_t(p.get(immdt::kImmediate)));
  }
  if (info.has(Header::kIeth)) {
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = uint32_t(p.get(ieth::kRkey));
  }
  qp.complete_recv_head(wc, p.get(bth::kSolicited) != 0);
  ++msn_;
  message_ = Message::kNone;
}

Responder::Verdict Responder::do_read(PacketView p) {
  const uint64_t va = p.get(reth::kVa);
  const uint32_t rkey = uint32_t(p.get(reth::kRkey));
  const uint32_t len = uint32_t(p.get(reth::kDmaLength));
  Qp& qp = conn_.qp();
  const RemoteAccess request{IBV_ACCESS_REMOTE_READ, va, len, pd_id(qp.pd()), qp.qpn()};
  if (Verdict v = check_message(request, qp.ctx().config.limits.max_msg_size, false);
      v != Verdict::kDone)
    return v;
  if (!room_for_new_response()) return Verdict::kInvalidRequest;
  Response r;
  r.generation = qp.ctx().mrs.generation();
  if (len > 0) {
    AccessError why;
    r.host = qp.ctx().mrs.access().resolve_remote(rkey, qp.pd(), qp.qpn(), va, len,
                                                       IBV_ACCESS_REMOTE_READ, why);
    if (r.host == nullptr) return Verdict::kRemoteAccess;
  }
  ++msn_;
  r.psn = p.psn();
  r.msn = msn_;
  r.va = va;
  r.rkey = rkey;
  r.len = len;
  if (!queue_response(r)) return Verdict::kInvalidRequest;
  epsn_ = psn_add(epsn_, packets_for(len, conn_.path().mtu));
  return Verdict::kDone;
}

// More READ/ATOMICs outstanding than max_dest_rd_atomic allows (IBA 9.5), or
// with selective repeat more than its span holds (response_queue.h): the
// requester broke the agreed limit. Asked before the request executes, so a
// refused ATOMIC leaves memory and the MSN as they were.
bool Responder::room_for_new_response() {
  if (responses_.admits(false)) return true;
  bump(conn_.qp().ctx().counters.responses_refused);
  return false;
}

Responder::Verdict Responder::unmapped() {
  bump(conn_.qp().ctx().counters.peer_access_unmapped);
  return Verdict::kRemoteAccess;
}

Responder::Verdict Responder::do_atomic(PacketView p) {
  const uint64_t va = p.get(atomic_eth::kVa);
  Qp& qp = conn_.qp();
  // IBA 9.4.5 (o9-13): an ATOMIC's address must be 8-byte aligned.
  const RemoteAccess request{IBV_ACCESS_REMOTE_ATOMIC, va, 8, pd_id(qp.pd()), qp.qpn()};
  if (Verdict v = check_message(request, qp.ctx().config.limits.max_msg_size, true);
      v != Verdict::kDone)
    return v;
  if (!room_for_new_response()) return Verdict::kInvalidRequest;
  uint64_t original = 0;
  {
    auto access = qp.ctx().mrs.access();
    AccessError why;
    uint8_t* host = access.resolve_remote(uint32_t(p.get(atomic_eth::kRkey)), qp.pd(),
                                          qp.qpn(), va, 8, IBV_ACCESS_REMOTE_ATOMIC, why);
    if (host == nullptr) return Verdict::kRemoteAccess;
    // The VA is aligned, but an MR registered with another IOVA may map it to an
    // unaligned host address: no atomic is possible there.
    if (reinterpret_cast<uintptr_t>(host) % 8 != 0) return Verdict::kInvalidRequest;
    const AtomicOp op =
        p.info().is(kOpCompareSwap) ? AtomicOp::kCompareSwap : AtomicOp::kFetchAdd;
    // Same-host peers execute ATOMICs on this memory too, under this lock
    // (IBV_ATOMIC_HCA: atomic with respect to every other ATOMIC of the device).
    std::optional<samehost::AtomicsGuard> host_atomics;
    if (samehost::Host* host = qp.ctx().host) host_atomics.emplace(host->node().header());
    if (!guarded_atomic(op, reinterpret_cast<uint64_t*>(host), p.get(atomic_eth::kCompare),
                        p.get(atomic_eth::kSwapAdd), original))
      return unmapped();
  }
  atomic_results_[atomic_next_] = AtomicResult{p.psn(), original, true};
  atomic_next_ = (atomic_next_ + 1) % uint32_t(atomic_results_.size());
  ++msn_;
  Response r;
  r.is_read = false;
  r.psn = p.psn();
  r.msn = msn_;
  r.original = original;
  if (!queue_response(r)) return Verdict::kInvalidRequest;
  epsn_ = psn_add(epsn_, 1);
  return Verdict::kDone;
}

// IBA 1.5 9.4.6: RDMA ATOMIC WRITE stores its 8 bytes at an aligned address as one
// access (no reader sees half of them), with the rights of an RDMA WRITE; an ACK
// answers it, and a duplicate is only re-acknowledged (on_duplicate).
Responder::Verdict Responder::do_atomic_write(PacketView p) {
  const uint64_t va = p.get(reth::kVa);
  std::span<const uint8_t> data = p.payload();
  if (va % 8 != 0 || p.get(reth::kDmaLength) != 8 || data.size() != 8)
    return Verdict::kInvalidRequest;
  Qp& qp = conn_.qp();
  {
    auto access = qp.ctx().mrs.access();
    AccessError why;
    uint8_t* host = access.resolve(uint32_t(p.get(reth::kRkey)), qp.pd(), va, 8,
                                   IBV_ACCESS_REMOTE_WRITE, why);
    if (host == nullptr) return Verdict::kRemoteAccess;
    if (reinterpret_cast<uintptr_t>(host) % 8 != 0) return Verdict::kInvalidRequest;
    uint64_t value;
    std::memcpy(&value, data.data(), 8);  // the bytes as they were in the sender's memory
    uint64_t before;
    if (!guarded_atomic(AtomicOp::kStore, reinterpret_cast<uint64_t*>(host), 0, value, before))
      return unmapped();
  }
  ++msn_;
  epsn_ = psn_add(epsn_, 1);
  return Verdict::kDone;
}

void Responder::send_atomic_ack(const Response& response) {
  PacketView r = conn_.emit(conn_.opcode(op::kAtomicAcknowledge), 0, response.psn);
  r.set(aeth::kSyndrome, syndrome::ack());
  r.set(aeth::kMsn, response.msn);
  r.set(atomic_ack_eth::kOriginalData, response.original);
}

// Selective repeat: a READ request from `behind` PSNs before epsn reaching past
// it (the requester asked again for a chunk's lost tail and the next chunk,
// whose own request was lost): the part behind epsn is answered as a duplicate,
// the rest executes as the request at epsn it stands for.
void Responder::split_straddling_read(PacketView p, const Response& asked, uint32_t behind,
                                      Nanos now) {
  const uint32_t done = behind * conn_.path().mtu;
  bump(conn_.qp().ctx().counters.reads_split);
  Response duplicate = asked;
  duplicate.len = done;
  queue_response(duplicate, true);
  std::array<uint8_t, 64> copy{};  // BTH, RETH and ICRC: 32 bytes
  if (p.bytes().size() > copy.size()) return;
  std::memcpy(copy.data(), p.bytes().data(), p.bytes().size());
  PacketView rest(std::span<uint8_t>(copy.data(), p.bytes().size()));
  rest.set(bth::kPsn, epsn_);
  rest.set(reth::kVa, asked.va + done);
  rest.set(reth::kDmaLength, asked.len - done);
  on_request(rest, now);
}

// IBA 9.7.5.1.2: duplicates are answered, never executed twice (except READ, which
// is idempotent and re-executed from its own PSN).
void Responder::on_duplicate(PacketView p, Nanos now) {
  EngineCounters& counters = conn_.qp().ctx().counters;
  bump(counters.duplicate_requests);
  const OpcodeInfo& info = p.info();
  if (info.is(kOpReadRequest)) {
    bump(counters.duplicate_reads);
    Response r{.psn = p.psn(), .msn = msn_, .va = p.get(reth::kVa),
               .rkey = uint32_t(p.get(reth::kRkey)),
               .len = uint32_t(p.get(reth::kDmaLength))};
    const uint32_t behind = uint32_t(psn_diff(epsn_, p.psn()));
    if (behind < packets_for(r.len, conn_.path().mtu)) {
      // Go-back-N: only a range that stays behind epsn; a duplicate may not reach
      // new PSNs. Selective repeat lets a READ's next chunk go before the last is
      // whole, so a request lost there leaves epsn inside what a re-request asks.
      if (selective_) split_straddling_read(p, r, behind, now);
      return;
    }
    // Selective repeat asks for missing parts alone (completer_selective.cc): what
    // is queued after them is still wanted, and a lost answer is asked again.
    if (selective_) {
      queue_response(r, true);
      return;
    }
    drop_responses_from(p.psn());
    // The requester asks again from the first response it lacks and drops every
    // later one until that arrives (IBA 9.7.5.2.1, responses in PSN order): its
    // retry is wasted if that one response is lost. A second copy makes that L^2 on
    // a path losing a share L; the requester drops the copy it does not need as a
    // duplicate response (docs/decisions/retransmission.md "A retry's first packet
    // and its answer").
    r.repeat_first = true;
    queue_response(r, true);
  } else if (info.is(kOpAtomic)) {
    for (const AtomicResult& r : atomic_results_) {
      if (r.valid && r.psn == p.psn()) {
        bump(counters.duplicate_atomics_replayed);
        Response replay;
        replay.is_read = false;
        replay.psn = r.psn;
        replay.msn = msn_;
        replay.original = r.original;
        queue_response(replay, true);
        return;
      }
    }
  } else {
    // SEND/WRITE: acknowledged again (coalesced), by two copies of the ACK: a
    // duplicate is what a retry looks like here, and the retry hinges on this one
    // ACK (its packets arrive in one burst and draw one; docs/decisions/
    // retransmission.md "A retry's first packet and its answer").
    ack_pending_ = true;
    ack_twice_ = true;
  }
}

void Responder::on_burst_end() {
  // Responses still queued go first; produce() sends the ACK once they are out.
  if (!responses_.empty()) return;
  if (sack_pending_) return send_sack();  // it acknowledges as the ACK would
  if (!ack_pending_) return;
  ack_pending_ = false;
  send_ack(syndrome::ack(), psn_add(epsn_, -1));
  if (ack_twice_) conn_.tx().repeat_last();
  ack_twice_ = false;
}

void Responder::send_ack(uint8_t syn, uint32_t psn) {
  produce_all();  // PSN order: a NAK must not overtake queued responses
  if (syndrome::type(syn) != syndrome::kAck) {  // a NAK acks before it
    ack_pending_ = false;
    ack_twice_ = false;
  }
  // Agreed: an ACK says how long the responder held what it answers; a NAK is
  // IBA's own.
  const bool timed = conn_.ack_hold() && syndrome::type(syn) == syndrome::kAck;
  PacketView r = timed ? conn_.emit(op::kRcTimedAck, kAckHoldBytes, psn)
                       : conn_.emit(conn_.opcode(op::kAcknowledge), 0, psn);
  r.set(aeth::kSyndrome, syn);
  r.set(aeth::kMsn, msn_);
  if (timed) write_hold(r.payload(), in_order_arrival_);
}

void Responder::write_hold(std::span<uint8_t> out, Nanos arrival) const {
  const Nanos held = arrival == 0 ? 0 : conn_.qp().ctx().clock.now() - arrival;
  write_ack_hold(out.first<kAckHoldBytes>(), held);
}

// IBA 9.9.3.1.2 responder errors (class B/C/D): NAK, then the QP goes to Error; a
// receive WQE the message had taken completes with the error.
void Responder::fail(Verdict verdict, uint32_t psn, Nanos now) {
  bump(conn_.qp().ctx().counters.error_naks_sent);
  uint8_t code = syndrome::kNakRemoteOperational;
  ibv_event_type event = IBV_EVENT_QP_FATAL;
  ibv_wc_status recv_status = IBV_WC_REM_OP_ERR;
  if (verdict == Verdict::kInvalidRequest) {
    code = syndrome::kNakInvalidRequest;
    event = IBV_EVENT_QP_REQ_ERR;
    recv_status = IBV_WC_REM_INV_REQ_ERR;
  } else if (verdict == Verdict::kRemoteAccess) {
    code = syndrome::kNakRemoteAccess;
    event = IBV_EVENT_QP_ACCESS_ERR;
    recv_status = IBV_WC_REM_ACCESS_ERR;
  }
  send_ack(syndrome::nak(code), psn);
  RecvWqe* recv = conn_.qp().current_recv();
  if (message_ == Message::kSend && recv != nullptr && recv->status == IBV_WC_SUCCESS)
    recv->status = recv_status;
  conn_.fail(now, event);
}

}  // namespace softrdma::engine::rc
