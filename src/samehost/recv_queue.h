// The receive queue of a QP as processes of the same host consume it: the shared
// part lives in the owner's node segment (node_segment.h), the rest in the
// owner's memory (engine/host/qp_recv.cc; the sender's side in
// engine/rc/host_send.cc).
#pragma once

#include <atomic>
#include <cstdint>

namespace softrdma::samehost {

// A receive queue whose WQEs peers may consume: a SEND (or WRITE with immediate)
// from a process of this host is placed by that process (docs/decisions/
// same-host.md, "SENDs"). The WQEs stay in the owner's memory; a peer claims the
// next one here, reads its scatter list there (RecvSge, max_sge per slot), writes
// the payload and a RecvResult with cross-memory attach, then moves `placed` on
// and leaves a notice; the owner completes the WQE when it takes the notice.
// IBA 10.2.9: WQEs are consumed in the order they were posted, whoever consumes.
//
// A shared receive queue (IBA 10.2.9) is published the same way (kind kSrq), with
// two differences, because several senders place into it at once, each for its
// own QP: `placed` is unused and each result says itself that it is complete
// (RecvResult::seq), and names the QP it was sent to; its results are always in
// the segment (an SRQ of more slots than kSharedSges takes the wire).
//
// A UD QP's own queue (kind kDatagram) is filled the same way as an SRQ, as every
// process of the host may send to it at once; its scatter entries' L_Keys are of
// the QP's PD, as for kQueue.
struct RecvState {
  static constexpr uint32_t kQueue = 0, kSrq = 1, kDatagram = 2;
  // The QP it serves (its SRQ number for an SRQ); 0 while closed (nothing claims).
  std::atomic<uint32_t> qpn;
  std::atomic<uint32_t> posted;     // WQEs posted so far (mod 2^32): the owner
  std::atomic<uint32_t> claimed;    // WQEs claimed so far: compare-exchange, any process
  std::atomic<uint32_t> placed;     // WQEs before this one a peer placed, with results
  std::atomic<uint32_t> noticed;    // 1 while a notice of this queue waits for the owner
  std::atomic<uint32_t> slot_count;  // WQE slots (a power of two): index mod slot_count
  std::atomic<uint32_t> max_sge;
  std::atomic<uint32_t> kind;       // kQueue, kSrq or kDatagram
  std::atomic<uint32_t> pd;         // kSrq: the PD its scatter entries' L_Keys must be of
  std::atomic<uint64_t> sges;       // the owner's address of slot 0's first RecvSge
  std::atomic<uint64_t> results;    // the owner's address of slot 0's RecvResult
  // 1: the scatter lists are also in the segment (NodeView::recv_sges, this
  // queue's kSharedSges entries), where a peer reads them without a system call,
  // and the results are there only (NodeView::recv_results, a slot each), where
  // it writes them with stores.
  std::atomic<uint32_t> shared_sges;
};

// What the owner publishes of a queue before it opens it (RecvState::qpn): its
// shape, where its lists and results are, and every counter at zero.
struct RecvQueueShape {
  uint32_t kind = RecvState::kQueue;
  uint32_t pd = 0;  // kSrq
  uint32_t slot_count = 0;
  uint32_t max_sge = 0;
  uint64_t sges = 0;     // the owner's address of slot 0's first RecvSge
  uint64_t results = 0;  // the owner's address of slot 0's RecvResult (0: in the segment)
  bool shared_sges = false;
};

inline void describe(RecvState& state, const RecvQueueShape& shape) {
  state.kind.store(shape.kind, std::memory_order_relaxed);
  state.pd.store(shape.pd, std::memory_order_relaxed);
  state.slot_count.store(shape.slot_count, std::memory_order_relaxed);
  state.max_sge.store(shape.max_sge, std::memory_order_relaxed);
  state.sges.store(shape.sges, std::memory_order_relaxed);
  state.results.store(shape.results, std::memory_order_relaxed);
  state.shared_sges.store(shape.shared_sges ? 1 : 0, std::memory_order_relaxed);
  state.posted.store(0, std::memory_order_relaxed);
  state.claimed.store(0, std::memory_order_relaxed);
  state.placed.store(0, std::memory_order_relaxed);
  state.noticed.store(0, std::memory_order_relaxed);
}

// Scatter entries of one queue the segment holds: a queue of at most this many
// (slots × max_recv_sge) keeps a copy there, and its results (at most this many
// slots, then). 1024 takes perftest's (512 × 1), ibv_rc_pingpong's (500 × 1) and
// rping's; the segment file is sparse, so the 64 MiB of each area reserve
// address space, and memory only for the queues in use.
inline constexpr uint32_t kSharedSges = 1024;

// One scatter entry of a receive WQE, as the owner keeps it (engine::Sge).
struct RecvSge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

// What a peer wrote into the owner's memory for a WQE it consumed.
struct RecvResult {
  static constexpr uint32_t kWithImm = 1, kSolicited = 2, kRdmaWithImm = 4;
  // kSrq: the WQE was claimed but nothing was placed in it (the sender's own
  // buffer went, after another sender had claimed the next one): it is consumed
  // without a completion, and counted.
  static constexpr uint32_t kVoid = 8;
  // A UD message (IBA 11.4.1.2: the WQE's first 40 bytes hold its GRH, written by
  // the sender) from an IPv4 GID: the GRH holds an IPv4 header in its last 20
  // bytes, as over RoCEv2.
  static constexpr uint32_t kIpv4 = 16;
  // SEND with Invalidate: `imm_data` holds the R_Key the owner invalidates as it
  // completes the WQE (IBA 10.6.7.2.3; the sender checked it was a type 2 window
  // bound through that QP).
  static constexpr uint32_t kInvalidate = 32;
  uint32_t byte_len;
  uint32_t imm_data;  // network byte order; kInvalidate: the R_Key
  uint32_t status;    // ibv_wc_status
  uint32_t flags;
  uint32_t qpn;       // kSrq: the QP the message was sent to
  // kSrq: the WQE's index + 1 once the rest is written (stored last, release):
  // results of one SRQ are written in any order, each marked on its own (the
  // owner completes them in claim order).
  uint32_t seq;
  uint32_t src_qp;  // UD: the sender's QP
};

class NodeSegment;

// The owner's reading of a queue of many senders, in claim order: the result of
// WQE `index` once its claimer marked it (`seq`). One not marked holds the queue:
// a sender in the middle of a placement is the common case and costs nothing;
// only when the same WQE still holds it at the next look does the owner ask
// whether its claimer died (NodeSegment::claim_abandoned), and a WQE given up so
// is read as a void.
class StuckClaim {
 public:
  // False while WQE `index` holds the queue; else its result is in `out` and the
  // slot's mark cleared.
  bool take_result(const NodeSegment& node, RecvResult& shared, uint32_t index, RecvResult& out);

 private:
  bool stuck_ = false;
  uint32_t index_ = 0;
};

}  // namespace softrdma::samehost
