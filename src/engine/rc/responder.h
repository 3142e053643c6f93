// RC responder (IBA 9.7.5.1 "responder side"): checks each request's PSN, opcode
// sequence, length and access; places SEND and WRITE data, answers READs and
// ATOMICs; sends coalesced ACKs, NAKs and RNR NAKs; answers duplicates.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/clock.h"
#include "wire/packet.h"

namespace softrdma::engine::rc {

class RcConnection;

class Responder {
 public:
  explicit Responder(RcConnection& conn) : conn_(conn) {}

  void on_request(wire::PacketView packet, Nanos now);
  // End of a receive burst: one ACK covers every request that asked for one.
  void on_burst_end();
  void reset(uint32_t rq_psn, uint32_t max_dest_rd_atomic);
  // max_dest_rd_atomic changed (SQD->SQD): the replay cache follows, keeping results.
  void resize_atomic_results(uint32_t max_dest_rd_atomic);
  uint32_t expected_psn() const { return epsn_; }
  uint32_t msn() const { return msn_; }

 private:
  // What executing a request came to; the errors name the NAK they send.
  enum class Verdict : uint8_t { kDone, kRnr, kInvalidRequest, kRemoteAccess, kRemoteOperational };

  Verdict execute(wire::PacketView p);
  Verdict check_sequence_and_length(wire::PacketView p) const;
  Verdict do_send(wire::PacketView p);
  Verdict do_write(wire::PacketView p);
  Verdict do_read(wire::PacketView p);
  Verdict do_atomic(wire::PacketView p);
  void complete_receive(wire::PacketView p, ibv_wc_opcode opcode, uint32_t byte_len);
  void on_duplicate(wire::PacketView p, Nanos now);
  // False when the memory faulted (unmapped): the caller NAKs a remote access error
  // with nak_psn_, the PSN of the response that could not be sent.
  bool send_read_responses(uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len);
  // A peer's request reached registered memory that is no longer mapped.
  [[gnu::cold]] Verdict unmapped();
  void send_atomic_ack(uint32_t psn, uint64_t original);
  void send_ack(uint8_t syndrome, uint32_t psn);
  void fail(Verdict verdict, uint32_t psn, Nanos now);

  struct AtomicResult {
    uint32_t psn = 0;
    uint64_t original = 0;
    bool valid = false;
  };

  RcConnection& conn_;
  uint32_t epsn_ = 0;  // expected PSN
  uint32_t msn_ = 0;   // message sequence number (IBA 9.7.5.1.6)
  uint32_t nak_psn_ = 0;  // PSN an error NAK carries: the request's, or the READ response that failed
  bool nak_outstanding_ = false;  // one NAK per sequence error (IBA 9.7.5.1.3)
  bool ack_pending_ = false;
  enum class Message : uint8_t { kNone, kSend, kWrite } message_ = Message::kNone;
  uint64_t recv_offset_ = 0;   // SEND: bytes placed into the receive WQE
  uint64_t write_va_ = 0;      // WRITE: next address
  uint32_t write_rkey_ = 0;
  uint64_t write_remaining_ = 0;
  uint32_t write_length_ = 0;
  // Results of the last max_dest_rd_atomic ATOMICs, replayed for duplicates
  // (IBA 9.7.5.1.2: an ATOMIC must not execute twice).
  std::vector<AtomicResult> atomic_results_;
  uint32_t atomic_next_ = 0;
};

}  // namespace softrdma::engine::rc
