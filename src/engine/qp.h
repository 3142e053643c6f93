// Queue pair, the verbs object (IBA 10.2.4, 11.2.5): attributes, state machine and
// the two work queues. The protocol engine behind it (engine/rc/) reads and
// completes the queues through the methods here.
//
// Ownership (docs/decisions/threading.md): posting threads are the producers of
// the work queues, serialised per QP by mutex(); the engine's owner (Device) is
// their consumer and owns the protocol. attr_ changes only with both the engine
// and mutex() held (modify, entering Error), so either one is enough to read it.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <span>
#include <vector>

#include "engine/clock.h"
#include "engine/counters.h"
#include "engine/family.h"
#include "engine/host/recv_queue.h"
#include "engine/protocol.h"
#include "engine/ring.h"
#include "engine/role_context.h"
#include "engine/srq.h"
#include "engine/wqe.h"
#include "samehost/recv_queue.h"

namespace softrdma::engine {

class Cq;
class Device;
namespace roce {
class RoceFamily;
}
class Srq;
struct Xrcd;

// The value of an enum field a C program filled in, read as the int it may be
// (an out-of-range value loaded as a C++ enum is undefined behaviour).
template <typename E>
int raw_enum(const E& value) {
  static_assert(sizeof(E) == sizeof(int));
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}
class Pd;

// What create_qp needs (ibv_qp_init_attr with the engine's own CQ objects).
struct QpInit {
  ibv_qp_type type = IBV_QPT_RC;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  Srq* srq = nullptr;    // receives from this SRQ instead of a queue of its own
  Xrcd* xrcd = nullptr;  // XRC receive QP: its domain (it has no PD, CQs or SRQ)
  // Where the work queues (WQEs, their SGEs, inline data) live: a parent domain's
  // allocator (ibv_alloc_parent_domain(3)), or null for the heap.
  std::pmr::memory_resource* memory = nullptr;
  // QP1, the General Services Interface (IBA 13.5.1): a UD QP with QPN 1, one per
  // device, where Communication Manager MADs arrive (librdmacm's agent).
  bool gsi = false;
  // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (ibv_create_qp_ex(3)): a UD QP that gets no
  // copy of the multicast datagrams it sent itself.
  bool block_self_multicast_loopback = false;
};

class Qp {
 public:
  Qp(Device& device, uint32_t qpn, Pd* pd, const QpInit& init);
  ~Qp();

  // Verbs entry points; errors are positive errno values as verbs returns them.
  // `by_bind_verb`: the list is ibv_bind_mw(3)'s one type 1 bind.
  int post_send(const ibv_send_wr* wr, const ibv_send_wr** bad, bool by_bind_verb = false);
  int post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad);
  int modify(const ibv_qp_attr& attr, int mask);
  // Fills attr and the type/cap/sq_sig_all of init (ibv_query_qp(3)).
  int query(ibv_qp_attr& attr, int mask, ibv_qp_init_attr& init) const;

  uint32_t qpn() const { return qpn_; }
  ibv_qp_type type() const { return type_; }
  bool blocks_self_multicast_loopback() const { return block_self_multicast_loopback_; }
  ibv_qp_state state() const { return attr_.qp_state; }
  const ibv_qp_attr& attr() const { return attr_; }
  const ibv_qp_cap& cap() const { return cap_; }
  Device& device() const { return device_; }
  // What its protocol's roles use of the device (role_context.h).
  const RoleContext& ctx() const { return ctx_; }
  // The device's actions its protocol asks for: a timer armed for `when`, output
  // to produce in bursts (Device::want_tx), an async event about this QP.
  void arm_timer(Nanos when);
  void want_tx();
  void post_event(ibv_event_type type);
  // The PD memory accesses are checked against: an XRC receive QP has none of its
  // own and uses the PD of the SRQ its current request names (IBA A14).
  Pd* pd() const { return pd_ != nullptr || srq_ == nullptr ? pd_ : srq_->pd(); }
  Srq* srq() const { return srq_; }
  Xrcd* xrcd() const { return xrcd_; }
  Cq* send_cq() const { return send_cq_; }
  Cq* recv_cq() const { return recv_cq_; }
  uint32_t path_mtu_bytes() const;
  std::mutex& mutex() const { return mutex_; }
  Protocol& protocol() { return *protocol_; }
  const Protocol& protocol() const { return *protocol_; }
  // The device's bookkeeping of this QP (its lists of QPs with a doorbell rung, a
  // timer armed, output to produce). Their owner is the Device alone (device.cc);
  // the doorbell fields are shared with posting threads through the atomics.
  struct DeviceLinks {
    std::atomic<bool> doorbell_rung{false};
    Qp* doorbell_next = nullptr;
    bool timed = false;  // in Device::timed_
    bool busy = false;   // in Device::busy_
  };
  DeviceLinks& device_links() { return device_links_; }
  bool on_same_host() const { return protocol_->on_same_host(); }

