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
