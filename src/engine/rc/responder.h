// RC responder (IBA 9.7.5.1 "responder side"): checks each request's PSN, opcode
// sequence, length and access; places SEND and WRITE data, answers READs and
// ATOMICs; sends coalesced ACKs, NAKs and RNR NAKs; answers duplicates.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/access_check.h"
#include "engine/clock.h"
#include "engine/rc/reorder_buffer.h"
#include "engine/rc/response_queue.h"
#include "wire/packet.h"

namespace softrdma::engine::rc {

class RcConnection;

// IBA 9.7.5.1 / 11.2.5: a QP accepts requests from RTR on; RESET, INIT and ERR drop.
inline bool ready_to_receive(ibv_qp_state s) {
  return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE;
}

class Responder {
 public:
  explicit Responder(RcConnection& conn) : conn_(conn) {}

  void on_request(wire::PacketView packet, Nanos now);
  // As above, for a request that reached this host at `arrival` (`now` or before:
  // it may have waited in the kernel): what a timed ACK's hold counts from.
  void on_request(wire::PacketView packet, Nanos now, Nanos arrival) {
    taken_arrival_ = arrival;
    on_request(packet, now);
  }
  // End of a receive burst: one ACK covers every request that asked for one.
  void on_burst_end();
  // `selective`: the two ends agreed on selective repeat (selective_repeat.h).
  void reset(uint32_t rq_psn, uint32_t max_dest_rd_atomic, bool selective);
  // max_dest_rd_atomic changed (SQD->SQD): the replay cache follows, keeping results.
  void resize_atomic_results(uint32_t max_dest_rd_atomic);
  uint32_t expected_psn() const { return epsn_; }
  uint32_t msn() const { return msn_; }
  // Produces up to `budget` packets of the queued responses (READ responses,
  // ATOMIC acknowledgements), oldest first; true while more remain. A READ of
  // many megabytes is answered over many engine turns, between other QPs' work.
  bool produce(uint32_t budget, Nanos now);

 private:
  // What executing a request came to (access_check.h); the errors name the NAK
  // they send. The responder gives kDone, kRnr and the three NAKs.
  using Verdict = engine::Verdict;

  // UC (IBA 9.8.3, responder_uc.cc): the same execution, no acknowledgement; a
  // message that cannot complete is dropped whole and silently.
  void on_unacknowledged_request(wire::PacketView p, Nanos now);
  void abandon_message();
  // A request at the expected PSN; false when it was refused (RNR NAK, error).
  bool execute_in_order(wire::PacketView p, Nanos now);
  // Selective repeat (responder_selective.cc): a request `ahead` PSNs beyond the
  // expected one is held; held requests run once the gap before them fills; a
  // SACK says what is held.
  void hold_out_of_order(wire::PacketView p, uint32_t ahead);
  void execute_held(Nanos now);
  void send_sack();
  // How long the request that arrived at `arrival` has been in this host
  // (wire/ack_hold.h).
  void write_hold(std::span<uint8_t> out, Nanos arrival) const;
  Verdict execute(wire::PacketView p);
  Verdict check_sequence_and_length(wire::PacketView p) const;
  Verdict do_send(wire::PacketView p);
  Verdict do_write(wire::PacketView p);
  uint8_t* write_destination();
  Verdict do_read(wire::PacketView p);
  Verdict do_atomic(wire::PacketView p);
  Verdict do_atomic_write(wire::PacketView p);
  void complete_receive(wire::PacketView p, ibv_wc_opcode opcode, uint32_t byte_len);
  // SEND with Invalidate (responder_invalidate.cc): frees the window its IETH names.
  Verdict invalidate_for_send(wire::PacketView p);
  void on_duplicate(wire::PacketView p, Nanos now);

  // A peer's request reached registered memory that is no longer mapped
  // (docs/decisions/memory-faults.md).
  [[gnu::cold]] Verdict unmapped();
  using Response = QueuedResponse;
  bool queue_response(const Response& r, bool duplicate = false);
  bool room_for_new_response();
  void split_straddling_read(wire::PacketView p, const Response& asked, uint32_t behind,
                             Nanos now);
  void drop_responses_from(uint32_t psn);
  // Produces up to `budget` packets of `r`; returns how many, or nullopt when the
  // memory faulted (unmapped): nak_psn_ then names the response that failed.
  std::optional<uint32_t> send_read_packets(Response& r, uint32_t budget);
  void send_atomic_ack(const Response& r);
  // Emits everything queued: a packet that must not overtake them follows.
  void produce_all();
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
  // Arrivals (0: none yet): of the request being taken; of the newest executed in
  // order, which an ACK names; of the newest held past a gap, which a SACK names.
  // Not of a duplicate: a tail probe's copy of a packet arrives after the
  // originals it follows, and its arrival would shorten the hold the ACK of
  // those originals reports, making the network look slower by the responder's
  // whole absence.
  Nanos taken_arrival_ = 0;
  Nanos in_order_arrival_ = 0;
  Nanos held_arrival_ = 0;
  uint32_t held_newest_psn_ = 0;  // the PSN held_arrival_ is of
  bool ack_twice_ = false;  // the pending ACK answers a duplicate: send it twice
  bool selective_ = false;     // selective repeat agreed: hold what comes after a gap
  bool sack_pending_ = false;  // something was held (or held again): SACK at burst end
  ReorderBuffer reorder_;
  enum class Message : uint8_t { kNone, kSend, kWrite } message_ = Message::kNone;
  uint64_t recv_offset_ = 0;   // SEND: bytes placed into the receive WQE
  uint64_t write_va_ = 0;      // WRITE: next address
  uint32_t write_rkey_ = 0;
  uint64_t write_remaining_ = 0;
  uint32_t write_length_ = 0;
  uint8_t* write_host_ = nullptr;  // WRITE: host address of the rest of the range,
  uint64_t write_host_at_ = 0;     //   resolved when this many bytes were placed,
  uint64_t write_generation_ = 0;  //   in this generation of the MR table
  // Results of the last max_dest_rd_atomic ATOMICs, replayed for duplicates
  // (IBA 9.7.5.1.2: an ATOMIC must not execute twice).
  std::vector<AtomicResult> atomic_results_;
  uint32_t atomic_next_ = 0;
  // Responses waiting to be produced, in PSN order but for the parts selective
  // repeat asks for again, which go first (response_queue.h: the bounds).
  ResponseQueue responses_;
};

}  // namespace softrdma::engine::rc