  // Enhanced Connection Establishment (ibv_set_ece(3), IBA's REQ/REP Vendor ID and
  // options): what the peer agreed to, set before RTR by the application or the
  // rdma_cm (docs/decisions/selective-repeat.md). Unset: nothing was agreed.
  void set_ece_options(uint32_t options) {
    ece_options_.store(options | kEceAgreed, std::memory_order_relaxed);
  }
  bool ece_set() const { return (ece_options_.load(std::memory_order_relaxed) & kEceAgreed) != 0; }
  bool ece_agreed(uint32_t option) const {
    const uint32_t o = ece_options_.load(std::memory_order_relaxed);
    return (o & kEceAgreed) != 0 && (o & option) != 0;
  }
  uint32_t ece_options() const { return ece_options_.load(std::memory_order_relaxed) & ~kEceAgreed; }

  // This QP's traffic counters (engine owner writes; see counters.h).
  QpCounters& counters() { return *counters_; }
  // Its counters live in `row` from now on (the status segment's row for it, which
  // the device's QP observer gives at creation, before any traffic).
  void count_into(QpCounters& row) { counters_ = &row; }
  Ring<SendWqe>& sq() { return sq_; }
  Ring<RecvWqe>& rq() { return rq_; }

  // Receive WQEs (the roles call these; engine owner). The one the message in
  // progress uses, never taking one: null if none was taken.
  RecvWqe* current_recv();
  // The one for a message beginning now: the receive queue's head, or one taken
  // out of the SRQ (IBA 10.2.9.3); null when none is posted (RNR).
  RecvWqe* take_recv();
  // Attached to a tag-matching SRQ (RC only).
  bool tm_srq() const { return srq_ != nullptr && srq_->type() == IBV_SRQT_TM; }
  // The same for a SEND beginning with `start` on a QP attached to a TM SRQ
  // (qp_tm.cc): the tagged buffer it matched or an ordinary WQE; null for an RNR.
  // `last`: this first packet is also the message's last.
  RecvWqe* take_tm_recv(std::span<const uint8_t> start, bool last);
  // Of a SEND's payload, what is placed in the receive buffer: all of it, but for
  // the TMH of a matched eager message (at its first packet) and everything of a
  // matched rendezvous request (tag_matching.md).
  std::span<const uint8_t> placed_part(std::span<const uint8_t> payload, bool first) const {
    if (tm_.kind == TmKind::kRendezvous) return {};
    if (tm_.kind == TmKind::kEager && first)
      return payload.subspan(std::min<size_t>(kTmhBytes, payload.size()));
    return payload;
  }
  // XRC receive QP: the request names XRC SRQ `srqn` (XRCETH); false when no SRQ
  // of that number is in the QP's XRC domain (IBA A14).
  bool select_xrc_srq(uint32_t srqn);
  // The SRQ is being destroyed: a WQE taken from it is dropped.
  void forget_recv_from(const Srq& srq);

