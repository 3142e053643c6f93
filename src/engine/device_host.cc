// The device's side of the same-host path (docs/decisions/same-host.md): what it
// publishes of its QPs to the processes of its host and the faults they report
// back (its executor is host/executor.h).
#include "engine/device.h"
#include "engine/qp.h"
#include "engine/srq.h"
#include "samehost/host.h"

namespace softrdma::engine {

QpCounters* Device::note_qp(const Qp& qp, bool gone) {
  if (config_.host != nullptr) {
    samehost::NodeSegment& node = config_.host->node();
    if (gone) {
      node.remove_qp(qp.qpn());
    } else {
      const ibv_qp_attr& a = qp.attr();
      node.publish_qp(qp.qpn(), samehost::QpGrant{uint32_t(a.qp_state), uint32_t(qp.type()),
                                                  qp.pd() != nullptr ? qp.pd()->handle() : 0,
                                                  uint32_t(a.qp_access_flags),
                                                  a.dest_qp_num & 0xffffff,
                                                  qp.host_recv_queue(), a.min_rnr_timer,
                                                  a.qkey,
                                                  qp.xrcd() != nullptr ? qp.xrcd()->handle : 0});
    }
  }
  return qp_observer_ ? qp_observer_(qp, gone) : nullptr;
}

void Device::note_host_recv(uint32_t index, Qp* qp, Srq* srq) {
  if (qp != nullptr || srq != nullptr) {
    host_recvs_[index] = HostRecvOwner{qp, srq};
  } else {
    host_recvs_.erase(index);
  }
}

Qp* Device::find_qp(uint32_t qpn) {
  auto it = qps_.find(qpn);
  return it != qps_.end() ? it->second.get() : nullptr;
}

bool Device::take_host_notices(Nanos now) {
  if (config_.host == nullptr || !config_.host->node().notices_pending()) return false;
  uint32_t index = 0;
  while (config_.host->node().take_notice(index)) {
    auto it = host_recvs_.find(index);
    if (it == host_recvs_.end()) continue;
    if (it->second.qp != nullptr) it->second.qp->drain_host_receives(now);
    if (it->second.srq != nullptr) it->second.srq->drain_host_receives(now);
  }
  return true;
}

void Device::drain_xrc_srqs(const Xrcd& xrcd, Nanos now) {
  if (config_.host == nullptr) return;
  for (auto& [srqn, srq] : srqs_)
    if (srq->xrcd() == &xrcd && srq->host_recv_queue() != 0) srq->drain_host_receives(now);
}

bool Device::take_peer_faults(Nanos now) {
  if (config_.host == nullptr || !config_.host->faults_pending()) return false;
  config_.host->take_faults([&](uint32_t qpn, uint32_t event) {
    auto it = qps_.find(qpn);
    if (it == qps_.end()) return;
    Qp& qp = *it->second;
    const ibv_qp_state state = qp.state();
    if (state == IBV_QPS_ERR || state == IBV_QPS_RESET) return;
    bump(counters_.peer_faults_taken);
    post_async_event(AsyncEvent{ibv_event_type(event), qpn, nullptr});
    qp.enter_error(now);
  });
  return true;
}

}  // namespace softrdma::engine
