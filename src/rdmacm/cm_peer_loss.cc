// A peer that dies (docs/decisions/rdma-cm.md, "A peer that dies"). With the
// kernel's rdma_cm a killed process's ids are closed by the kernel, which sends
// their DREQs, so the survivor gets DISCONNECTED at once. A softrdma process has no
// kernel to do that for it: when it dies its peers learn it from their QPs — an
// RC QP whose requests go unanswered through the retry budget enters Error (IBA
// 9.7.6.1.3; an idle QP probes its peer, docs/decisions/rc-engine.md). The agent
// hears of every RC QP of its context that entered Error (softrdma_qp_error_fd,
// without taking the application's async events) and ends the rdma_cm connection
// of an established one as a DREQ would have: DISCONNECTED once, the id closed,
// and a DREQ to the peer, so that a peer still alive (the path failed, not the
// process) ends too instead of waiting for its own QP to fail.
#include <sys/epoll.h>

#include <cerrno>

#include "rdmacm/agent.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_format.h"
#include "rdmacm/rsocket.h"
#include "rdmacm/verbs_private.h"

namespace softrdma::rdmacm {

// Under mutex_, once the context is open.
void Agent::watch_qp_errors() {
  const int fd = softrdma_qp_error_fd(context_);
  if (fd < 0) return;  // not softrdma's libibverbs: connections end only by DREQ
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) == 0)
    qp_error_fd_.store(fd, std::memory_order_relaxed);
}

void Agent::on_qp_errors() {
  ibv_context* device;
  {
    std::lock_guard lock(mutex_);
    device = context_;
  }
  uint32_t qpn = 0;
  std::lock_guard cm_lock(cm_mutex_);
  while (softrdma_take_qp_error(device, &qpn) == 0) {
    if (iwarp_->qp_failed(qpn)) continue;  // an iWARP connection's stream ended
    for (auto& [comm_id, id] : connections_) {
      // Only a connection the application still thinks up: one it (or the peer's
      // DREQ) closed has its QP moved to Error by us, and that says nothing new.
      if (id->ibv.qp == nullptr || id->ibv.qp->qp_num != qpn) continue;
      if (id->conn.state == CmState::kEstablished) connection_lost(*id);
      break;
    }
  }
}

// IBA 12.9.6: the DREQ a peer process would have sent, had it lived to send it.
// The event comes at once (the kernel's cma reports a dead peer within
// milliseconds); the DREQ is resent as any DREQ until answered or out of retries,
// with no further event either way.
void Agent::connection_lost(CmId& id) {
  Connection& c = id.conn;
  c.state = CmState::kClosed;
  c.lost = true;
  Mad dreq = format_dreq(id);
  send(id, dreq, /*expect_answer=*/true);
  deliver(id, RDMA_CM_EVENT_DISCONNECTED, 0);
}

namespace rsock {

// IB: the CM's state says it (a DREQ came first, or the agent ended the
// connection as lost). iWARP has no DREQ: the peer's orderly close is its
// stream's FIN, a lost peer's a reset or a socket error, and only the engine saw
// which (softrdma_qp_closed_by_peer, set before the QP's flush). Asking the
// engine, not the agent's iWARP state, also holds when the flush is seen before
// the agent's thread has heard of the QP's error.
bool connection_lost(rdma_cm_id* id) {
  if (is_iwarp(*to_id(id))) return id->qp == nullptr || softrdma_qp_closed_by_peer(id->qp) != 1;
  std::lock_guard lock(Agent::get().cm_mutex());
  const Connection& c = to_id(id)->conn;
  return c.lost || c.state == CmState::kEstablished;
}

}  // namespace rsock
}  // namespace softrdma::rdmacm
