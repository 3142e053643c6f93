#include "engine/rc/requester.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "engine/device.h"
#include "engine/host/executor.h"
#include "engine/rc/host_execution.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/sgl.h"
#include "wire/messages.h"
#include "wire/psn.h"

namespace softrdma::engine::rc {

using namespace wire;

uint32_t Requester::rd_atomic_outstanding() const {
  Ring<SendWqe>& sq = conn_.qp().sq();
  uint32_t n = 0;
  for (uint32_t i = sq.head(); psn_index_before(i, send_index_); ++i) {
    const SendWqe& w = sq.at(i);
    // One executed on a same-host peer has its result already.
    if (w.needs_response() && !w.on_host && w.state != SendState::kComplete) ++n;
  }
  return n;
}

void Requester::reset(uint32_t sq_psn) {
  next_psn_ = sq_psn & kPsnMask;
  high_psn_ = next_psn_;
  send_index_ = conn_.qp().sq().head();
  paused_until_ = 0;
  repeat_first_ = false;
  conn_.recovery().reset(next_psn_);
}

bool Requester::run(Nanos now) {
  Qp& qp = conn_.qp();
  if (qp.state() != IBV_QPS_RTS && qp.state() != IBV_QPS_SQD) return false;
  if (now < paused_until_) return false;
  // UC (IBA 9.8): nothing acknowledges, so nothing paces the sender but this: a
  // window's worth of packets per engine turn, the rest in later turns between
  // other QPs' work (Device::want_tx), so one large message neither holds the
  // engine nor floods the peer's socket buffer in one go.
  burst_left_ = qp.ctx().config.max_unacked_packets;
  run_now_ = now;
  RateControl& rate = conn_.rate();
  const bool paced = rate.paced() || rate.delay_paced();
  pace_left_ = std::min(rate.packets_allowed(now, paced_packet_bytes(conn_.path())),
                        rate.delay_packets_allowed(now));
  Ring<SendWqe>& sq = qp.sq();
  // The completer may have popped WQEs a rewind had pointed us back to (a late
  // RNR NAK): never walk from before the head.
  if (psn_index_before(send_index_, sq.head())) send_index_ = sq.head();
  while (send_index_ != sq.tail()) {
    SendWqe& wqe = sq.at(send_index_);
    if (wqe.state == SendState::kQueued) {
      // IBA 11.2.5.3 SQD: WQEs not yet begun wait for the return to RTS.
      if (qp.state() == IBV_QPS_SQD || !may_start(wqe)) break;
      if (!start(wqe, now)) {
        flush_host(now);
        return false;
      }
    }
    if (wqe.state == SendState::kSending && !send_packets(wqe)) break;
    ++send_index_;
  }
  if (!flush_host(now)) return false;
  conn_.completer().on_sent(now);
  if (paced) conn_.arm_pacer_timer();
  const bool more = !conn_.acknowledged() && burst_left_ == 0 && send_index_ != sq.tail() &&
                    qp.state() == IBV_QPS_RTS;
  if (more) qp.want_tx();
  return more;
}

// IBA 10.8.3.3 fence: wait for every earlier READ/ATOMIC; IBA 9.7.4.1.5: at most
// max_rd_atomic of them outstanding (0 is served as 1, or the WQE would never go).
bool Requester::may_start(const SendWqe& wqe) const {
  const bool fenced = (wqe.flags & IBV_SEND_FENCE) != 0;
  if (!fenced && !wqe.needs_response()) return true;
  const uint32_t outstanding = rd_atomic_outstanding();
  if (fenced && outstanding > 0) return false;
  const uint32_t limit = std::max<uint32_t>(1, conn_.qp().attr().max_rd_atomic);
  return !wqe.needs_response() || outstanding < limit;
}

bool Requester::check_local_sges(const SendWqe& wqe) {
  checked_.wqe = nullptr;
  if (wqe.inline_data != nullptr) return true;
  // Responses are written into the local buffers: they need local write access.
  const int need = wqe.needs_response() ? IBV_ACCESS_LOCAL_WRITE : 0;
  Qp& qp = conn_.qp();
  const MrTable& mrs = qp.ctx().mrs;
  const bool keep = wqe.sgl.count <= CheckedLocals::kCapacity;
  checked_.count = 0;
  checked_.generation = mrs.generation();
  auto access = mrs.access();
  for (uint32_t i = 0; i < wqe.sgl.count; ++i) {
    const Sge& sge = wqe.sgl.sges[i];
    AccessError why;
    uint8_t* at = access.resolve(sge.lkey, qp.pd(), sge.addr, sge.length, need, why);
    if (at == nullptr) return false;
    if (keep && sge.length != 0) checked_.iov[checked_.count++] = {at, sge.length};
  }
  if (keep) checked_.wqe = &wqe;
  return true;
}

bool Requester::checked_locals(const SendWqe& wqe, std::span<const iovec>& out) const {
  if (checked_.wqe != &wqe || checked_.generation != conn_.qp().ctx().mrs.generation())
    return false;
  out = {checked_.iov.data(), checked_.count};
  return true;
}

// Assigns the WQE its PSNs (IBA 9.7.4.1.1: one per request packet; a READ takes
// one per response packet) after checking its local buffers.
bool Requester::start(SendWqe& wqe, Nanos now) {
  if (wqe.is_local()) return flush_host(now) && execute_local(wqe, now);
  if (wqe.status != IBV_WC_SUCCESS || !check_local_sges(wqe)) {
    // IBA 10.8.3.1 / ibv_poll_cq(3): local protection error, QP to Error.
    wqe.status = IBV_WC_LOC_PROT_ERR;
    conn_.fail(now, IBV_EVENT_QP_ACCESS_ERR);
    return false;
  }
  host::HostExecutor* host = conn_.qp().ctx().host_executor;
  if (host != nullptr && host->takes(conn_, wqe))
    return host->execute(conn_, wqe, send_index_, now);
  if (!flush_host(now)) return false;  // what was batched goes first (IBA 9.5)
  return start_on_wire(wqe);
}

bool Requester::flush_host(Nanos now) {
  host::HostExecutor* host = conn_.qp().ctx().host_executor;
  return host == nullptr || host->flush(conn_, now, send_index_);
}

bool Requester::start_on_wire(SendWqe& wqe) {
  wqe.first_psn = next_psn_;
  wqe.npackets = wqe.is_atomic() ? 1 : packets_for(wqe.length, conn_.path().mtu);
  wqe.next_packet = 0;
  wqe.read_packets_received = 0;
  wqe.read_requested = 0;
  wqe.state = SendState::kSending;
  next_psn_ = psn_add(next_psn_, wqe.npackets);
  return true;
}

// Packets from `psn` on that may go now: the loss recovery's window and the delay
// control's (rate_control.h), both over the packets in flight as the loss
// recovery counts them (UC: the turn's burst, nothing acknowledges), within what
// the pacer allows.
uint32_t Requester::window_space(uint32_t psn) const {
  if (!conn_.acknowledged()) return std::min(burst_left_, pace_left_);
  return std::min(pace_left_, window_room(psn));
}

// RC: the room the two windows leave from `psn` on, the pacer aside.
uint32_t Requester::window_room(uint32_t psn) const {
  const uint32_t una = conn_.completer().una_psn();
  const LossRecovery& recovery = conn_.recovery();
  return std::min(recovery.window_space(psn, una, high_psn_),
                  space_in_window(conn_.rate().window(), recovery.in_flight(psn, una, high_psn_)));
}

// The window in force: the loss recovery's or the delay control's, the smaller.
uint32_t Requester::window() const {
  return std::min(conn_.recovery().window(), uint32_t(conn_.rate().window()));
}

// `psns`: how many PSNs the packet stands for (a READ request: its responses).
void Requester::count_send(uint32_t psn, uint32_t psns) {
  if (burst_left_ > 0) --burst_left_;
  if (pace_left_ != UINT32_MAX) {
    if (pace_left_ > 0) --pace_left_;
    conn_.rate().on_sent(paced_packet_bytes(conn_.path()));
    conn_.rate().on_delay_paced_send(run_now_);
  }
  if (psn_before(psn, high_psn_)) {
    bump(conn_.qp().ctx().counters.retransmitted_packets);
    bump(conn_.qp().counters().retransmitted_packets);
    conn_.recovery().on_resent(psn, high_psn_);
    conn_.rate().on_resent(psn);
  } else if (conn_.acknowledged()) {
    conn_.completer().on_first_send(psn);
    conn_.rate().on_first_send(psn, psns, run_now_);
  }
  const uint32_t end = psn_add(psn, psns);
  if (psn_before(high_psn_, end)) high_psn_ = end;
}

bool Requester::send_packets(SendWqe& wqe) {
  if (wqe.is_atomic()) {
    if (stays_sent(wqe.first_psn)) {
      wqe.next_packet = 1;
    } else {
      send_atomic(wqe);
    }
  } else if (wqe.is_read()) {
    if (!send_read_request(wqe)) return false;
  } else {
    while (wqe.next_packet < wqe.npackets) {
      const uint32_t psn = psn_add(wqe.first_psn, wqe.next_packet);
      if (stays_sent(psn)) {
        ++wqe.next_packet;
        continue;
      }
      if (window_space(psn) == 0) return false;
      if (!send_data_packet(wqe)) return false;
    }
  }
  wqe.state = SendState::kSent;
  return true;
}

uint8_t Requester::data_opcode(const SendWqe& wqe, uint32_t index) const {
  MessageKind kind = MessageKind::kSend;
  switch (wqe.opcode) {
    case IBV_WR_RDMA_WRITE: kind = MessageKind::kWrite; break;
    case IBV_WR_RDMA_WRITE_WITH_IMM: kind = MessageKind::kWriteImm; break;
    case IBV_WR_SEND_WITH_IMM: kind = MessageKind::kSendImm; break;
    case IBV_WR_SEND_WITH_INV: kind = MessageKind::kSendInv; break;
    case IBV_WR_ATOMIC_WRITE: return conn_.opcode(op::kAtomicWrite);  // one packet
    default: break;  // SEND
  }
  return conn_.opcode(message_operation(kind, index, wqe.npackets));
}

// Copies message bytes [offset, offset + out.size()) from the inline copy or the
// WQE's gather list.
bool Requester::gather(const SendWqe& wqe, uint64_t offset, std::span<uint8_t> out) {
  if (wqe.inline_data != nullptr) {
    std::memcpy(out.data(), wqe.inline_data + offset, out.size());
    return true;
  }
  Qp& qp = conn_.qp();
  AccessError why = AccessError::kNone;
  if (engine::gather(qp.ctx().mrs.access(), qp.pd(), wqe.sgl, offset, out, &why))
    return true;
  if (why == AccessError::kUnmapped) bump(qp.ctx().counters.local_access_unmapped);
  return false;
}

// IBA A14: every XRC request names the XRC SRQ it is for.
PacketView Requester::emit_request(const SendWqe& wqe, uint8_t opcode, size_t len, uint32_t psn) {
  PacketView p = conn_.emit(opcode, len, psn);
  if (p.info().has(Header::kXrceth)) p.set(xrceth::kSrqn, wqe.xrc_srqn);
  return p;
}

bool Requester::send_data_packet(SendWqe& wqe) {
  const uint32_t mtu = conn_.path().mtu;
  const uint32_t index = wqe.next_packet;
  const uint64_t offset = uint64_t(index) * mtu;
  const size_t len = std::min<uint64_t>(mtu, wqe.length - std::min<uint64_t>(offset, wqe.length));
  const uint32_t psn = psn_add(wqe.first_psn, index);
  const uint8_t opcode = data_opcode(wqe, index);
  PacketView p = emit_request(wqe, opcode, len, psn);
  const OpcodeInfo& info = p.info();
  const DeviceConfig& config = conn_.qp().ctx().config;
  // IBA 9.7.5.1.4: AckReq at least twice per window, or a window smaller than the
  // interval would wait for the ACK timer (a gentle restart's: every packet).
  const uint32_t interval =
      std::max<uint32_t>(1, std::min({config.ack_request_interval, conn_.recovery().window() / 2,
                                      conn_.rate().window() / 2}));
  const bool last = info.is(kOpLast);
  // UC asks for no ACK (IBA 9.8: AckReq is 0; so do Soft-RoCE's UC captures).
  p.set(bth::kAckReq, conn_.acknowledged() && (last || (index + 1) % interval == 0));
  if (last && (wqe.flags & IBV_SEND_SOLICITED)) p.set(bth::kSolicited, 1);
  if (info.has(Header::kReth)) {
    p.set(reth::kVa, wqe.remote_addr);
    p.set(reth::kRkey, wqe.rkey);
    p.set(reth::kDmaLength, wqe.length);
  }
  if (info.has(Header::kImmDt)) p.set(immdt::kImmediate, ntohl(wqe.imm_data));
  if (info.has(Header::kIeth)) p.set(ieth::kRkey, wqe.invalidate_rkey);
  if (!gather(wqe, offset, p.payload())) {
    conn_.tx().discard_last();
    wqe.status = IBV_WC_LOC_PROT_ERR;
    conn_.fail(conn_.qp().ctx().clock.now(), IBV_EVENT_QP_ACCESS_ERR);
    return false;
  }
  count_send(psn, 1);
  repeat_if_first_of_retry(p);
  ++wqe.next_packet;
  return true;
}

// One READ request asks for responses [next_packet, next_packet + chunk): a long
// READ is asked for one window at a time, so its responses never overrun the
// socket buffers; each chunk is an ordinary READ request on the wire (IBA 9.7.4.1.4).
bool Requester::send_read_request(SendWqe& wqe) {
  const uint32_t mtu = conn_.path().mtu;
  while (wqe.next_packet < wqe.npackets) {
    // Go-back-N: the previous chunk's responses come first (the completer checks
    // each response's opcode against the request it answers). Selective repeat
    // places responses by PSN, whatever request they answer, so the next chunk
    // goes as soon as the window has room, while a gap in the last is repaired:
    // waiting for it stalled the pipe at each chunk whose gap's answer was lost.
    if (!conn_.recovery().selective() && wqe.next_packet != wqe.read_packets_received)
      return false;
    const uint32_t psn = psn_add(wqe.first_psn, wqe.next_packet);
    if (stays_sent(psn) && wqe.read_requested > wqe.next_packet) {
      wqe.next_packet = wqe.read_requested;  // its responses are on their way
      continue;
    }
    const uint32_t space = window_space(psn);
    if (space == 0) return false;
    // A re-request (after a loss) asks again for exactly the rest of what was asked
    // before, whatever the window: the responder answers a duplicate READ only within
    // PSNs it has already passed (IBA 9.7.5.1.2), so one reaching past where it
    // stands would be ignored until retries ran out, and it may stand at the end of
    // any request it executed: a shorter re-request (a gentle restart's window) would
    // leave a boundary the next one straddles. It is one request packet either way.
    const bool again = wqe.read_requested > wqe.next_packet;
    const uint32_t end = again ? wqe.read_requested : wqe.npackets;
    // Selective repeat: a new chunk waits for room for half the window (or the
    // rest of the READ), or each PSN the window freed would be a request of its
    // own, one for the responder to execute per packet (the sender's silly
    // window avoidance, RFC 1122 §4.2.3.4).
    if (conn_.recovery().selective() && !again &&
        window_room(psn) < std::min(end - wqe.next_packet, std::max(1u, window() / 2)))
      return false;
    const uint32_t chunk = again ? end - wqe.next_packet : std::min(space, end - wqe.next_packet);
    const uint64_t offset = uint64_t(wqe.next_packet) * mtu;
    const uint64_t len = std::min<uint64_t>(uint64_t(chunk) * mtu, wqe.length - offset);
    PacketView p = emit_read_request(wqe, psn, offset, len);
    count_send(psn, chunk);
    repeat_if_first_of_retry(p);
    if (wqe.next_packet >= wqe.read_requested) wqe.read_range_begin = wqe.next_packet;
    wqe.read_chunk_begin = wqe.next_packet;
    wqe.next_packet += chunk;
    wqe.read_requested = std::max(wqe.read_requested, wqe.next_packet);
  }
  return true;
}

void Requester::send_atomic(SendWqe& wqe) {
  const uint8_t opcode = conn_.opcode(wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? op::kCompareSwap
                                                                              : op::kFetchAdd);
  PacketView p = emit_request(wqe, opcode, 0, wqe.first_psn);
  p.set(bth::kAckReq, 1);
  p.set(atomic_eth::kVa, wqe.remote_addr);
  p.set(atomic_eth::kRkey, wqe.rkey);
  p.set(atomic_eth::kSwapAdd,
        wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? wqe.swap : wqe.compare_add);
  p.set(atomic_eth::kCompare, wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? wqe.compare_add : 0);
  count_send(wqe.first_psn, 1);
  repeat_if_first_of_retry(p);
  wqe.next_packet = 1;
}

// A retry gets nowhere unless its first packet arrives: the responder takes requests
// in PSN order (IBA 9.7.5.1.3: one NAK for a gap, later packets dropped silently),
// and the requester takes a READ's answer from the response it lacks on (IBA
// 9.7.5.2.1). Sent once, one loss wastes the retry (about L on a path losing a share
// L), and retry_cnt + 1 wasted in a row end the QP (IBA 9.7.6.1.3); a long message
// at 10 % loss makes hundreds of retries. A second copy, back to back, makes that
// L^2; the responder treats it as the duplicate it is (IBA 9.7.5.1.2: acknowledged
// again, a READ re-executed from its PSN, an ATOMIC replayed).
void Requester::repeat_if_first_of_retry(PacketView packet) {
  if (!repeat_first_) return;
  repeat_first_ = false;
  packet.set(bth::kAckReq, 1);
  conn_.tx().repeat_last();
  bump(conn_.qp().ctx().counters.retransmitted_packets);
  bump(conn_.qp().counters().retransmitted_packets);
}

bool Requester::recovery_keeps(uint32_t psn) const {
  return conn_.recovery().stays_sent(psn);
}

// The WQE holding `psn` resends from there; every later WQE that was (partly)
// sent resends whole, keeping the PSNs it was given, except what the loss
// recovery leaves sent (stays_sent).
bool Requester::rewind(uint32_t psn) {
  Ring<SendWqe>& sq = conn_.qp().sq();
  for (uint32_t i = sq.head(); i != sq.tail(); ++i) {
    SendWqe& w = sq.at(i);
    if (w.state == SendState::kQueued) break;
    const int32_t into = psn_diff(psn, w.first_psn);
    if (into < 0 || uint32_t(into) >= w.npackets) continue;
    w.next_packet = w.is_read() ? w.read_packets_received : uint32_t(into);
    w.state = SendState::kSending;
    for (uint32_t j = i + 1; j != sq.tail() && sq.at(j).state != SendState::kQueued; ++j) {
      sq.at(j).next_packet = 0;
      sq.at(j).state = SendState::kSending;
    }
    send_index_ = i;
    return true;
  }
  return false;
}

void Requester::on_loss(uint32_t psn, LossCause cause, Nanos now) {
  if (!rewind(psn)) return;
  const Resend resend = conn_.recovery().on_loss(psn, high_psn_, cause, now);
  repeat_first_ = resend.repeat_first;
}

// One READ request for a part of what was asked (IBA 9.7.4.1.4), counted as a
// resend; the WQE's own progress (next_packet, read_requested) is unchanged.
void Requester::rerequest_read(const SendWqe& wqe, uint32_t from, uint32_t count) {
  const uint32_t mtu = conn_.path().mtu;
  const uint64_t offset = uint64_t(from) * mtu;
  if (offset >= wqe.length && wqe.length != 0) return;
  const uint64_t len = std::min<uint64_t>(uint64_t(count) * mtu, wqe.length - offset);
  const uint32_t psn = psn_add(wqe.first_psn, int32_t(from));
  emit_read_request(wqe, psn, offset, len);
  count_send(psn, count);
}

// IBA 9.7.4.1.4: a READ request for `len` bytes from `offset` of the WQE's range.
PacketView Requester::emit_read_request(const SendWqe& wqe, uint32_t psn, uint64_t offset,
                                        uint64_t len) {
  PacketView p = emit_request(wqe, conn_.opcode(op::kReadRequest), 0, psn);
  p.set(bth::kAckReq, 1);
  p.set(reth::kVa, wqe.remote_addr + offset);
  p.set(reth::kRkey, wqe.rkey);
  p.set(reth::kDmaLength, len);
  return p;
}

void Requester::resend_from(uint32_t psn) {
  if (rewind(psn)) bump(conn_.qp().ctx().counters.sack_resends);
}

void Requester::on_progress(uint32_t una, Nanos now) { conn_.recovery().on_acknowledged(una, now); }

}  // namespace softrdma::engine::rc
