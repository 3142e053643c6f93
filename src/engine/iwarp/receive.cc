// The receiving side of an iWARP QP: the stream's bytes become FPDUs (RFC 5044
// §4: length, CRC), each a DDP segment (RFC 5041) placed where its buffer model
// says — tagged segments at their STag and Tagged Offset after the STag's checks
// (RFC 5041 §5.2, RFC 5040 §4.3, §4.5), untagged ones in the receive WQE their
// queue's MSN names at their Message Offset (RFC 5041 §5.3). Any error is a
// Terminate naming the layer that found it (RFC 5040 §7.2, RFC 5041 §7.2).
#include <cstring>

#include "engine/device.h"
#include "engine/access_check.h"
#include "engine/guarded_memory.h"
#include "engine/iwarp/connection.h"
#include "engine/iwarp/family.h"
#include "engine/qp.h"
#include "engine/sgl.h"
#include "wire/iwarp/mpa.h"

namespace softrdma::engine::iwarp {

using namespace wire::iwarp;

namespace {

// RFC 5041 §7.2: DDP's error types and codes.
constexpr uint8_t kDdpTagged = 1, kDdpUntagged = 2;
constexpr uint8_t kTaggedInvalidStag = 0, kTaggedBounds = 1, kTaggedNotThisStream = 2,
                  kTaggedBadVersion = 4;
constexpr uint8_t kUntaggedBadQueue = 1, kUntaggedNoBuffer = 2, kUntaggedMsnRange = 3,
                  kUntaggedBadOffset = 4, kUntaggedTooLong = 5, kUntaggedBadVersion = 6;
// RFC 5040 §7.2: RDMAP's.
constexpr uint8_t kRdmapLocal = 0, kRdmapProtection = 1, kRdmapOperation = 2;
constexpr uint8_t kRdmapAccessRights = 2, kRdmapBadVersion = 5, kRdmapBadOpcode = 6,
                  kRdmapCannotInvalidate = 9;
// RFC 5044 §8 (as siw's iwarp.h names them): the LLP layer's MPA errors.
constexpr uint8_t kMpaCrc = 2;

// Why a tagged access was refused, as the Terminate and the event name it.
Fault tagged_fault(AccessError why) {
  switch (why) {
    case AccessError::kBadKey:
      return {TerminateLayer::kDdp, kDdpTagged, kTaggedInvalidStag, IBV_WC_REM_ACCESS_ERR,
              IBV_EVENT_QP_ACCESS_ERR};
    case AccessError::kWrongPd:
      return {TerminateLayer::kDdp, kDdpTagged, kTaggedNotThisStream, IBV_WC_REM_ACCESS_ERR,
              IBV_EVENT_QP_ACCESS_ERR};
    case AccessError::kOutOfBounds:
      return {TerminateLayer::kDdp, kDdpTagged, kTaggedBounds, IBV_WC_REM_ACCESS_ERR,
              IBV_EVENT_QP_ACCESS_ERR};
    case AccessError::kNoPermission:
      return {TerminateLayer::kRdmap, kRdmapProtection, kRdmapAccessRights,
              IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR};
    default:  // the pages went (unmapped): this side's memory failed
      return {TerminateLayer::kRdmap, kRdmapLocal, 0, IBV_WC_REM_OP_ERR, IBV_EVENT_QP_FATAL};
  }
}

Fault untagged_fault(uint8_t code) {
  return {TerminateLayer::kDdp, kDdpUntagged, code, IBV_WC_REM_OP_ERR, IBV_EVENT_QP_FATAL};
}

}  // namespace

bool Connection::on_readable(Nanos now) {
  bool took = false;
  for (int reads = 0; reads < 8 && !ended_; ++reads) {
    const size_t room = rx_.size() - rx_end_;
    const ssize_t n = family_.streams().read(stream_, std::span(rx_.data() + rx_end_, room));
    if (n == 0) break;
    took = true;
    if (n < 0) {
      on_closed(n == transport::kEndOfStream ? 0 : int(-n), now);
      return true;
    }
    rx_end_ += size_t(n);
    if (!take_fpdus(now)) return true;
    // A read that did not fill the room took all there was: no second system call
    // to hear "nothing more" (the stream is level-triggered: more is reported).
    if (size_t(n) < room) break;
  }
  if (took && !ended_ && produce(now)) qp_.want_tx();
  return took;
}

bool Connection::take_fpdus(Nanos now) {
  size_t at = 0;
  while (!ended_) {
    std::span<const uint8_t> ulpdu;
    size_t used = 0;
    const FpduParse parsed = parse_fpdu(std::span(rx_.data() + at, rx_end_ - at), crc_, ulpdu, used);
    if (parsed == FpduParse::kNeedMore) break;
    if (parsed != FpduParse::kDone) {
      bump(qp_.ctx().counters.iwarp_bad_fpdus);
      terminate(parsed == FpduParse::kBadCrc
                    ? Fault{TerminateLayer::kMpa, 0, kMpaCrc, IBV_WC_REM_OP_ERR, IBV_EVENT_QP_FATAL}
                    : untagged_fault(kUntaggedBadOffset),
                now);
      return false;
    }
    at += used;
    bump(qp_.ctx().counters.rx_packets);
    bump(qp_.counters().rx_packets);
    awaiting_rtr_ = false;
    heard_ = true;
    release_at_ = kNever;
    if (rtr_expected_) {
      rtr_expected_ = false;
      if (skip_rtr(ulpdu)) continue;
    }
    if (!on_segment(ulpdu, now)) return false;
  }
  if (ended_) return false;
  std::memmove(rx_.data(), rx_.data() + at, rx_end_ - at);
  rx_end_ -= at;
  return true;
}

// RFC 6581 §5: a zero-length SEND as the initiator's RTR is MPA's, not the
// application's: it takes no receive WQE. A zero-length WRITE or READ is
// harmless as an RDMAP message and goes its ordinary way.
bool Connection::skip_rtr(std::span<const uint8_t> ulpdu) {
  DdpHeader h;
  size_t header = 0;
  if (parse_ddp(ulpdu, h, header) != DdpParse::kDone) return false;
  const bool send = h.opcode == RdmapOpcode::kSend && h.queue == kQueueSend;
  if (!send || header != ulpdu.size() || h.msn != msn_in_.send) return false;
  ++msn_in_.send;
  return true;
}

bool Connection::on_segment(std::span<const uint8_t> ulpdu, Nanos now) {
  DdpHeader h;
  size_t header = 0;
  switch (parse_ddp(ulpdu, h, header)) {
    case DdpParse::kDone: break;
    case DdpParse::kBadDdpVersion:
      terminate(Fault{TerminateLayer::kDdp, kDdpUntagged, kUntaggedBadVersion}, now);
      return false;
    case DdpParse::kBadRdmapVersion:
      terminate(Fault{TerminateLayer::kRdmap, kRdmapOperation, kRdmapBadVersion}, now);
      return false;
    default:
      terminate(Fault{TerminateLayer::kRdmap, kRdmapOperation, kRdmapBadOpcode}, now);
      return false;
  }
  const std::span<const uint8_t> payload = ulpdu.subspan(header);
  switch (h.opcode) {
    case RdmapOpcode::kWrite: return on_write(h, payload, now);
    case RdmapOpcode::kReadResponse: return on_read_response(h, payload, now);
    case RdmapOpcode::kReadRequest: return on_read_request(h, payload, now);
    case RdmapOpcode::kTerminate:
      on_terminate(payload, now);
      return false;
    default: return on_send(h, payload, now);
  }
}

// RFC 5040 §4.3: an RDMA WRITE lands at its STag's Tagged Offset, checked for
// this QP's PD and remote write right. A zero-length one touches nothing and is
// not checked (the RTR's may name STag 0).
bool Connection::on_write(const DdpHeader& h, std::span<const uint8_t> payload, Nanos now) {
  if (payload.empty()) return true;
  AccessError why = AccessError::kNone;
  uint8_t* dst = qp_.ctx().mrs.access().resolve_remote(
      h.stag, qp_.pd(), qp_.qpn(), h.offset, payload.size(), IBV_ACCESS_REMOTE_WRITE, why);
  if (dst == nullptr || !guarded_copy(dst, payload.data(), payload.size())) {
    if (dst != nullptr) bump(qp_.ctx().counters.peer_access_unmapped);
    terminate(tagged_fault(dst == nullptr ? why : AccessError::kUnmapped), now);
    return false;
  }
  return true;
}

// RFC 5040 §4.5: responses come in the order of the requests; each lands in the
// oldest READ's list at its offset from the sink the request named.
bool Connection::on_read_response(const DdpHeader& h, std::span<const uint8_t> payload,
                                  Nanos now) {
  if (rtr_reads_ > 0) {  // our RTR's zero-length answer
    if (h.last) --rtr_reads_;
    return true;
  }
  if (reads_.empty()) {
    bump(qp_.ctx().counters.bad_read_responses);
    terminate(Fault{TerminateLayer::kRdmap, kRdmapOperation, kRdmapBadOpcode}, now);
    return false;
  }
  SendWqe& wqe = qp_.sq().at(reads_.front());
  const uint32_t sink = wqe.sgl.count > 0 ? wqe.sgl.sges[0].lkey : 0;
  const uint64_t base = wqe.sgl.count > 0 ? wqe.sgl.sges[0].addr : 0;
  const uint64_t offset = h.offset - base;
  if (h.stag != sink || h.offset < base || offset > wqe.length ||
      payload.size() > wqe.length - offset) {
    bump(qp_.ctx().counters.bad_read_responses);
    terminate(Fault{TerminateLayer::kDdp, kDdpTagged, h.stag != sink ? kTaggedInvalidStag
                                                                       : kTaggedBounds,
                    IBV_WC_REM_OP_ERR, IBV_EVENT_QP_FATAL},
              now);
    return false;
  }
  if (!payload.empty() &&
      !scatter(qp_.ctx().mrs.access(), qp_.pd(), wqe.sgl, offset, payload)) {
    bump(qp_.ctx().counters.local_access_unmapped);
    wqe.status = IBV_WC_LOC_PROT_ERR;
    terminate(Fault{TerminateLayer::kRdmap, kRdmapLocal, 0}, now);
    return false;
  }
  if (h.last) {
    wqe.state = SendState::kComplete;
    reads_.pop_front();
    retire(now);
  }
  return true;
}

// RFC 5041 §5.3: the segments of one SEND share its MSN and arrive in order of
// their Message Offset; the first takes the receive WQE the message lands in.
bool Connection::on_send(const DdpHeader& h, std::span<const uint8_t> payload, Nanos now) {
  if (h.queue != kQueueSend) {
    terminate(untagged_fault(kUntaggedBadQueue), now);
    return false;
  }
  if (h.msn != msn_in_.send) {
    terminate(untagged_fault(kUntaggedMsnRange), now);
    return false;
  }
  if (h.message_offset != received_) {
    terminate(untagged_fault(kUntaggedBadOffset), now);
    return false;
  }
  if (!receiving_) {
    if (qp_.take_recv() == nullptr) {  // iWARP has no RNR: the message is lost
      terminate(untagged_fault(kUntaggedNoBuffer), now);
      return false;
    }
    receiving_ = true;
  }
  RecvWqe& recv = *qp_.current_recv();
  if (payload.size() > recv.length - received_) {
    recv.status = IBV_WC_LOC_LEN_ERR;
    terminate(untagged_fault(kUntaggedTooLong), now);
    return false;
  }
  if (!payload.empty() &&
      !scatter(qp_.ctx().mrs.access(), qp_.pd(), recv.sgl, received_, payload)) {
    recv.status = IBV_WC_LOC_PROT_ERR;
    terminate(Fault{TerminateLayer::kRdmap, kRdmapLocal, 0}, now);
    return false;
  }
  received_ += payload.size();
  if (!h.last) return true;
  const bool invalidate = h.opcode == RdmapOpcode::kSendInvalidate ||
                          h.opcode == RdmapOpcode::kSendSolicitedInvalidate;
  // RFC 5040 §6.4.1: only a window bound through this stream's QP (or an MR of
  // its PD) may be invalidated by the peer.
  if (invalidate &&
      !qp_.ctx().mrs.invalidate(h.invalidate_stag, qp_.pd(), qp_.qpn(), /*remote=*/true)) {
    bump(qp_.ctx().counters.remote_invalidations_refused);
    recv.status = IBV_WC_REM_INV_REQ_ERR;
    terminate(Fault{TerminateLayer::kRdmap, kRdmapOperation, kRdmapCannotInvalidate}, now);
    return false;
  }
  complete_receive(h);
  return true;
}

void Connection::complete_receive(const DdpHeader& h) {
  ibv_wc wc{};
  wc.wr_id = qp_.current_recv()->wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  wc.byte_len = uint32_t(received_);
  wc.qp_num = qp_.qpn();
  if (h.opcode == RdmapOpcode::kSendInvalidate ||
      h.opcode == RdmapOpcode::kSendSolicitedInvalidate) {
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = h.invalidate_stag;
  }
  const bool solicited = h.opcode == RdmapOpcode::kSendSolicited ||
                         h.opcode == RdmapOpcode::kSendSolicitedInvalidate;
  qp_.complete_recv_head(wc, solicited);
  ++msn_in_.send;
  receiving_ = false;
  received_ = 0;
}

// RFC 5040 §4.4: a READ request is checked when it arrives (its source, for this
// QP's PD and the remote read right) and answered in order, at most IRD at once.
bool Connection::on_read_request(const DdpHeader& h, std::span<const uint8_t> payload,
                                 Nanos now) {
  ReadRequest request;
  if (h.queue != kQueueReadRequest) {
    terminate(untagged_fault(kUntaggedBadQueue), now);
    return false;
  }
  if (h.msn != msn_in_.read_request || owed_.size() >= ird_) {
    terminate(untagged_fault(kUntaggedMsnRange), now);
    return false;
  }
  // RFC 5040 §4.4, with IBA's max_msg_size as the responder's (access_check.h).
  if (!parse_read_request(payload, request) ||
      check_message(RemoteAccess{IBV_ACCESS_REMOTE_READ, request.source_offset, request.size,
                                 pd_id(qp_.pd()), qp_.qpn()},
                    qp_.ctx().config.limits.max_msg_size, false) != Verdict::kDone) {
    terminate(Fault{TerminateLayer::kRdmap, kRdmapOperation, kRdmapBadOpcode}, now);
    return false;
  }
  if (request.size != 0) {
    AccessError why = AccessError::kNone;
    if (qp_.ctx().mrs.access().resolve_remote(request.source_stag, qp_.pd(), qp_.qpn(),
                                                   request.source_offset, request.size,
                                                   IBV_ACCESS_REMOTE_READ, why) == nullptr) {
      terminate(tagged_fault(why), now);
      return false;
    }
  }
  ++msn_in_.read_request;
  owed_.push_back(OwedRead{request, 0});
  return true;
}

// RFC 5040 §7.1: the peer found an error and ends the stream; the oldest WQE this
// side has sent fails with what the Terminate says, the rest are flushed.
void Connection::on_terminate(std::span<const uint8_t> payload, Nanos now) {
  bump(qp_.ctx().counters.iwarp_terminates_received);
  Terminate t;
  ibv_wc_status status = IBV_WC_REM_OP_ERR;
  if (parse_terminate(payload, t)) {
    const bool protection = (t.layer == TerminateLayer::kRdmap && t.error_type == kRdmapProtection) ||
                            (t.layer == TerminateLayer::kDdp && t.error_type == kDdpTagged);
    if (protection) status = IBV_WC_REM_ACCESS_ERR;
    if (t.layer == TerminateLayer::kDdp && t.error_type == kDdpUntagged &&
        t.error_code == kUntaggedTooLong)
      status = IBV_WC_REM_INV_REQ_ERR;
  }
  if (!emitted_.empty() && !qp_.sq().empty() && qp_.sq().head() == emitted_.front().index)
    qp_.sq().front().status = status;
  qp_.post_event(IBV_EVENT_QP_FATAL);
  end(transport::StreamTransport::CloseMode::kNow);
  qp_.enter_error(now);
}

}  // namespace softrdma::engine::iwarp
