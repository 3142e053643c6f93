// The requester side of an iWARP QP (RFC 5040 §5): WQEs in queue order become
// DDP segments framed as FPDUs in out_ — SENDs untagged on queue 0, WRITEs tagged
// to the peer's STag, READ requests untagged on queue 1 — and READ requests the
// peer made are answered as tagged READ responses, between whole messages (RFC
// 5040 §5.5: a message's segments are never interleaved with another's on the
// stream). WQEs complete in order once their bytes are written (a READ: once its
// last response arrived, receive.cc).
#include <cstring>

#include "engine/device.h"
#include "engine/guarded_memory.h"
#include "engine/iwarp/connection.h"
#include "engine/iwarp/family.h"
#include "engine/qp.h"
#include "engine/sgl.h"
#include "wire/iwarp/mpa.h"

namespace softrdma::engine::iwarp {

using namespace wire::iwarp;

std::span<uint8_t> Connection::open_fpdu(const DdpHeader& header, std::span<const uint8_t> extra,
                                         size_t payload_length) {
  std::array<uint8_t, kUntaggedHeaderBytes> ddp{};
  const size_t ddp_bytes = write_ddp(header, ddp);
  fpdu_at_ = out_.size();
  fpdu_ulpdu_ = ddp_bytes + extra.size() + payload_length;
  out_.resize(fpdu_at_ + fpdu_bytes(fpdu_ulpdu_));
  uint8_t* at = out_.data() + fpdu_at_ + kFpduHeaderBytes;
  std::memcpy(at, ddp.data(), ddp_bytes);
  if (!extra.empty()) std::memcpy(at + ddp_bytes, extra.data(), extra.size());
  return {at + ddp_bytes + extra.size(), payload_length};
}

void Connection::close_fpdu() {
  const size_t length = fpdu_bytes(fpdu_ulpdu_);
  seal_fpdu(std::span(out_.data() + fpdu_at_, length), fpdu_ulpdu_, crc_);
  bytes_queued_ += length;
  bump(qp_.ctx().counters.tx_packets);
  bump(qp_.counters().tx_packets);
}

bool Connection::write_out() {
  if (stream_ == transport::kNoStream || broken_ != 0) return false;
  while (out_begin_ < out_.size()) {
    iovec part{out_.data() + out_begin_, out_.size() - out_begin_};
    const ssize_t n = family_.streams().write(stream_, std::span(&part, 1));
    if (n < 0) {
      broken_ = int(-n);
      return false;
    }
    if (n == 0) {  // TCP's window is full: go on when the stream has room
      family_.streams().want_writable(stream_, true);
      if (out_begin_ > kOutLimit / 2) {
        out_.erase(out_.begin(), out_.begin() + ptrdiff_t(out_begin_));
        out_begin_ = 0;
      }
      return false;
    }
    out_begin_ += size_t(n);
    bytes_written_ += uint64_t(n);
  }
  out_.clear();
  out_begin_ = 0;
  return true;
}

void Connection::settle_broken(Nanos now) {
  if (broken_ != 0 && !ended_) on_closed(broken_, now);
}

// True while WQEs remain that may go now (another turn continues).
bool Connection::produce(Nanos now) {
  if (ended_) return false;
  if (awaiting_rtr_) return false;  // RFC 6581 §5: nothing before the peer's RTR
  Ring<SendWqe>& sq = qp_.sq();
  if (!started_) {
    next_wqe_ = sq.head();
    started_ = true;
  }
  bool blocked = false;
  // A message begun keeps the stream until its last segment (RFC 5040 §5.5).
  if (next_offset_ == 0) blocked = !emit_read_responses();
  while (!blocked && !ended_ && !out_full() && next_wqe_ != sq.tail())
    blocked = !emit_wqe(next_wqe_, sq.at(next_wqe_), now);
  if (!ended_ && next_offset_ == 0 && !out_full()) emit_read_responses();
  // Stopped for room in out_ (not by ORD, a fence or SQD): once out_ is written,
  // the rest goes next turn.
  const bool full = out_full();
  const bool drained = write_out();
  settle_broken(now);
  if (ended_) return false;
  retire(now);
  // More goes next turn: READ responses still owed, or WQEs nothing holds back.
  // Not drained: the stream's kWritable resumes it.
  return drained && (!owed_.empty() || (next_wqe_ != sq.tail() && (full || !blocked)));
}

// False when the WQE cannot go yet (ORD, a fence, SQD, the out buffer) or failed.
bool Connection::emit_wqe(uint32_t index, SendWqe& wqe, Nanos now) {
  if (qp_.state() != IBV_QPS_RTS) return false;  // SQD: nothing new starts
  const bool fenced = (wqe.flags & IBV_SEND_FENCE) != 0;
  if (next_offset_ == 0 && fenced && !reads_.empty()) return false;
  if (wqe.is_local()) {
    MrTable& table = qp_.ctx().mrs;
    const bool bind = wqe.opcode == IBV_WR_BIND_MW;
    const bool done = bind ? table.bind(wqe.bind, qp_.pd(), qp_.qpn())
                           : table.invalidate(wqe.invalidate_rkey, qp_.pd(), qp_.qpn(), false);
    wqe.state = SendState::kSent;
    emitted_.push_back({index, bytes_queued_});
    ++next_wqe_;
    if (done) return true;
    bump(qp_.ctx().counters.memory_operations_refused);
    wqe.status = bind ? IBV_WC_MW_BIND_ERR : IBV_WC_LOC_QP_OP_ERR;
    retire(now);
    end(transport::StreamTransport::CloseMode::kNow);
    qp_.enter_error(now);
    return false;
  }
  if (wqe.is_read()) return emit_read_request(index, wqe);
  switch (wqe.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
      return emit_message(wqe, now);
    default:
      // RFC 7306's immediate data and atomics are not offered over iWARP (the
      // device reports no atomics); a post of one is refused, this is the guard.
      wqe.status = IBV_WC_LOC_QP_OP_ERR;
      terminate(Fault{TerminateLayer::kRdmap, 2, 6}, now);
      return false;
  }
}

// A SEND or WRITE from next_offset_ on, as many segments as out_ takes.
bool Connection::emit_message(SendWqe& wqe, Nanos now) {
  const bool write = wqe.opcode == IBV_WR_RDMA_WRITE;
  DdpHeader h;
  if (write) {
    h.opcode = RdmapOpcode::kWrite;
    h.stag = wqe.rkey;
  } else {
    const bool solicited = (wqe.flags & IBV_SEND_SOLICITED) != 0;
    const bool inv = wqe.opcode == IBV_WR_SEND_WITH_INV;
    h.opcode = inv ? (solicited ? RdmapOpcode::kSendSolicitedInvalidate : RdmapOpcode::kSendInvalidate)
                   : (solicited ? RdmapOpcode::kSendSolicited : RdmapOpcode::kSend);
    h.invalidate_stag = inv ? wqe.invalidate_rkey : 0;
    h.queue = kQueueSend;
    h.msn = msn_out_.send;
  }
  auto access = qp_.ctx().mrs.access();
  do {
    if (out_full()) return false;
    const size_t chunk = std::min<uint64_t>(wqe.length - next_offset_, kMaxSegmentPayload);
    h.last = next_offset_ + chunk == wqe.length;
    if (write) h.offset = wqe.remote_addr + next_offset_;
    else h.message_offset = uint32_t(next_offset_);
    std::span<uint8_t> payload = open_fpdu(h, {}, chunk);
    const bool read_ok = wqe.inline_data != nullptr
        ? (std::memcpy(payload.data(), wqe.inline_data + next_offset_, chunk), true)
        : gather(access, qp_.pd(), wqe.sgl, next_offset_, payload);
    if (!read_ok) {
      drop_fpdu();
      wqe.status = IBV_WC_LOC_PROT_ERR;
      terminate(Fault{TerminateLayer::kRdmap, 0, 0}, now);  // local catastrophic
      return false;
    }
    close_fpdu();
    next_offset_ += chunk;
  } while (next_offset_ < wqe.length);
  if (!write) ++msn_out_.send;
  wqe.state = SendState::kSent;
  emitted_.push_back({next_wqe_, bytes_queued_});
  ++next_wqe_;
  next_offset_ = 0;
  return true;
}

// RFC 5040 §4.4: the sink is the WQE's first SGE (its L_Key and address), where
// responses land at their Tagged Offset; the rest of the list follows on.
bool Connection::emit_read_request(uint32_t index, SendWqe& wqe) {
  if (reads_.size() + rtr_reads_ >= ord_) return false;  // ORD (RFC 6581 §5)
  ReadRequest request;
  if (wqe.sgl.count > 0) {
    request.sink_stag = wqe.sgl.sges[0].lkey;
    request.sink_offset = wqe.sgl.sges[0].addr;
  }
  request.size = wqe.length;
  request.source_stag = wqe.rkey;
  request.source_offset = wqe.remote_addr;
  std::array<uint8_t, kReadRequestBytes> bytes{};
  write_read_request(request, bytes);
  DdpHeader h;
  h.opcode = RdmapOpcode::kReadRequest;
  h.queue = kQueueReadRequest;
  h.msn = msn_out_.read_request++;
  append_fpdu(h, bytes);
  wqe.state = SendState::kSent;
  reads_.push_back(index);
  emitted_.push_back({index, bytes_queued_});
  ++next_wqe_;
  return true;
}

// The READ responses owed, oldest first; false when out_ is full mid-response.
bool Connection::emit_read_responses() {
  if (owed_.empty()) return true;
  auto access = qp_.ctx().mrs.access();  // once, not per segment
  while (!owed_.empty()) {
    OwedRead& owed = owed_.front();
    const ReadRequest& r = owed.request;
    DdpHeader h;
    h.opcode = RdmapOpcode::kReadResponse;
    h.stag = r.sink_stag;
    do {
      if (out_full()) return false;
      const uint32_t chunk = uint32_t(std::min<uint64_t>(r.size - owed.sent, kMaxSegmentPayload));
      h.offset = r.sink_offset + owed.sent;
      h.last = owed.sent + chunk == r.size;
      std::span<uint8_t> payload = open_fpdu(h, {}, chunk);
      if (chunk != 0) {
        AccessError why = AccessError::kNone;
        const uint8_t* src = access.resolve_remote(
            r.source_stag, qp_.pd(), qp_.qpn(), r.source_offset + owed.sent, chunk,
            IBV_ACCESS_REMOTE_READ, why);
        if (src == nullptr || !guarded_copy(payload.data(), src, chunk)) {
          // Checked when the request arrived: the region went since (deregistered
          // or unmapped). RFC 5040 §7.4: a remote protection error.
          drop_fpdu();
          terminate(Fault{TerminateLayer::kRdmap, 1, 0xff}, qp_.ctx().clock.now());
          return false;
        }
      }
      close_fpdu();
      owed.sent += chunk;
    } while (owed.sent < r.size);
    owed_.pop_front();
  }
  return true;
}

// Completions in queue order (IBA 10.8.3 as iWARP verbs keep it).
void Connection::retire(Nanos) {
  Ring<SendWqe>& sq = qp_.sq();
  while (!emitted_.empty() && !sq.empty()) {
    const Emitted& e = emitted_.front();
    SendWqe& w = sq.at(e.index);
    const bool done = w.is_read() ? w.state == SendState::kComplete : bytes_written_ >= e.end;
    if (!done || sq.head() != e.index) break;
    emitted_.pop_front();
    qp_.complete_send_head(w.status);
  }
}

}  // namespace softrdma::engine::iwarp
