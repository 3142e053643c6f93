// The software RNIC (DESIGN.md §2): one port, a GID table built from the transport's
// address, and the tables of PDs, MRs, CQs and QPs. Its port speaks one wire
// protocol family (family.h; RoCEv2 today), which reads the transports, hands
// each arrival to its QP and makes each QP's protocol; the device runs the turns,
// the doorbells and the timers.
//
// Ownership (docs/decisions/threading.md): at any moment at most one thread runs
// the engine, the one holding engine_mutex_ for a "turn". It owns every QP's
// protocol state, the send batch, the timer list and the engine counters. Turns
// are taken with try_lock on the data path (progress(), ring_doorbell()), so a
// thread that finds the engine busy never waits: a poller returns, a poster leaves
// a doorbell that the owner serves before it lets go. Cold paths (create, modify,
// destroy) wait for the engine with hold_engine().
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/ah.h"
#include "engine/clock.h"
#include "engine/counters.h"
#include "engine/cq.h"
#include "engine/family.h"
#include "engine/limits.h"
#include "engine/mr.h"
#include "engine/pd.h"
#include "engine/qp.h"
#include "engine/srq.h"
#include "transport/stream.h"
#include "transport/transport.h"
#include "wire/iwarp/handoff.h"

namespace softrdma::engine {

namespace host {
class HostExecutor;
}

using transport::Gid;

struct AsyncEvent {
  ibv_event_type type;
  uint32_t qpn = 0;   // for QP events
  Cq* cq = nullptr;   // for CQ events
  Srq* srq = nullptr; // for SRQ events
};

class Device {
 public:
  // `make_family` makes the port's wire protocol family (roce::RoceFamily::maker,
  // iwarp::IwarpFamily::maker).
  Device(DeviceConfig config, transport::Transport& transport, const FamilyMaker& make_family,
         const Clock& clock = steady_clock());
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Objects. Create calls return nullptr and set `err` (an errno) on failure.
  Pd* alloc_pd(int& err);
  int dealloc_pd(Pd* pd);
  Mr* reg_mr(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access, int& err);
  int dereg_mr(Mr* mr);
  // ibv_rereg_mr(3): waits for the engine, as dereg_mr does.
  int rereg_mr(Mr* mr, Pd* pd, void* addr, uint64_t length, int access) {
    auto engine = hold_engine();
    return mrs_.rereg(mr, pd, addr, length, access);
  }
  // ibv_alloc_mw(3) / ibv_dealloc_mw(3); dealloc waits for the engine, as dereg_mr.
  Mw* alloc_mw(Pd* pd, ibv_mw_type type, int& err);
  int dealloc_mw(Mw* mw) {
    auto engine = hold_engine();
    return mrs_.dealloc_mw(mw);
  }
  // ibv_alloc_dm(3): device memory is host memory the device owns; what is
  // allocated is bounded by limits().max_dm_size. False when it would exceed it.
  bool reserve_device_memory(uint64_t bytes);
  void release_device_memory(uint64_t bytes) { dm_bytes_.fetch_sub(bytes); }
  Cq* create_cq(int cqe, int& err) { return create_cq(cqe, CqOptions{}, err); }
  Cq* create_cq(int cqe, const CqOptions& options, int& err);
  int destroy_cq(Cq* cq);
  // ibv_create_ah(3) / ibv_destroy_ah(3): EINVAL without a GRH (RoCE needs one)
  // or for a source GID index the table lacks.
  Ah* create_ah(Pd* pd, const ibv_ah_attr& attr, int& err);
  int destroy_ah(Ah* ah);
  // Validates and rounds init.cap up to what the QP really has (ibv_create_qp(3)).
  Qp* create_qp(Pd* pd, QpInit& init, int& err);
  int destroy_qp(Qp* qp);
  // ibv_create_srq(3) / ibv_create_srq_ex: validates init.attr against the
  // device's limits and reports what the SRQ got in it.
  Srq* create_srq(Pd* pd, SrqInit& init, int& err);
  int destroy_srq(Srq* srq);
  // XRC SRQs by number (XRCETH, IBA Annex A14), for the responder of an XRC
  // receive QP. Engine owner.
  Srq* find_srq(uint32_t srqn);
  // Engine owner: completes what peers of the host placed in the XRC SRQs of
  // `xrcd` (device_host.cc).
  void drain_xrc_srqs(const Xrcd& xrcd, Nanos now);
  // ibv_open_xrcd(3): the domain of `inode` (0: a new anonymous one); opening an
  // inode that has none needs `create`, else ENOENT.
  Xrcd* open_xrcd(uint64_t inode, bool create, int& err);
  int close_xrcd(Xrcd* xrcd);
  // ibv_import_pd(3) / ibv_import_mr(3): an object by its handle (a PD's handle,
  // an MR's key), or null.
  Pd* find_pd(uint32_t handle);
  Mr* find_mr(uint32_t key) { return mrs_.find(key); }

