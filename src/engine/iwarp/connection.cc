// An iWARP QP's connection: its binding to a TCP stream, its state changes, and
// how it ends — by a Terminate (RFC 5040 §7.1: the error is reported to the peer,
// then the stream closes) or by the stream's own end.
#include "engine/iwarp/connection.h"

#include <algorithm>
#include <array>

#include "engine/device.h"
#include "engine/iwarp/family.h"
#include "engine/qp.h"

namespace softrdma::engine::iwarp {

using namespace wire::iwarp;

namespace {
// Room for the largest FPDU and the next one's beginning: a read takes what fits.
constexpr size_t kRxBytes = 256 * 1024;

// RFC 5044 §7.1 has the responder send its first FPDU only after the initiator's.
// With no RTR agreed (a stock siw initiator never offers one) a protocol whose
// server speaks first (ucmatose) would wait for ever; siw's responder does not
// wait, but siw's initiator fails a connection whose first FPDU it finds behind
// the MPA reply it is parsing. So without an RTR the responder waits for the
// initiator's first FPDU or this long, whichever comes first.
constexpr Nanos kReleaseWithoutRtr = 100'000'000;  // 100 ms

// Linux siw (6.1, and upstream as of this writing) hands an accepted socket to
// its QP only after its MPA reply is sent, and bytes that arrive in between are
// read only when more arrive: an RTR that is quick enough (on a slow host, an
// emulated one) waits there, and siw never reports the connection established.
// Until the peer has sent anything, the initiator sends a zero-length WRITE now
// and then (RFC 5040 §4.3: a valid message that places nothing; siw's own RTR is
// one), at most kNudges times, each wait twice the one before.
constexpr uint32_t kNudges = 6;
constexpr Nanos kFirstNudge = 10'000'000;  // 10 ms
}  // namespace

Connection::Connection(Qp& qp, IwarpFamily& family) : qp_(qp), family_(family) {}

Connection::~Connection() {
  if (stream_ != transport::kNoStream)
    family_.detach(stream_, transport::StreamTransport::CloseMode::kAfterPeer);
}

void Connection::bind(transport::StreamId stream, const IwarpHandoff& handoff, Nanos now) {
  stream_ = stream;
  crc_ = handoff.crc;
  rtr_ = handoff.rtr;
  ird_ = std::max<uint16_t>(handoff.ird, 1);
  ord_ = handoff.ord == 0 ? 1 : handoff.ord;
  awaiting_rtr_ = !handoff.initiator;
  rtr_expected_ = !handoff.initiator && handoff.rtr != RtrKind::kNone;
  rx_.resize(kRxBytes);
  if (handoff.initiator && handoff.rtr != RtrKind::kNone) {
    send_rtr();
    nudge_later(now);
  }
  if (!handoff.initiator && handoff.rtr == RtrKind::kNone) {
    release_at_ = now + kReleaseWithoutRtr;
    qp_.arm_timer(release_at_);
  }
}

// RFC 6581 §5: the initiator's first FPDU says it is ready; a zero-length WRITE
// or READ to STag 0 touches no memory, and a READ's zero-length response needs
// no sink either.
void Connection::send_rtr() {
  DdpHeader h;
  if (rtr_ == RtrKind::kRead) {
    h.opcode = RdmapOpcode::kReadRequest;
    h.queue = kQueueReadRequest;
    h.msn = msn_out_.read_request++;
    std::array<uint8_t, kReadRequestBytes> request{};
    write_read_request(ReadRequest{}, request);
    append_fpdu(h, request);
    ++rtr_reads_;
  } else if (rtr_ == RtrKind::kWrite) {
    h.opcode = RdmapOpcode::kWrite;
    append_fpdu(h);
  } else {
    h.opcode = RdmapOpcode::kSend;
    h.msn = msn_out_.send++;
    append_fpdu(h);
  }
  write_out();
}

void Connection::nudge_later(Nanos now) {
  nudge_at_ = now + (kFirstNudge << nudges_);
  qp_.arm_timer(nudge_at_);
}

void Connection::on_timer(Nanos now) {
  if (release_at_ <= now) {
    release_at_ = kNever;
    if (awaiting_rtr_ && !ended_) {
      awaiting_rtr_ = false;
      if (produce(now)) qp_.want_tx();
    }
  }
  if (nudge_at_ > now) return;
  nudge_at_ = kNever;
  if (ended_ || heard_ || nudges_ >= kNudges || next_offset_ != 0) return;
  DdpHeader h;
  h.opcode = RdmapOpcode::kWrite;
  append_fpdu(h);
  bump(qp_.ctx().counters.iwarp_nudges);
  write_out();
  settle_broken(now);
  ++nudges_;
  if (!ended_ && nudges_ < kNudges) nudge_later(now);
}

void Connection::on_send_posted(Nanos now) {
  if (stream_ == transport::kNoStream || ended_) return;
  if (produce(now)) qp_.want_tx();
}

bool Connection::on_tx_ready(Nanos now, uint32_t) {
  if (stream_ == transport::kNoStream || ended_) return false;
  return produce(now);
}

void Connection::on_writable(Nanos now) {
  family_.streams().want_writable(stream_, false);
  if (produce(now)) qp_.want_tx();
}

// IBA 10.3.1 as iWARP verbs have it: in Error nothing more is sent or received;
// the flush already completed every WQE, so the stream closes. A QP moved to
// Error by its owner (rdma_disconnect) is a graceful close: the FIN waits for the
// peer to finish (tcp_streams_close.cc); what was written before arrives first.
void Connection::on_state_change(ibv_qp_state, ibv_qp_state to, Nanos) {
  if (to == IBV_QPS_ERR || to == IBV_QPS_RESET) end(transport::StreamTransport::CloseMode::kAfterPeer);
}

// The stream ended under the QP. `error` 0 is the peer's FIN: its graceful
// teardown (rdma_disconnect, or its process closed the device); an errno is a
// lost stream: a reset (a peer process that died: tcp_streams.cc,
// reset_if_abandoned), or the socket failed. Either way the QP is in Error;
// only a FIN counts as the peer's close (Qp::closed_by_peer).
void Connection::on_closed(int error, Nanos now) {
  if (ended_) return;
  bump(qp_.ctx().counters.iwarp_streams_lost);
  if (error == 0) qp_.note_closed_by_peer();
  end(transport::StreamTransport::CloseMode::kNow);
  qp_.enter_error(now);
}

void Connection::end(transport::StreamTransport::CloseMode mode) {
  if (ended_) return;
  ended_ = true;
  emitted_.clear();
  reads_.clear();
  owed_.clear();
  if (stream_ == transport::kNoStream) return;
  write_out();  // what is already framed (a Terminate) leaves if the kernel takes it
  family_.detach(stream_, mode);
  stream_ = transport::kNoStream;
}

// RFC 5040 §7.1: the Terminate goes on queue 2 with the layer, type and code of
// the error; then the QP is in Error (the WQE in progress carries `fault.status`)
// and the stream closes once the Terminate is written.
void Connection::terminate(const Fault& fault, Nanos now) {
  if (ended_) return;
  bump(qp_.ctx().counters.iwarp_terminates_sent);
  DdpHeader h;
  h.opcode = RdmapOpcode::kTerminate;
  h.queue = kQueueTerminate;
  h.msn = msn_out_.terminate++;
  std::array<uint8_t, kTerminateControlBytes> control{};
  write_terminate(Terminate{fault.layer, fault.type, fault.code, false, false}, control);
  append_fpdu(h, control);
  if (fault.event) qp_.post_event(*fault.event);
  end(transport::StreamTransport::CloseMode::kNow);
  qp_.enter_error(now);
}

}  // namespace softrdma::engine::iwarp
