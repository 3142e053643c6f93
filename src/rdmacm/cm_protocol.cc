// The Communication Manager's side of the agent (IBA 12.6-12.9): CM MADs in,
// the connection state of each id, the answers, retransmissions and timeouts,
// and the rdma_cm events they become (rdma_get_cm_event(3)). Runs under the
// agent's cm_mutex.
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "rdmacm/agent.h"
#include "rdmacm/cm.h"
#include "rdmacm/cm_format.h"
#include "rdmacm/verbs_private.h"
#include "wire/cm_route.h"

namespace softrdma::rdmacm {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int Agent::open_mad_port() {
  if (mad_port_ != nullptr) return 0;
  ibv_pd* pd = default_pd();
  if (pd == nullptr) return errno != 0 ? errno : ENODEV;
  mad_port_ = MadPort::open(context(), pd);
  if (mad_port_ == nullptr) return errno;
  comm_id_slot_ = softrdma_cm_id_slot(context());
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = mad_port_->fd();
  return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, mad_port_->fd(), &event) == 0 ? 0 : errno;
}

// On an address other processes share, the host learns that REQs for this
// service are this process's (docs/decisions/host-rnic.md, "CM MADs").
int Agent::add_listener(CmId& id) {
  const uint64_t service_id = service_id_of(id.ibv.ps, ntohs(rdma_get_src_port(&id.ibv)));
  if (int err = softrdma_cm_claim_service(context(), service_id)) return err;
  id.service_id = service_id;
  listeners_[id.service_id] = &id;
  return 0;
}

// A fresh local Communication ID (IBA 12.6.1), from a random start. On a shared
// address it carries this process's slot (wire/cm_route.h), so that every answer
// naming it is handed to this process.
void Agent::add_connection(CmId& id) {
  if (next_comm_id_ == 0 && getrandom(&next_comm_id_, sizeof next_comm_id_, 0) != 4)
    next_comm_id_ = uint32_t(Clock::now().time_since_epoch().count());
  uint32_t comm_id = 0;
  do {
    ++next_comm_id_;
    comm_id =
        comm_id_slot_ != 0 ? wire::comm_id_in_slot(comm_id_slot_, next_comm_id_) : next_comm_id_;
  } while (comm_id == 0 || connections_.contains(comm_id));
  id.conn.local_comm_id = comm_id;
  connections_[comm_id] = &id;
}

void Agent::request_answered(CmId& id) {
  if (id.conn.state == CmState::kReqReceived && id.listener != nullptr &&
      id.listener->pending_requests > 0)
    --id.listener->pending_requests;
}

void Agent::forget(CmId& id) {
  request_answered(id);
  iwarp_->forget(id);
  if (id.service_id != 0) {
    auto it = listeners_.find(id.service_id);
    if (it != listeners_.end() && it->second == &id) {
      listeners_.erase(it);
      lingering_services_.insert(id.service_id);
    }
    id.service_id = 0;
  }
  if (id.conn.local_comm_id != 0) {
    connections_.erase(id.conn.local_comm_id);
    by_remote_.erase({id.conn.remote_gid, id.conn.remote_comm_id});
    id.conn.local_comm_id = 0;
  }
  // Children of a listener being destroyed keep their connections; they only
  // lose the pointer to it.
  for (auto& [comm_id, other] : connections_)
    if (other->listener == &id) other->listener = nullptr;
  settle_services();
}

// On a shared address a REQ goes to the process that claimed its ServiceID
// (docs/decisions/host-rnic.md, "CM MADs"). A listener may be destroyed as soon
// as it accepted (perftest's first connection does so, before the RTU): its
// requester, not having the REP in time, repeats the REQ, and it must still
// reach the process that holds the connection, which sends the REP again (IBA
// 12.9.8.1), not the process the kernel happened to give it, which knows no
// listener and would reject it ("invalid service ID", fatal to the requester).
// So the claim is kept while a connection the listener took is in REQ_RCVD or
// REP_SENT, and released when none is (or kept for a new listener of the
// service in this process).
void Agent::settle_services() {
  for (auto it = lingering_services_.begin(); it != lingering_services_.end();) {
    const uint64_t service = *it;
    if (listeners_.contains(service)) {  // a new listener of this process holds it now
      it = lingering_services_.erase(it);
      continue;
    }
    const bool answering =
        std::any_of(connections_.begin(), connections_.end(), [&](const auto& entry) {
          const CmState state = entry.second->conn.state;
          return entry.second->listened_service == service &&
                 (state == CmState::kReqReceived || state == CmState::kRepSent);
        });
    if (answering) {
      ++it;
      continue;
    }
    softrdma_cm_release_service(context(), service);
    it = lingering_services_.erase(it);
  }
}

int Agent::send(CmId& id, std::span<const uint8_t> mad, bool expect_answer) {
  Connection& c = id.conn;
  std::memcpy(c.last_sent.data(), mad.data(), c.last_sent.size());
  c.awaiting_answer = expect_answer;
  if (expect_answer) {
    c.retries_left = kMaxCmRetries;
    c.timeout = cm_timeout(kCmResponseTimeout);
    c.deadline = Clock::now() + c.timeout;
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);  // the thread recomputes its wait
  }
  return mad_port_->send(c.remote_gid, c.sgid_index, mad);
}

int Agent::next_timeout_ms() {
  std::lock_guard lock(cm_mutex_);
  auto now = Clock::now();
  int wait = iwarp_->next_timeout_ms(now);
  for (auto& [comm_id, id] : connections_) {
    if (!id->conn.awaiting_answer) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(id->conn.deadline - now);
    int ms = int(std::max<int64_t>(left.count(), 0)) + 1;
    if (wait < 0 || ms < wait) wait = ms;
  }
  return wait;
}

// IBA 12.9.7: a message not answered in time is sent again, up to the retries;
// then the connection fails as rdma_cm reports it (the kernel's cma.c: an
// unanswered REQ or REP is UNREACHABLE, an unanswered DREQ a disconnection).
void Agent::on_timeouts() {
  std::lock_guard lock(cm_mutex_);
  auto now = Clock::now();
  iwarp_->on_timeouts(now);
  for (auto it = connections_.begin(); it != connections_.end();) {
    CmId& id = *(it++)->second;
    Connection& c = id.conn;
    if (!c.awaiting_answer || c.deadline > now) continue;
    if (c.retries_left-- > 0) {
      c.deadline = now + c.timeout;
      mad_port_->send(c.remote_gid, c.sgid_index, c.last_sent);
      softrdma_cm_count_resent(context());  // each costs its peer a timeout: visible
      continue;
    }
    c.awaiting_answer = false;
    const CmState was = c.state;
    c.state = CmState::kClosed;
    if (was == CmState::kClosed) continue;  // a lost connection's DREQ: already told
    if (was == CmState::kDreqSent) {
      deliver(id, RDMA_CM_EVENT_DISCONNECTED, 0);
    } else {
      if (was == CmState::kRepSent) {
        Mad rej = format_rej(c, kRejTimeout, nullptr, 0);
        mad_port_->send(c.remote_gid, c.sgid_index, rej);
      }
      qp_to_error(id);
      deliver(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
    }
  }
  settle_services();  // a REP that went unanswered to the end needs no claim
}

}  // namespace softrdma::rdmacm
