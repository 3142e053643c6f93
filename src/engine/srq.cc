#include "engine/srq.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/cq.h"
#include "engine/device.h"
#include "engine/pd.h"

namespace softrdma::engine {

Srq::Srq(Device& device, uint32_t srqn, Pd* pd, const SrqInit& init)
    : device_(device),
      srqn_(srqn),
      type_(init.type),
      pd_(pd),
      cq_(init.cq),
      xrcd_(init.xrcd),
      max_sge_(std::max<uint32_t>(init.attr.max_sge, 1)),
      ring_(init.attr.max_wr),
      sges_(size_t(ring_.slot_count()) * max_sge_) {
  if (type_ == IBV_SRQT_TM) {
    tags_ = std::make_unique<TagList>(init.tm.max_num_tags, device.limits().max_tm_sge);
    max_ops_ = init.tm.max_ops;
  }
  pd_->users.fetch_add(1);
  if (cq_ != nullptr) cq_->users.fetch_add(1);
  if (xrcd_ != nullptr) xrcd_->users.fetch_add(1);
  reserve_host_receives();
}

Srq::~Srq() {
  release_host_receives();
  pd_->users.fetch_sub(1);
  if (cq_ != nullptr) cq_->users.fetch_sub(1);
  if (xrcd_ != nullptr) xrcd_->users.fetch_sub(1);
}

// ibv_post_srq_recv(3): as ibv_post_recv, into the shared ring; ENOMEM when full.
int Srq::post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad) {
  std::lock_guard lock(mutex_);
  int err = 0;
  for (; wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > max_sge_) {
      err = EINVAL;
      break;
    }
    if (ring_.full()) {
      err = ENOMEM;
      break;
    }
    const uint32_t slot = ring_.slot(ring_.tail());
    Sge* sges = &sges_[size_t(slot) * max_sge_];
    copy_recv_wr(*wr, ring_.push_slot(), sges);
    // A same-host peer reads the slot's max_sge entries: the unused are empty,
    // and the segment's copy is written before `posted` moves past the slot.
    if (host_rq_.reserved()) {
      std::fill(sges + wr->num_sge, sges + max_sge_, Sge{});
      host_rq_.mirror(slot, sges, max_sge_);
    }
    ring_.publish();
  }
  if (host_rq_.reserved()) host_rq_.publish_posted(ring_.tail());
  if (err != 0 && bad != nullptr) *bad = wr;
  return err;
}

int Srq::modify(const ibv_srq_attr& attr, int mask) {
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EINVAL;  // no IBV_DEVICE_SRQ_RESIZE
  if (mask & IBV_SRQ_LIMIT) {
    // IBA 11.2.3.3 (Modify SRQ): the limit may not exceed the queue's size.
    if (attr.srq_limit > ring_.capacity()) return EINVAL;
    std::lock_guard lock(mutex_);
    limit_.store(attr.srq_limit, std::memory_order_release);
  }
  return 0;
}

ibv_srq_attr Srq::query() const {
  std::lock_guard lock(mutex_);
  ibv_srq_attr attr{};
  attr.max_wr = ring_.capacity();
  attr.max_sge = max_sge_;
  attr.srq_limit = limit_.load(std::memory_order_acquire);
  return attr;
}

bool Srq::take(HeldRecv& into) {
  if (host_rq_.reserved()) return take_claimed(into);
  if (ring_.empty()) return false;
  const RecvWqe& wqe = ring_.front();
  into.wqe = wqe;
  into.sges.assign(wqe.sgl.sges, wqe.sgl.sges + wqe.sgl.count);
  into.wqe.sgl = SgeList{into.sges.data(), wqe.sgl.count};
  into.held = true;
  ring_.pop();
  fire_limit_if_low(ring_.size());
  return true;
}

// IBA 10.2.9.2 (SRQ Limit): once fewer WQEs than the armed limit remain (`left`),
// the event fires once and the limit disarms until modify arms it again.
void Srq::fire_limit_if_low(uint32_t left) {
  const uint32_t limit = limit_.load(std::memory_order_acquire);
  if (limit != 0 && left < limit) {
    uint32_t expected = limit;
    if (limit_.compare_exchange_strong(expected, 0, std::memory_order_acq_rel))
      device_.post_async_event(AsyncEvent{IBV_EVENT_SRQ_LIMIT_REACHED, 0, nullptr, this});
  }
}

// ---- The device's SRQs and XRC domains (cold paths) ----