  // ibv_attach_mcast(3) / ibv_detach_mcast(3), IBA 11.3.1-2 (multicast.md): a UD
  // QP joins group `group` (a multicast GID), and the device's transport the IP
  // group with the first QP. Attaching twice is no error and one copy still
  // arrives; EINVAL for a QP that is not UD, a GID that is not multicast, a
  // detach of a group the QP is not attached to, or a group full (max_mcast_qp_attach,
  // max_total_mcast_qp_attach, as rxe); ENOMEM beyond max_mcast_grp groups; the
  // transport's errno when it cannot join.
  int attach_mcast(Qp* qp, const Gid& group);
  int detach_mcast(Qp* qp, const Gid& group);

  // Who runs a turn. A poller (an application thread in ibv_poll_cq) reads the
  // sockets only every kQuietSocketCheck while nothing has come by the wire for
  // kQuietWire: its QPs' traffic is then on the same-host path, and a recvmmsg per
  // empty poll was most of a same-host ping-pong's time (docs/performance.md).
  enum class Turner { kLoop, kPoller };
  static constexpr Nanos kQuietWire = 500'000;
  static constexpr Nanos kQuietSocketCheck = 10'000;
  // One turn of the engine unless another thread is running it: doorbells, one
  // receive burst, due timers. True when anything happened.
  bool progress(Turner who = Turner::kLoop);
  // The same by a thread that holds engine_lock() already (the progress loop takes
  // it itself: one lock for one owner, docs/decisions/threading.md).
  bool progress_held(Turner who = Turner::kLoop);
  // A doorbell waits for the engine's owner (the progress loop asks after each
  // turn, with the engine released: ProgressHooks::work_left).
  bool doorbells_pending() const { return doorbells_.load(std::memory_order_seq_cst) != nullptr; }
  // The lock whose holder runs the engine (for the progress loop's try_lock only;
  // everyone else takes turns through progress(), ring_doorbell(), hold_engine()).
  std::mutex& engine_lock() { return engine_mutex_; }
  // Nothing came by the wire for kQuietWire: this process's traffic, if any, is on
  // the same-host path. Any thread.
  bool wire_quiet(Nanos now) const {
    return now - last_rx_packet_.load(std::memory_order_relaxed) >= kQuietWire;
  }
  // Work was posted to `qp` (or it must be flushed): run it now if the engine is
  // free, else leave a doorbell that the running owner serves before its turn ends.
  void ring_doorbell(Qp& qp);
  // Packets a QP with queued output may produce per turn (a send burst's worth).
  static constexpr uint32_t kTxBurstPerQp = 32;
  // Waits for the engine and serves the work posted so far (a turn without
  // receiving): what that work completes at once (UD and UC sends, flushes) is
  // visible on return, as an RNIC has processed the doorbells rung before a
  // command (cold paths: ibv_resize_cq checks the CQ's depth against it).
  void settle() {
    auto engine = hold_engine();
    turn(false);
  }
  // Waits for the engine and keeps it (cold paths: create, modify, destroy).
  std::unique_lock<std::mutex> hold_engine() { return std::unique_lock(engine_mutex_); }

