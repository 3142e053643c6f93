// One iWARP RC QP's protocol (RFC 5040 RDMAP over RFC 5041 DDP over RFC 5044 MPA;
// docs/decisions/iwarp.md): the send queue becomes FPDUs written to the QP's TCP
// connection (send.cc), and the FPDUs read from it are placed and completed
// (receive.cc). TCP delivers in order and without loss, so there are no PSNs,
// acknowledgements or retransmissions: a SEND or WRITE is complete once its last
// byte is in TCP's hands (RFC 5040 §5.2: "delivered to the LLP"), a READ once its
// last response arrived; completions keep the send queue's order. Every error is
// answered by a Terminate (RFC 5040 §7) and the end of the connection.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "engine/protocol.h"
#include "engine/wqe.h"
#include "transport/stream.h"
#include "wire/iwarp/ddp_rdmap.h"
#include "wire/iwarp/handoff.h"

namespace softrdma::engine {
class Qp;
}

namespace softrdma::engine::iwarp {

class IwarpFamily;

// The most payload one FPDU carries: MPA's ULPDU_Length is 16 bits (RFC 5044 §4),
// less the largest DDP/RDMAP header (an untagged one with a READ request's).
inline constexpr size_t kMaxSegmentPayload = 65535 - 64;

// What went wrong, as RFC 5040 §7.2 / RFC 5041 §7.2 name it for a Terminate, and
// the completion status of the WQE it fails, if any.
struct Fault {
  wire::iwarp::TerminateLayer layer;
  uint8_t type;
  uint8_t code;
  ibv_wc_status status = IBV_WC_REM_OP_ERR;  // of the WQE (ours, or a receive)
  std::optional<ibv_event_type> event;        // the async event it raises here
};

class Connection final : public Protocol {
 public:
  Connection(Qp& qp, IwarpFamily& family);
  ~Connection() override;

  void on_send_posted(Nanos now) override;
  bool on_tx_ready(Nanos now, uint32_t budget) override;
  Nanos deadline() const override { return std::min(nudge_at_, release_at_); }
  void on_timer(Nanos now) override;
  void on_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now) override;

  // The family: the QP speaks on `stream` from now on.
  void bind(transport::StreamId stream, const wire::iwarp::IwarpHandoff& handoff, Nanos now);
  transport::StreamId stream() const { return stream_; }
  Qp& qp() const { return qp_; }
  // The stream has bytes, or can take more, or has ended (`error` 0: the peer's
  // orderly close). on_readable: whether it took any bytes (or the end).
  bool on_readable(Nanos now);
  void on_writable(Nanos now);
  void on_closed(int error, Nanos now);

 private:
  // receive.cc: the FPDUs in rx_, one DDP segment at a time. False once the
  // connection was ended by what arrived.
  bool take_fpdus(Nanos now);
  bool skip_rtr(std::span<const uint8_t> ulpdu);
  bool on_segment(std::span<const uint8_t> ulpdu, Nanos now);
  bool on_write(const wire::iwarp::DdpHeader& h, std::span<const uint8_t> payload, Nanos now);
  bool on_read_response(const wire::iwarp::DdpHeader& h, std::span<const uint8_t> payload,
                        Nanos now);
  bool on_send(const wire::iwarp::DdpHeader& h, std::span<const uint8_t> payload, Nanos now);
  bool on_read_request(const wire::iwarp::DdpHeader& h, std::span<const uint8_t> payload,
                       Nanos now);
  void on_terminate(std::span<const uint8_t> payload, Nanos now);
  void complete_receive(const wire::iwarp::DdpHeader& h);

  // send.cc: the send queue and the READ responses owed, as FPDUs in out_.
  bool produce(Nanos now);
  bool emit_wqe(uint32_t index, SendWqe& wqe, Nanos now);
  bool emit_message(SendWqe& wqe, Nanos now);
  bool emit_read_request(uint32_t index, SendWqe& wqe);
  bool emit_read_responses();
  // FPDUs are built in out_: open_fpdu writes `header` and the `extra` header
  // bytes after it and answers where the payload goes; close_fpdu pads and seals
  // it (RFC 5044 §4, §6), drop_fpdu takes it back (its payload could not be read).
  std::span<uint8_t> open_fpdu(const wire::iwarp::DdpHeader& header,
                               std::span<const uint8_t> extra, size_t payload_length);
  void close_fpdu();
  void drop_fpdu() { out_.resize(fpdu_at_); }
  void append_fpdu(const wire::iwarp::DdpHeader& header, std::span<const uint8_t> extra = {}) {
    open_fpdu(header, extra, 0);
    close_fpdu();
  }
  // Writes out_ to the stream; false while some remains (the stream is watched for
  // room) or it broke (broken_).
  bool write_out();
  void settle_broken(Nanos now);
  void retire(Nanos now);
  bool out_full() const { return out_.size() - out_begin_ >= kOutLimit; }

