#include "engine/device.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "engine/guarded_memory.h"
#include "engine/host/executor.h"
#include "samehost/host.h"
#include "wire/ip_udp.h"

namespace softrdma::engine {

namespace {

// The GID table (DESIGN.md §6, docs/decisions/gid-table.md): only addresses the
// transport serves, so any RoCEv2 peer reaches every entry. For an IPv4 address,
// index 1 is always its IPv4-mapped form (Linux Soft-RoCE's order: users type -g 1);
// index 0 is the interface's own IPv6 link-local address when the transport serves
// one (as Soft-RoCE lists it), else the IPv4-mapped GID again, so that programs that
// take the first entry (rdma-core's tests) work too. An IPv6 address is the one GID.
std::vector<Gid> make_gid_table(const std::vector<Gid>& served) {
  const Gid& primary = served.front();
  if (!wire::gid_is_ipv4(primary)) return {primary};
  for (const Gid& gid : served)
    if (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80) return {gid, primary};
  return {primary, primary};
}

uint32_t initial_qpn() {
  // QPNs start above QP0/QP1 (IBA 3.5.6); a random base keeps two processes that
  // share an address from handing out the same numbers by accident.
  uint16_t r = 0;
  if (getrandom(&r, sizeof r, 0) != sizeof r) r = 0;
  return 0x11 + (uint32_t(r) << 4);
}

}  // namespace

Device::Device(DeviceConfig config, transport::Transport& transport,
               const FamilyMaker& make_family, const Clock& clock)
    : config_(std::move(config)),
      transport_(transport),
      clock_(clock),
      counters_(config_.counters != nullptr ? *config_.counters : own_counters_),
      next_qpn_(initial_qpn()) {
  family_ = make_family(*this);
  gid_tables_.push_back(std::make_unique<const std::vector<Gid>>(make_gid_table(transport.local_gids())));
  gids_.store(gid_tables_.back().get(), std::memory_order_release);
  // Before any peer can reach registered memory (docs/decisions/memory-faults.md).
  install_memory_fault_handler();
  if (config_.host != nullptr) mrs_.set_node(&config_.host->node(), config_.shared_pages_max_bytes);
  if (config_.host != nullptr) host_executor_ = std::make_unique<host::HostExecutor>();
}

int Device::attach_connection(Qp* qp, const wire::iwarp::IwarpHandoff& handoff) {
  auto engine = hold_engine();
  if (!live_qps_.contains(qp)) {
    ::close(handoff.fd);
    return EINVAL;
  }
  const Nanos now = clock_.now();
  if (int err = family_->adopt_connection(*qp, handoff, now); err != 0) return err;
  qp->enter_rts_connected(handoff.ird, handoff.ord, now);
  return 0;
}

// The QPs go first: they hand back what they hold of the other objects (CQ and PD
// users, their same-host receive queues).
Device::~Device() { qps_.clear(); }

Pd* Device::alloc_pd(int& err) {
  std::lock_guard lock(objects_mutex_);
  if (pds_.size() >= config_.limits.max_pd) {
    err = ENOMEM;
    return nullptr;
  }
  pds_.push_back(std::make_unique<Pd>(*this, next_pd_handle_++));
  return pds_.back().get();
}

Pd* Device::find_pd(uint32_t handle) {
  std::lock_guard lock(objects_mutex_);
  auto it = std::find_if(pds_.begin(), pds_.end(), [&](auto& p) { return p->handle() == handle; });
  return it == pds_.end() ? nullptr : it->get();
}

// Destroy calls look the object up before touching it: a stale or repeated handle
// is EINVAL, never a read of freed memory.
int Device::dealloc_pd(Pd* pd) {
  std::lock_guard lock(objects_mutex_);
  auto it = std::find_if(pds_.begin(), pds_.end(), [&](auto& p) { return p.get() == pd; });
  if (it == pds_.end()) return EINVAL;
  if (pd->users.load() != 0) return EBUSY;
  pds_.erase(it);
  return 0;
}

Mr* Device::reg_mr(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access, int& err) {
  if (length > config_.limits.max_mr_size && !is_implicit(addr, length, access)) {
    err = EINVAL;
    return nullptr;
  }
  if (mrs_.size() >= config_.limits.max_mr) {
    err = ENOMEM;
    return nullptr;
  }
  return mrs_.reg(pd, addr, length, iova, access, err);
}

// Waits for the engine: no turn is using the MR (or a translation cached from it)
// while it goes, and the next turn sees the new generation (MrTable::generation).
int Device::dereg_mr(Mr* mr) {
  auto engine = hold_engine();
  return mrs_.dereg(mr);
}

Mw* Device::alloc_mw(Pd* pd, ibv_mw_type type, int& err) {
  if (mrs_.window_count() >= config_.limits.max_mw) {
    err = ENOMEM;
    return nullptr;
  }
  return mrs_.alloc_mw(pd, type, err);
}

bool Device::reserve_device_memory(uint64_t bytes) {
  uint64_t used = dm_bytes_.load();
  do {
    if (bytes > config_.limits.max_dm_size - used) return false;
  } while (!dm_bytes_.compare_exchange_weak(used, used + bytes));
  return true;
}

Cq* Device::create_cq(int cqe, const CqOptions& options, int& err) {
  if (cqe < 1 || uint32_t(cqe) > config_.limits.max_cqe) {
    err = EINVAL;
    return nullptr;
  }
  std::lock_guard lock(objects_mutex_);
  if (cqs_.size() >= config_.limits.max_cq) {
    err = ENOMEM;
    return nullptr;
  }
  cqs_.push_back(std::make_unique<Cq>(uint32_t(cqe), options));
  return cqs_.back().get();
}

int Device::destroy_cq(Cq* cq) {
  std::lock_guard lock(objects_mutex_);
  auto it = std::find_if(cqs_.begin(), cqs_.end(), [&](auto& c) { return c.get() == cq; });
  if (it == cqs_.end()) return EINVAL;
  if (cq->users.load() != 0) return EBUSY;
  cqs_.erase(it);
  return 0;
}

Ah* Device::create_ah(Pd* pd, const ibv_ah_attr& attr, int& err) {
  // IBA A17.4.5.1: RoCE addresses by GRH; the port is the one port.
  if (pd == nullptr || !attr.is_global || attr.grh.sgid_index >= gids().size() ||
      attr.port_num > 1) {
    err = EINVAL;
    return nullptr;
  }
  auto ah = std::make_unique<Ah>();
  ah->pd = pd;
  std::copy(std::begin(attr.grh.dgid.raw), std::end(attr.grh.dgid.raw), ah->dgid.begin());
  ah->sgid_index = attr.grh.sgid_index;
  pd->users.fetch_add(1);
  Ah* raw = ah.get();
  std::lock_guard lock(objects_mutex_);
  if (ahs_.size() >= config_.limits.max_ah) {
    pd->users.fetch_sub(1);
    err = ENOMEM;
    return nullptr;
  }
  ahs_.emplace(raw, std::move(ah));
  return raw;
}

// A send WR copied the AH's address when it was posted: the AH may go at once.
int Device::destroy_ah(Ah* ah) {
  std::lock_guard lock(objects_mutex_);
  auto it = ahs_.find(ah);  // a UD server may hold one per client
  if (it == ahs_.end()) return EINVAL;
  ah->pd->users.fetch_sub(1);
  ahs_.erase(it);
  return 0;
}

// ibv_create_qp(3): the capabilities asked for must fit the device; the QP gets
// at least as much as asked, and init.cap reports what it got.
Qp* Device::create_qp(Pd* pd, QpInit& init, int& err) {
  const DeviceLimits& lim = config_.limits;
  ibv_qp_cap& cap = init.cap;
  err = check_qp_init(pd, init);
  if (cap.max_send_wr > lim.max_qp_wr || cap.max_recv_wr > lim.max_qp_wr ||
      cap.max_send_sge > lim.max_sge || cap.max_recv_sge > lim.max_sge ||
      cap.max_inline_data > lim.max_inline_data)
    err = EINVAL;
  if (err != 0) return nullptr;
  if (init.type == IBV_QPT_XRC_RECV) {
    cap = ibv_qp_cap{};  // IBA A14: no work queues; requests feed the XRC SRQs
  } else {
    cap.max_send_wr = std::max<uint32_t>(cap.max_send_wr, 1);
    cap.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  }
  if (init.srq != nullptr || init.type == IBV_QPT_XRC_SEND || init.type == IBV_QPT_XRC_RECV) {
    cap.max_recv_wr = cap.max_recv_sge = 0;  // ibv_create_qp(3): the SRQ's are used
  } else {
    cap.max_recv_wr = std::max<uint32_t>(cap.max_recv_wr, 1);
    cap.max_recv_sge = std::max<uint32_t>(cap.max_recv_sge, 1);
  }
  auto engine = hold_engine();
  if (qps_.size() >= lim.max_qp) {
    err = ENOMEM;
    return nullptr;
  }
  if (init.gsi && (init.type != IBV_QPT_UD || qps_.contains(kGsiQpn))) {
    err = init.type != IBV_QPT_UD ? EINVAL : EBUSY;
    return nullptr;
  }
  const uint32_t qpn = init.gsi ? kGsiQpn : fresh_qpn();
  auto qp = std::make_unique<Qp>(*this, qpn, pd, init);
  Qp* raw = qp.get();
  qps_.emplace(qpn, std::move(qp));
  live_qps_.insert(raw);
  if (QpCounters* counters = note_qp(*raw)) raw->count_into(*counters);
  return raw;
}

// ibv_create_qp(3), ibv_create_qp_ex(3): which objects each QP type needs.
int Device::check_qp_init(Pd* pd, const QpInit& init) const {
  // The port's wire carries only some types (iWARP: RC), whatever verbs allow.
  if (!family_->carries(init.type)) return EOPNOTSUPP;
  switch (init.type) {
    case IBV_QPT_RC:
    case IBV_QPT_UC:
    case IBV_QPT_UD:
      if (pd == nullptr || init.send_cq == nullptr || init.recv_cq == nullptr) return EINVAL;
      // A TM SRQ matches RC SENDs (tm_caps.flags: IBV_TM_CAP_RC only).
      if (init.srq != nullptr && init.srq->type() != IBV_SRQT_BASIC &&
          !(init.srq->type() == IBV_SRQT_TM && init.type == IBV_QPT_RC))
        return EINVAL;
      return init.xrcd != nullptr ? EINVAL : 0;
    case IBV_QPT_XRC_SEND:  // a requester only (IBA A14)
      return pd == nullptr || init.send_cq == nullptr || init.srq != nullptr ? EINVAL : 0;
    case IBV_QPT_XRC_RECV:  // a responder only, in its XRC domain
      return init.xrcd == nullptr || init.srq != nullptr ? EINVAL : 0;
    default:
      return EOPNOTSUPP;
  }
}

uint32_t Device::fresh_qpn() {
  for (;;) {
    uint32_t qpn = next_qpn_++ & 0xffffff;
    if (qpn > 1 && !qps_.contains(qpn)) return qpn;
  }
}

int Device::destroy_qp(Qp* qp) {
  auto engine = hold_engine();
  // Known before touched: a stale or repeated handle is EINVAL, not a read of freed
  // memory (and a lookup, not a walk of 65 536 QPs).
  if (!live_qps_.contains(qp)) return EINVAL;
  auto it = qps_.find(qp->qpn());
  if (it == qps_.end() || it->second.get() != qp) return EINVAL;
  if (attached_anywhere(qp)) return EBUSY;
  live_qps_.erase(qp);
  // A doorbell of this QP may still be queued (rung by a post that raced with
  // destroy, which verbs forbids but must not crash): serve them all first.
  serve_doorbells(clock_.now());
  family_->flush();
  family_->forget(*qp);
  std::erase(timed_, qp);
  std::erase(busy_, qp);
  note_qp(*qp, /*gone=*/true);
  qps_.erase(it);
  return 0;
}

// Engine owner. The QP joins the timer list; the loop is woken if the timer is due
// before anything it waits for.
void Device::arm_timer(Qp& qp, Nanos when) {
  if (!qp.device_links().timed) {
    qp.device_links().timed = true;
    timed_.push_back(&qp);
  }
  Nanos cur = next_deadline_.load(std::memory_order_acquire);
  while (when < cur) {
    if (next_deadline_.compare_exchange_weak(cur, when, std::memory_order_acq_rel)) {
      if (wakeup_) wakeup_();
      return;
    }
  }
}

bool Device::progress_held(Turner who) {
  bool worked = false;
  // As progress(): a doorbell rung during the turn is served before leaving.
  do {
    worked |= turn(true, who);
  } while (doorbells_.load(std::memory_order_seq_cst) != nullptr);
  return worked;
}

bool Device::progress(Turner who) {
  bool worked = false;
  // A doorbell rung while this thread held the engine found it busy: serve it
  // before leaving, or it would wait for the next turn of whoever comes next.
  do {
    std::unique_lock engine(engine_mutex_, std::try_to_lock);
    if (!engine.owns_lock()) return worked;
    worked |= turn(true, who);
  } while (doorbells_.load(std::memory_order_seq_cst) != nullptr);
  return worked;
}

void Device::ring_doorbell_from_engine(Qp& qp) {
  // IBA-free plumbing: a lock-free stack push, done at most once until served.
  if (!qp.device_links().doorbell_rung.exchange(true, std::memory_order_acq_rel)) {
    Qp* head = doorbells_.load(std::memory_order_relaxed);
    do {
      qp.device_links().doorbell_next = head;
    } while (!doorbells_.compare_exchange_weak(head, &qp, std::memory_order_release,
                                               std::memory_order_relaxed));
  }
}

void Device::ring_doorbell(Qp& qp) {
  ring_doorbell_from_engine(qp);
  do {
    std::unique_lock engine(engine_mutex_, std::try_to_lock);
    if (!engine.owns_lock()) return;  // the owner serves it before it lets go
    turn(false);
  } while (doorbells_.load(std::memory_order_seq_cst) != nullptr);
}

// Engine owner: the QPs whose doorbell rang, oldest first.
bool Device::serve_doorbells(Nanos now) {
  Qp* stack = doorbells_.exchange(nullptr, std::memory_order_acquire);
  if (stack == nullptr) return false;
  Qp* fifo = nullptr;
  while (stack != nullptr) {
    Qp* next = stack->device_links().doorbell_next;
    stack->device_links().doorbell_next = fifo;
    fifo = stack;
    stack = next;
  }
  for (Qp* qp = fifo; qp != nullptr;) {
    Qp* next = qp->device_links().doorbell_next;
    // Cleared before serving, as an exchange: it synchronises with the poster's
    // exchange, so whatever it published before ringing is seen now, and a post
    // after this point rings again.
    qp->device_links().doorbell_rung.exchange(false, std::memory_order_acq_rel);
    qp->serve_doorbell(now);
    qp = next;
  }
  return true;
}

// The loop reads every turn (it runs when a socket is readable, or spins briefly
// after work); so does a poller while the wire carries traffic, and before timers
// (issue 14 defect 3: the ACK that answers a deadline may be waiting).
bool Device::socket_check_due(Turner who, Nanos now, bool timers_due) const {
  if (who == Turner::kLoop || timers_due) return true;
  return !wire_quiet(now) || now - last_rx_check_ >= kQuietSocketCheck;
}

// One turn of the engine's owner. `receive`: also take a receive burst (pollers
// and the loop do; a posting thread only sends what it posted).
bool Device::turn(bool receive, Turner who) {
  const Nanos now = clock_.now();
  staging_ = true;
  bool worked = serve_doorbells(now);
  worked |= take_peer_faults(now);
  worked |= take_host_notices(now);
  // A timer is due: take first what has already arrived. A process that was
  // descheduled past a deadline finds the ACK that answers it waiting in its own
  // socket, possibly behind a burst of other packets; firing the timer before
  // reading it retransmits what the peer has (issue 14 defect 3).
  const bool timers_due = now >= next_deadline_.load(std::memory_order_acquire);
  const int bursts = timers_due ? kBurstsBeforeTimers : 1;
  if (receive && socket_check_due(who, now, timers_due)) {
    last_rx_check_ = now;
    const bool got = family_->receive(now, bursts);
    if (got) last_rx_packet_.store(now, std::memory_order_relaxed);
    worked |= got;
  }
  if (timers_due) worked |= run_timers(now);
  if (receive) worked |= serve_busy(now);
  family_->flush();
  publish_staged();
  return worked;
}

// A completion is visible only once the packets its turn produced have left: the
// ACK of a received SEND or WRITE with immediate goes before the application can
// see the message (as an RNIC acknowledges on reception, whatever the process does),
// so a receiver that exits right after its last poll has already acknowledged.
// The timestamp is the time of generation, not of visibility: a software device's
// "completion timestamp" is when its engine wrote the completion, as an RNIC's is
// when it wrote the CQE (ibv_create_cq_ex(3) IBV_WC_EX_WITH_COMPLETION_TIMESTAMP).
void Device::complete(Cq& cq, const ibv_wc& wc, bool solicited, TmInfo tm) {
  const Nanos timestamp = cq.options().timestamps ? clock_.now() : 0;
  if (staging_) {
    staged_.push_back({&cq, wc, solicited, timestamp, tm});
    return;
  }
  push_completion(cq, wc, solicited, timestamp, tm);
}

void Device::publish_staged() {
  staging_ = false;
  for (const StagedCompletion& c : staged_)
    push_completion(*c.cq, c.wc, c.solicited, c.timestamp, c.tm);
  staged_.clear();
}

// IBA 11.4.2.1: a completion that does not fit is lost and the CQ is in error;
// the first overrun raises IBV_EVENT_CQ_ERR. A CQ that ignores overruns loses its
// oldest completion instead, silently but counted.
void Device::push_completion(Cq& cq, const ibv_wc& wc, bool solicited, Nanos timestamp,
                             TmInfo tm) {
  const bool was_in_error = cq.in_error();
  switch (cq.push(wc, solicited, timestamp, tm)) {
    case Cq::kQueued: return;
    case Cq::kDisplacedOldest: bump(counters_.cq_overruns); return;
    case Cq::kLost:
      bump(counters_.cq_overruns);
      if (!was_in_error) post_async_event(AsyncEvent{IBV_EVENT_CQ_ERR, 0, &cq});
      return;
  }
}

void Device::want_tx(Qp& qp) {
  if (qp.device_links().busy) return;
  qp.device_links().busy = true;
  busy_.push_back(&qp);
}

// One burst for each QP with output queued, so that no QP's large response (a READ
// of megabytes) holds the engine while others wait (round robin over turns).
bool Device::serve_busy(Nanos now) {
  if (busy_.empty()) return false;
  for (size_t i = 0; i < busy_.size();) {
    Qp* qp = busy_[i];
    if (qp->protocol().on_tx_ready(now, kTxBurstPerQp)) {
      ++i;
      continue;
    }
    qp->device_links().busy = false;
    busy_[i] = busy_.back();
    busy_.pop_back();
  }
  return true;
}

// Engine owner: runs the due timers of the QPs that have any and recomputes the
// earliest deadline; QPs with no timer left leave the list (cost: QPs with timers,
// not all QPs).
bool Device::run_timers(Nanos now) {
  next_deadline_.store(kNever, std::memory_order_release);
  Nanos earliest = kNever;
  for (size_t i = 0; i < timed_.size();) {
    Qp* qp = timed_[i];
    if (qp->protocol().deadline() <= now) qp->protocol().on_timer(now);
    const Nanos due = qp->protocol().deadline();
    if (due == kNever) {
      qp->device_links().timed = false;
      timed_[i] = timed_.back();
      timed_.pop_back();
      continue;
    }
    earliest = std::min(earliest, due);
    ++i;
  }
  Nanos cur = next_deadline_.load(std::memory_order_acquire);
  while (earliest < cur &&
         !next_deadline_.compare_exchange_weak(cur, earliest, std::memory_order_acq_rel)) {
  }
  return true;
}

bool Device::refresh_gids() {
  {
    auto engine = hold_engine();
    if (!transport_.refresh_addresses()) return false;
    std::vector<Gid> table = make_gid_table(transport_.local_gids());
    if (table == gids()) return false;
    gid_tables_.push_back(std::make_unique<const std::vector<Gid>>(std::move(table)));
    gids_.store(gid_tables_.back().get(), std::memory_order_release);
  }
  // As a kernel device's table (ib_cache_update): a port event, for every context.
  post_async_event(AsyncEvent{IBV_EVENT_GID_CHANGE});
  return true;
}

void Device::post_async_event(const AsyncEvent& event) {
  {
    std::lock_guard lock(events_mutex_);
    events_.push_back(event);
  }
  if (async_notify_) async_notify_();
}

bool Device::next_async_event(AsyncEvent& out) {
  std::lock_guard lock(events_mutex_);
  if (events_.empty()) return false;
  out = events_.front();
  events_.pop_front();
  return true;
}

}  // namespace softrdma::engine
