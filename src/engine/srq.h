// Shared receive queue (IBA 10.2.9, 11.2.3; ibv_create_srq(3)) and XRC domain
// (IBA Annex A14, ibv_open_xrcd(3)).
//
// An SRQ holds receive WQEs that any QP attached to it may consume. Posting
// threads are its producers (serialised by mutex_); the device's engine owner is
// its one consumer: a QP *takes* a WQE when a message begins (IBA 10.2.9.3), moving
// the WQE and its SGEs out of the shared ring into the QP, because other QPs go on
// consuming while that message is still arriving (docs/decisions/srq.md).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "engine/clock.h"
#include "engine/host/recv_queue.h"
#include "engine/ring.h"
#include "engine/tag_list.h"
#include "engine/wqe.h"
#include "samehost/recv_queue.h"

namespace softrdma::engine {

class Cq;
class Device;
class Pd;

// An XRC domain (IBA A14): the scope within which XRC receive QPs may feed
// XRC SRQs. Shared by the opens of one inode within a process.
struct Xrcd {
  uint64_t inode = 0;  // the file it was opened by (0: anonymous)
  uint32_t handle = 0;  // names it to processes of the host (never 0)
  uint32_t opens = 0;  // ibv_open_xrcd calls not yet closed
  std::atomic<uint32_t> users{0};  // SRQs and QPs in the domain
};

// A receive WQE a QP took out of its SRQ, with its own copy of the SGEs.
struct HeldRecv {
  RecvWqe wqe;
  std::vector<Sge> sges;
  bool held = false;
};

struct SrqInit {
  ibv_srq_attr attr{};      // max_wr, max_sge, srq_limit
  ibv_srq_type type = IBV_SRQT_BASIC;
  Cq* cq = nullptr;         // XRC, TM: where its receive completions go
  Xrcd* xrcd = nullptr;     // XRC
  ibv_tm_cap tm{};          // TM: max_num_tags, max_ops
};

class Srq {
 public:
  Srq(Device& device, uint32_t srqn, Pd* pd, const SrqInit& init);
  ~Srq();

  // Verbs entry points; errors are positive errno values as verbs returns them.
  int post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad);
  // ibv_modify_srq(3): IBV_SRQ_LIMIT arms the limit event; IBV_SRQ_MAX_WR
  // (resize) is refused, as the device does not report IBV_DEVICE_SRQ_RESIZE.
  int modify(const ibv_srq_attr& attr, int mask);
  ibv_srq_attr query() const;

  // Engine owner: moves the oldest WQE into `into`; false when none is posted.
  // Arms nothing, fires the limit event when the WQEs left fall below the limit.
  bool take(HeldRecv& into);

  // Tag matching (srq_tm.cc; docs/decisions/tag-matching.md).
  // ibv_post_srq_ops(3): runs the list operations with the engine held, so they
  // are ordered with the messages it matches; their completions go to the CQ.
  // EINVAL on an SRQ that is not IBV_SRQT_TM.
  int post_ops(ibv_ops_wr* wr, ibv_ops_wr** bad);
  // Engine owner: a message beginning with `start` arrives at a QP attached to this
  // TM SRQ. Fills `into` with the tagged buffer it matched or an ordinary WQE and
  // `msg` with what it is; false, changing nothing, when it cannot be received now
  // (no ordinary WQE; a rendezvous match while `may_rendezvous` is false).
  bool take_tm(std::span<const uint8_t> start, bool may_rendezvous, HeldRecv& into,
               TmMessage& msg);
  const TagList* tags() const { return tags_.get(); }

  // The same-host path (host/srq_recv.cc; docs/decisions/same-host.md "SRQs"):
  // processes of this host claim its WQEs and place SENDs in them for the QPs
  // attached to it. Its number as published (index + 1; 0: SENDs take the wire).
  uint32_t host_recv_queue() const { return host_rq_.number(); }
  samehost::RecvState* host_recv() const { return host_rq_.state(); }
  // Engine owner: completes, on their QPs, the WQEs peers filled (a notice came,
  // a QP enters Error, or a wire message takes a WQE after them); false if none.
  bool drain_host_receives(Nanos now);

  uint32_t srqn() const { return srqn_; }
  ibv_srq_type type() const { return type_; }
  Pd* pd() const { return pd_; }
  Cq* cq() const { return cq_; }
  Xrcd* xrcd() const { return xrcd_; }
  uint32_t max_sge() const { return max_sge_; }
  std::atomic<uint32_t> users{0};  // QPs attached (destroying a used SRQ is EBUSY)

 private:
  Device& device_;
  const uint32_t srqn_;
  const ibv_srq_type type_;
  Pd* const pd_;
  Cq* const cq_;
  Xrcd* const xrcd_;
  const uint32_t max_sge_;

  mutable std::mutex mutex_;  // posting threads, modify and query
  Ring<RecvWqe> ring_;
  std::vector<Sge> sges_;  // max_sge_ per slot
  // IBA 10.2.9.2: the limit is armed by modify and disarmed when it fires.
  std::atomic<uint32_t> limit_{0};
  // IBV_SRQT_TM: the tag list (owner: the engine) and how many operations one
  // post may carry.
  std::unique_ptr<TagList> tags_;
  uint32_t max_ops_ = 0;

  int run_op(ibv_ops_wr& wr);
  // host/srq_recv.cc.
  void reserve_host_receives();
  void release_host_receives();
  bool take_claimed(HeldRecv& into);
  void retire_consumed();
  void fire_limit_if_low(uint32_t left);

  // The same-host state: the queue in the node segment (host/recv_queue.h, the
  // type a QP's own queue is too); per slot, whether the WQE was taken by a wire
  // message or completed (engine owner), so that the head moves past it (WQEs
  // are claimed in order but complete in any).
  host::HostRecvQueue host_rq_;
  std::vector<uint8_t> consumed_;
  bool draining_ = false;
};

}  // namespace softrdma::engine