  // Completion of the WQE at the send queue's head, and of current_recv().
  void complete_send_head(ibv_wc_status status);
  void complete_recv_head(const ibv_wc& wc, bool solicited);
  // The same-host path's receive queue (host/qp_recv.cc): processes of this host
  // place SENDs into this QP's receive WQEs themselves. Its number as published
  // (index + 1; 0: SENDs to this QP take the wire), and its shared state.
  // A QP attached to an SRQ names the SRQ's (host/srq_recv.cc).
  uint32_t host_recv_queue() const {
    if (srq_ != nullptr) return xrcd_ == nullptr ? srq_->host_recv_queue() : 0;
    return host_rq_.number();
  }
  samehost::RecvState* host_recv() const { return host_rq_.state(); }
  // Engine owner: completes the receives peers placed, in order (a peer left a
  // notice, or the responder needs the queue's head); false when none was.
  bool drain_host_receives(Nanos now, bool stop_at_failure = false);
  // Whether a message for this QP may land in `srq`: its own SRQ, or an XRC SRQ of
  // its domain (an XRC receive QP, IBA A14).
  bool receives_from(const Srq& srq) const;
  // Engine owner: a peer placed a message for this QP in `wqe` of `srq`, with
  // `result`; false when the QP takes none (Reset).
  bool complete_host_srq_recv(const Srq& srq, const RecvWqe& wqe,
                              const samehost::RecvResult& result, Nanos now);
  // A UD QP whose queue peers fill (host_recv() not null): the wire's message of
  // `length` bytes claims its WQE as they do, and completes it in claim order
  // (host/qp_recv.cc). Null when none is posted, or (`too_long`) the next is short.
  RecvWqe* claim_datagram_recv(uint64_t length, uint32_t& index, bool& too_long, Nanos now);
  void complete_datagram_recv(uint32_t index, samehost::RecvResult result, Nanos now);

  // An iWARP connection manager bound the QP to its connection (iwarp/family.h):
  // INIT to RTS at once, with the READ depths the peers settled (RFC 6581 §5).
  // Engine held.
  void enter_rts_connected(uint16_t ird, uint16_t ord, Nanos now);
  // IBA 10.3.1 / 11.2.5.4: enter the Error state; flush every outstanding WQE.
  // Engine owner, mutex() not held.
  void enter_error(Nanos now);
  // The QP's connection ended because its peer closed it in order (iWARP: the TCP
  // stream's FIN, the graceful teardown), not because it was lost (a reset, a
  // Terminate, a socket error). Set by the family before it moves the QP to
  // Error, so that whoever sees the flush may ask (softrdma_qp_closed_by_peer:
  // rsockets answer 0 for a close, ECONNRESET for a loss). Any thread may read.
  void note_closed_by_peer() { closed_by_peer_.store(true, std::memory_order_release); }
  bool closed_by_peer() const { return closed_by_peer_.load(std::memory_order_acquire); }
  // Engine owner: the doorbell rang (work posted, or a post in Error to flush).
  void serve_doorbell(Nanos now);