Srq* Device::create_srq(Pd* pd, SrqInit& init, int& err) {
  const DeviceLimits& lim = config_.limits;
  ibv_srq_attr& attr = init.attr;
  const bool xrc = init.type == IBV_SRQT_XRC;
  const bool tm = init.type == IBV_SRQT_TM;
  err = 0;
  if (init.type != IBV_SRQT_BASIC && !xrc && !tm) err = EINVAL;
  // A family may lack XRC or tag matching (iWARP: docs/decisions/iwarp.md).
  if ((xrc && !family_->traits().xrc) || (tm && !family_->traits().tag_matching)) err = EOPNOTSUPP;
  if (pd == nullptr || (xrc && (init.cq == nullptr || init.xrcd == nullptr))) err = EINVAL;
  // tag_matching.md: a TM-SRQ has a CQ of its own, a list of at least one tag and
  // room for one operation at a time, within tm_caps.
  if (tm && (init.cq == nullptr || init.tm.max_num_tags == 0 || init.tm.max_ops == 0 ||
             init.tm.max_num_tags > lim.max_tm_tags || init.tm.max_ops > lim.max_tm_ops))
    err = EINVAL;
  // ibv_create_srq(3): max_wr and max_sge must fit the device; srq_limit is
  // ignored at creation (IBA 11.2.3.1: the limit starts disarmed).
  if (attr.max_wr == 0 || attr.max_wr > lim.max_srq_wr || attr.max_sge > lim.max_srq_sge)
    err = EINVAL;
  if (err != 0) return nullptr;
  attr.max_sge = std::max<uint32_t>(attr.max_sge, 1);
  attr.srq_limit = 0;
  auto engine = hold_engine();
  if (srqs_.size() >= lim.max_srq) {
    err = ENOMEM;
    return nullptr;
  }
  uint32_t srqn;
  do srqn = next_srqn_++ & 0xffffff;
  while (srqn == 0 || srqs_.contains(srqn));
  auto srq = std::make_unique<Srq>(*this, srqn, pd, init);
  Srq* raw = srq.get();
  srqs_.emplace(srqn, std::move(srq));
  return raw;
}

int Device::destroy_srq(Srq* srq) {
  auto engine = hold_engine();
  // Found by address, never by reading it: a stale handle is EINVAL, not a read
  // of freed memory (cold path; an SRQ is shared by many QPs, there are few).
  auto it = std::find_if(srqs_.begin(), srqs_.end(),
                         [&](const auto& entry) { return entry.second.get() == srq; });
  if (it == srqs_.end()) return EINVAL;
  if (srq->users.load() != 0) return EBUSY;
  // An XRC receive QP may hold one of its WQEs in a message still arriving: that
  // message can no longer complete anywhere.
  if (srq->type() == IBV_SRQT_XRC)
    for (auto& [qpn, qp] : qps_) qp->forget_recv_from(*srq);
  srqs_.erase(it);
  return 0;
}

Srq* Device::find_srq(uint32_t srqn) {
  auto it = srqs_.find(srqn);
  return it == srqs_.end() ? nullptr : it->second.get();
}

Xrcd* Device::open_xrcd(uint64_t inode, bool create, int& err) {
  std::lock_guard lock(objects_mutex_);
  if (inode != 0) {
    for (auto& x : xrcds_) {
      if (x->inode == inode) {
        ++x->opens;
        return x.get();
      }
    }
    if (!create) {
      err = ENOENT;  // ibv_open_xrcd(3): no domain for this file, and no O_CREAT
      return nullptr;
    }
  }
  if (xrcds_.size() >= config_.limits.max_xrcd) {
    err = ENOMEM;
    return nullptr;
  }
  xrcds_.push_back(std::make_unique<Xrcd>());
  xrcds_.back()->inode = inode;
  xrcds_.back()->handle = next_xrcd_handle_++;
  xrcds_.back()->opens = 1;
  return xrcds_.back().get();
}

int Device::close_xrcd(Xrcd* xrcd) {
  std::lock_guard lock(objects_mutex_);
  auto it = std::find_if(xrcds_.begin(), xrcds_.end(), [&](auto& x) { return x.get() == xrcd; });
  if (it == xrcds_.end()) return EINVAL;
  // The last close of a domain still holding SRQs or QPs is EBUSY (ibv_close_xrcd(3)).
  if (xrcd->opens == 1 && xrcd->users.load() != 0) return EBUSY;
  if (--xrcd->opens == 0) xrcds_.erase(it);
  return 0;
}

}  // namespace softrdma::engine