  Nanos next_deadline() const { return next_deadline_.load(std::memory_order_acquire); }
  // Called when a timer is armed earlier than next_deadline() (wake the loop).
  void set_wakeup(std::function<void()> wake) { wakeup_ = std::move(wake); }
  // Told of every QP created, changing state, or destroyed (`gone`), on those cold
  // paths (the runtime's status segment, `softrdma status`). It may answer where
  // the QP's counters are to live (its row), or null.
  using QpObserver = std::function<QpCounters*(const Qp&, bool gone)>;
  void set_qp_observer(QpObserver observer) { qp_observer_ = std::move(observer); }
  // It also publishes the QP to same-host peers (samehost/node_segment.h).
  QpCounters* note_qp(const Qp& qp, bool gone = false);
  // The same-host path, or null (DeviceConfig::host).
  samehost::Host* host() const { return config_.host; }
  // The engine owner's same-host executor (host/executor.h), or null without
  // the same-host path.
  host::HostExecutor* host_executor() { return host_executor_.get(); }
  // Engine held: the QP (or SRQ) whose receive queue peers consume under `index`
  // (both null: none).
  void note_host_recv(uint32_t index, Qp* qp, Srq* srq = nullptr);
  // Engine owner: the QP of that number, or null.
  Qp* find_qp(uint32_t qpn);
  // The engine's owner queued output for `qp` that it produces in bursts
  // (Protocol::on_tx_ready), a burst per QP and turn.
  void want_tx(Qp& qp);
  // Engine owner: a completion for `cq`. Within a turn it becomes visible only
  // after the turn's packets left (see turn()); elsewhere at once. It is stamped
  // now, when generated, if the CQ keeps timestamps (CqOptions::timestamps).
  // `tm`: a tag-matching receive's tag and app_ctx (TM SRQs, engine/tag_list.h).
  void complete(Cq& cq, const ibv_wc& wc, bool solicited, TmInfo tm = {});
  // Engine owner (within a turn): `qp` has work the engine itself queued (a TM
  // SRQ's rendezvous READ or FIN); served before the turn's owner lets go, as a
  // doorbell rung while the engine was busy.
  void ring_doorbell_from_engine(Qp& qp);
  // The engine's owner armed a timer of `qp` for `when`.
  void arm_timer(Qp& qp, Nanos when);
  // The wire protocol family of the device's port (family.h).
  ProtocolFamily& family() { return *family_; }
  // softrdma_iwarp_attach (wire/iwarp/handoff.h): `qp` (RC, INIT, of a device
  // whose family takes connections) speaks on the connection a connection manager
  // made, and is in RTS. 0, or an errno; the descriptor is the device's either way.
  int attach_connection(Qp* qp, const wire::iwarp::IwarpHandoff& handoff);

  const DeviceConfig& config() const { return config_; }
  const DeviceLimits& limits() const { return config_.limits; }
  // The datagram transport the GIDs come from.
  transport::Transport& transport() { return transport_; }
  // Engine owner: the UD QPs attached to multicast group `group` in the order
  // attached, or null when none is (multicast.md).
  const std::vector<Qp*>* multicast_members(const Gid& group) const;
  const Clock& clock() const { return clock_; }
  const MrTable& mrs() const { return mrs_; }
  // The engine's owner binds and invalidates memory windows through it.
  MrTable& mrs() { return mrs_; }
  EngineCounters& counters() { return counters_; }
  // The GID table (docs/decisions/gid-table.md). A table is replaced whole when
  // the host's addresses change and is never freed before the device: a reader
  // on any thread may hold the reference it got while the next one is made.
  const std::vector<Gid>& gids() const { return *gids_.load(std::memory_order_acquire); }
  // An address came or went: the transport serves what is new and the table is
  // made again; when it changed, IBV_EVENT_GID_CHANGE is posted and true returned.
  // Takes the engine. Entries that stay keep their index (the table's shape is
  // fixed by the configured address; only index 0 of an IPv4 device changes).
  bool refresh_gids();
  uint16_t pkey() const { return 0xffff; }  // IBA 10.9.1.2: the default P_Key

  void post_async_event(const AsyncEvent& event);
  // Called (outside engine locks' order constraints: with no CQ lock held) after an
  // event was queued, so the verbs layer can make its async fd readable.
  void set_async_notify(std::function<void()> notify) { async_notify_ = std::move(notify); }
  bool next_async_event(AsyncEvent& out);

