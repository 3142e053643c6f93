// The device's QPs (cold paths: create, check, number, destroy). Part of Device,
// split from device.cc by concern.
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
#include "wire/qpn_blocks.h"

namespace softrdma::engine {

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
  if (qpn == 0) {
    err = ENOMEM;  // ibv_create_qp(3): no resources (every QPN of a shared address)
    return nullptr;
  }
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
  if (config_.take_qpn_block) return fresh_qpn_in_blocks();
  for (;;) {
    uint32_t qpn = next_qpn_++ & 0xffffff;
    if (qpn > 1 && !qps_.contains(qpn)) return qpn;
  }
}

// A shared address (docs/decisions/host-rnic.md): a free number of the blocks this
// process holds, the next one in turn (as rxe, numbers are not reused at once);
// another block from the registry when they are all in use.
uint32_t Device::fresh_qpn_in_blocks() {
  const uint64_t held = uint64_t(qpn_blocks_.size()) * wire::kQpnsPerBlock;
  for (uint64_t tried = 0; tried < held; ++tried) {
    const uint32_t n = next_qpn_++ % uint32_t(held);
    const uint32_t qpn = wire::first_qpn_of_block(qpn_blocks_[n / wire::kQpnsPerBlock]) +
                         n % wire::kQpnsPerBlock;
    if (qpn > 1 && !qps_.contains(qpn)) return qpn;
  }
  const uint32_t block = config_.take_qpn_block();
  if (block == 0 || block > wire::kMaxQpnBlock) return 0;
  qpn_blocks_.push_back(block);
  next_qpn_ = uint32_t(held) + 1;  // the new block's first after this one
  return wire::first_qpn_of_block(block);
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

}  // namespace softrdma::engine