  // connection.cc: errors and the end.
  void terminate(const Fault& fault, Nanos now);
  // The QP stops speaking on its stream; `mode`: how the stream closes (stream.h).
  void end(transport::StreamTransport::CloseMode mode);
  void send_rtr();
  void nudge_later(Nanos now);

  // Untagged queues (RFC 5040 §5.1) and the MSN each side numbers them with
  // (RFC 5041 §5.3: the first message of each queue is MSN 1).
  struct Queues {
    uint32_t send = 1, read_request = 1, terminate = 1;
  };
  // A READ request this side answers (RFC 5040 §4.5): the source checked when it
  // arrived, streamed out as tagged READ responses to the requester's sink.
  struct OwedRead {
    wire::iwarp::ReadRequest request;
    uint32_t sent = 0;
  };
  // A WQE whose FPDUs are all in out_: it completes once they are written (an
  // operation with a response: once it arrived) and every WQE before it did.
  struct Emitted {
    uint32_t index;
    uint64_t end;  // bytes_queued_ after its last FPDU
  };
  static constexpr size_t kOutLimit = 1 << 20;

  Qp& qp_;
  IwarpFamily& family_;
  transport::StreamId stream_ = transport::kNoStream;
  bool crc_ = false;
  // RFC 6581 §5: the responder sends nothing before the initiator's first FPDU.
  // RFC 5044 §7.1 (the reason for RFC 6581's RTR): the responder's first FPDU
  // follows the initiator's first, whether or not an RTR was agreed.
  bool awaiting_rtr_ = false;
  bool rtr_expected_ = false;  // the responder's next FPDU is the peer's RTR
  wire::iwarp::RtrKind rtr_ = wire::iwarp::RtrKind::kNone;
  uint16_t ird_ = 0, ord_ = 0;

  std::vector<uint8_t> rx_;
  size_t rx_end_ = 0;  // bytes of rx_ holding what arrived and was not taken
  std::vector<uint8_t> out_;
  size_t out_begin_ = 0;     // out_[out_begin_..] is still to be written
  size_t fpdu_at_ = 0, fpdu_ulpdu_ = 0;  // the FPDU open_fpdu began
  int broken_ = 0;           // the errno a write met: the stream is gone
  uint64_t bytes_queued_ = 0, bytes_written_ = 0;

  Queues msn_out_;  // the next MSN of each queue this side sends on
  Queues msn_in_;   // the MSN expected next from the peer
  uint32_t next_wqe_ = 0;       // the send queue's index of the next WQE to emit
  uint64_t next_offset_ = 0;    // of that WQE, the bytes already in FPDUs
  bool started_ = false;        // next_wqe_ was set from the queue's head
  std::deque<Emitted> emitted_;
  std::deque<uint32_t> reads_;  // our READs waiting for responses, in order
  std::deque<OwedRead> owed_;   // READ requests to answer, in order
  uint32_t rtr_reads_ = 0;      // our RTR READ, its zero-length response not yet in
  // The SEND message being received (RFC 5041 §5.3: MSN, MO).
  bool receiving_ = false;
  uint64_t received_ = 0;
  bool ended_ = false;
  // The initiator's zero-length WRITEs after its first FPDU while the peer has
  // sent nothing (connection.cc: siw's accept race); kNever when none is due.
  bool heard_ = false;
  uint32_t nudges_ = 0;
  Nanos nudge_at_ = kNever;
  // A responder without an RTR sends from then on if the initiator has not sent
  // first (connection.cc); kNever otherwise.
  Nanos release_at_ = kNever;
};

}  // namespace softrdma::engine::iwarp