 private:
  bool turn(bool receive, Turner who = Turner::kLoop);
  // Whether this turn reads the sockets (see Turner).
  bool socket_check_due(Turner who, Nanos now, bool timers_due) const;
  bool serve_doorbells(Nanos now);
  bool serve_busy(Nanos now);
  // Engine held. ibv_destroy_qp(3) of a QP still attached to a group is EBUSY, as
  // the kernel answers it (uverbs_free_qp: the user detaches first).
  bool attached_anywhere(const Qp* qp) const;
  // Receive bursts a turn takes, at most, before it runs due timers (2048 packets).
  static constexpr int kBurstsBeforeTimers = 64;
  bool run_timers(Nanos now);
  // Faults same-host peers met while acting for this device's QPs (a remote access
  // error there ends the QP here too, as a NAK's sender's does).
  bool take_peer_faults(Nanos now);
  // Receives same-host peers placed, which their notices name.
  bool take_host_notices(Nanos now);
  void publish_staged();
  void push_completion(Cq& cq, const ibv_wc& wc, bool solicited, Nanos timestamp,
                       TmInfo tm = {});
  uint32_t fresh_qpn();  // 0: none left (a shared address's blocks all full)
  uint32_t fresh_qpn_in_blocks();
  int check_qp_init(Pd* pd, const QpInit& init) const;

  DeviceConfig config_;
  transport::Transport& transport_;
  const Clock& clock_;
  // Every table made, the current one last (engine held); gids_ points at it.
  std::vector<std::unique_ptr<const std::vector<Gid>>> gid_tables_;
  std::atomic<const std::vector<Gid>*> gids_{nullptr};
  EngineCounters own_counters_;  // unless config_.counters says where they live
  EngineCounters& counters_;
  MrTable mrs_;
  std::atomic<uint64_t> dm_bytes_{0};  // device memory allocated (ibv_alloc_dm)

  std::mutex objects_mutex_;  // PD and CQ lists: cold paths only
  std::vector<std::unique_ptr<Pd>> pds_;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::unordered_map<Ah*, std::unique_ptr<Ah>> ahs_;
  std::vector<std::unique_ptr<Xrcd>> xrcds_;
  uint32_t next_pd_handle_ = 1;
  uint32_t next_xrcd_handle_ = 1;

  // The engine. Everything below up to the events is owned by its holder.
  std::mutex engine_mutex_;
  // Before the QPs: destroyed after them, as QPs point at their SRQs.
  std::unordered_map<uint32_t, std::unique_ptr<Srq>> srqs_;
  uint32_t next_srqn_ = 1;
  std::unordered_map<uint32_t, std::unique_ptr<Qp>> qps_;
  std::unordered_set<const Qp*> live_qps_;  // the QPs of qps_, for destroy's check
  // Multicast groups and their attached UD QPs, in the order attached.
  std::map<Gid, std::vector<Qp*>> mcast_groups_;
  size_t mcast_attachments_ = 0;
  uint32_t next_qpn_;
  std::vector<uint32_t> qpn_blocks_;  // taken by take_qpn_block, in order
  std::unique_ptr<ProtocolFamily> family_;
  std::vector<Qp*> timed_;    // QPs that may have a timer armed
  std::vector<Qp*> busy_;     // QPs with output to produce (want_tx)
  struct StagedCompletion {
    Cq* cq;
    ibv_wc wc;
    bool solicited;
    Nanos timestamp;
    TmInfo tm;
  };
  bool staging_ = false;  // in a turn: completions wait in staged_ for its flush
  std::atomic<Nanos> last_rx_packet_{0};  // when a burst last brought a packet (owner writes)
  Nanos last_rx_check_ = 0;   // engine owner: when the sockets were last read
  std::vector<StagedCompletion> staged_;
  // Lock-free stack of QPs with a doorbell rung (Qp::doorbell_next_ links it):
  // pushed by posting threads, taken whole by the owner.
  std::atomic<Qp*> doorbells_{nullptr};

  std::atomic<Nanos> next_deadline_{kNever};
  std::function<void()> wakeup_;

  std::mutex events_mutex_;
  std::deque<AsyncEvent> events_;
  std::function<void()> async_notify_;
  QpObserver qp_observer_;
  std::unique_ptr<host::HostExecutor> host_executor_;  // with config_.host
  struct HostRecvOwner {
    Qp* qp = nullptr;
    Srq* srq = nullptr;
  };
  std::unordered_map<uint32_t, HostRecvOwner> host_recvs_;  // note_host_recv
};

}  // namespace softrdma::engine