 private:
  int check_send_wr(const ibv_send_wr& wr, bool by_bind_verb) const;
  int check_memory_wr(const ibv_send_wr& wr, bool by_bind_verb) const;
  void copy_memory_wr(const ibv_send_wr& wr, SendWqe& wqe, bool by_bind_verb) const;
  int check_recv_wr(const ibv_recv_wr& wr) const;
  void copy_send_wr(const ibv_send_wr& wr, SendWqe& wqe, uint32_t slot, bool by_bind_verb);
  int check_attr(const ibv_qp_attr& attr, int mask) const;
  void apply_attr(const ibv_qp_attr& attr, int mask);
  int check_modify(const ibv_qp_attr& attr, int mask, ibv_qp_state from) const;
  void after_state_change(ibv_qp_state from, ibv_qp_state to, Nanos now);
  void set_state(ibv_qp_state to);
  void flush_and_notify(ibv_qp_state from, Nanos now);
  void maybe_report_drained();
  void reset_queues();
  void flush_queues();
  void flush_receives();
  // host/qp_recv.cc.
  void reserve_host_receives();
  void release_host_receives();
  void reopen_host_receives();
  void close_host_receives();
  RecvWqe* take_shared_recv();
  bool drain_datagram_receives(Nanos now);
  void fail_on_receive(Nanos now);
  // `from`: the SRQ the WQE was in (an XRC SRQ's PD is the receive's, IBA A14).
  ibv_wc host_recv_wc(const RecvWqe& wqe, const samehost::RecvResult& result,
                      const Srq* from = nullptr);
  void invalidate_for_host_send(uint32_t rkey, const Pd* pd, ibv_wc& wc);
  ibv_wc make_send_wc(const SendWqe& wqe, ibv_wc_status status) const;
  void push_completion(Cq& cq, const ibv_wc& wc, bool solicited);
  bool sq_full() const;
  // Tag matching (qp_tm.cc).
  void complete_tm_recv(ibv_wc wc, bool solicited, Cq& cq);
  void start_rendezvous(ibv_wc wc, bool solicited, Cq& cq, const TmHeader& header);
  using FinBytes = std::array<uint8_t, kTmhBytes + kRvhBytes>;
  bool queue_tm_send(TmSend kind, uint64_t wr_id, const FinBytes& fin, const TmHeader* read,
                     std::span<const Sge> sges);
  void complete_tm_send(ibv_wc_status status);

  Device& device_;
  const RoleContext ctx_;
  const uint32_t qpn_;
  const ibv_qp_type type_;
  const bool block_self_multicast_loopback_;
  Pd* const pd_;
  Cq* const send_cq_;
  Cq* const recv_cq_;
  Srq* srq_;            // fixed, or (XRC receive QP) the one the last request named
  Xrcd* const xrcd_;
  // The receive WQE taken from the SRQ for the message in progress, and the CQ
  // its completion goes to (the QP's, or an XRC SRQ's own).
  HeldRecv held_;
  Srq* held_from_ = nullptr;
  const bool sq_sig_all_;
  ibv_qp_cap cap_{};
  ibv_qp_attr attr_{};
  bool report_sq_drained_ = false;  // IBV_QP_EN_SQD_ASYNC_NOTIFY was asked for

  mutable std::mutex mutex_;
  Ring<SendWqe> sq_;
  Ring<RecvWqe> rq_;
  std::pmr::vector<Sge> sq_sges_;           // cap_.max_send_sge per slot
  std::pmr::vector<Sge> rq_sges_;           // cap_.max_recv_sge per slot
  std::pmr::vector<uint8_t> inline_arena_;  // cap_.max_inline_data per slot
  std::unique_ptr<Protocol> protocol_;
  const FamilyTraits* family_traits_ = nullptr;  // its device's family's (family.h)

  // The same-host receive queue (host/qp_recv.cc, host/recv_queue.h), and
  // whether the responder holds the head for a wire message.
  host::HostRecvQueue host_rq_;
  bool wire_holds_recv_ = false;

  // Tag matching (a QP attached to a TM SRQ). The message being received (engine
  // owner); the send queue's slots the TM SRQ may use beyond cap_.max_send_wr, one
  // per rendezvous in progress (its READ, then its FIN), with their SGEs and FIN
  // bytes per slot; how many of the queue's WQEs are the TM SRQ's (written by the
  // engine under mutex_, read by posters to keep their own max_send_wr).
  static constexpr uint32_t kTmSendSlots = 16;
  TmMessage tm_;
  std::vector<Sge> tm_sges_;
  std::vector<uint8_t> tm_fin_;
  std::atomic<uint32_t> tm_sends_{0};

  std::atomic<bool> closed_by_peer_{false};  // cleared when a connection is bound

  DeviceLinks device_links_;
  QpCounters own_counters_;
  static constexpr uint32_t kEceAgreed = 1u << 31;  // ece_options_: set by set_ece_options
  std::atomic<uint32_t> ece_options_{0};
  QpCounters* counters_ = &own_counters_;  // or the QP's row of the status segment
};

}  // namespace softrdma::engine
