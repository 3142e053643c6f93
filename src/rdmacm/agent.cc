#include "rdmacm/agent.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "rdmacm/address.h"
#include "rdmacm/cm.h"
#include "rdmacm/verbs_private.h"

namespace softrdma::rdmacm {

namespace {

// Never destroyed: the thread may still be inside epoll_wait at exit. A forked
// child has the parent's object but not its thread, and may not use the parent's
// device context (docs/decisions/verbs-contexts.md): it gets an agent of its own
// (the parent's copy is left as it is).
std::mutex agent_mutex;
Agent* the_agent = nullptr;  // guarded by agent_mutex
pid_t agent_owner = 0;       // guarded by agent_mutex

}  // namespace

Agent& Agent::get() {
  std::lock_guard lock(agent_mutex);
  if (the_agent == nullptr || agent_owner != getpid()) {
    the_agent = new Agent;
    agent_owner = getpid();
  }
  return *the_agent;
}

Agent* Agent::existing() {
  std::lock_guard lock(agent_mutex);
  return agent_owner == getpid() ? the_agent : nullptr;
}

void Agent::own_qp(CmId& id) {
  std::lock_guard lock(qps_mutex_);
  qp_owners_[id.ibv.qp] = &id;
}

void Agent::disown_qp(CmId& id) {
  // By owner, not by id.ibv.qp: the application may have changed that field.
  std::lock_guard lock(qps_mutex_);
  std::erase_if(qp_owners_, [&](const auto& entry) { return entry.second == &id; });
}

// On the application's thread, in ibv_destroy_qp before the QP is touched: the id
// no longer has it (id->qp is null, as after rdma_destroy_qp), so neither this
// agent nor a later rdma_destroy_qp uses it again.
void Agent::qp_destroyed(ibv_qp* qp) noexcept {
  Agent* agent = existing();
  if (agent == nullptr) return;
  {
    std::lock_guard lock(agent->qps_mutex_);
    if (!agent->qp_owners_.contains(qp)) return;  // not an id's QP
  }
  std::lock_guard cm_lock(agent->cm_mutex_);
  std::lock_guard lock(agent->qps_mutex_);
  auto it = agent->qp_owners_.find(qp);
  if (it == agent->qp_owners_.end()) return;
  it->second->ibv.qp = nullptr;
  agent->qp_owners_.erase(it);
}

Agent::Agent()
    : placeholder_fd_(open("/dev/null", O_RDONLY | O_CLOEXEC)),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
  iwarp_ = std::make_unique<IwarpCm>(epoll_fd_, wake_fd_);
  softrdma_observe_qp_destroy(&Agent::qp_destroyed);
  thread_ = std::thread([this] { run(); });
  thread_.detach();
}

ibv_context* Agent::context() {
  std::lock_guard lock(mutex_);
  if (context_ != nullptr) return context_;
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr) return nullptr;
  if (count > 0) context_ = ibv_open_device(devices[0]);
  ibv_free_device_list(devices);
  if (context_ != nullptr) {
    watch_qp_errors();
    publish_liveness();
  }
  if (context_ == nullptr && errno == 0) errno = ENODEV;
  return context_;
}

ibv_pd* Agent::default_pd() {
  ibv_context* device = context();
  std::lock_guard lock(mutex_);
  if (default_pd_ == nullptr && device != nullptr) default_pd_ = ibv_alloc_pd(device);
  return default_pd_;
}

void Agent::watch_reservation(int fd) {
  {
    std::lock_guard lock(mutex_);
    reservations_.insert(fd);
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
}

void Agent::forget_reservation(int fd) {
  // Under the lock, so that the thread never accepts on a number being reused.
  // The socket goes at once (its port may be reserved again right away: perftest
  // -R listens twice on one port), but not its number: the thread's current batch
  // may hold an event for it, taken from the epoll before this. Served after a
  // close, that event found the number unknown, took it for a GID request's
  // connection and closed it: whatever the process had opened under it since
  // (the next reservation, its bind being the next socket). dup3 swaps the socket
  // for the placeholder in one step; the thread closes it after the batch.
  std::lock_guard lock(mutex_);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  reservations_.erase(fd);
  if (placeholder_fd_ < 0 || dup3(placeholder_fd_, fd, O_CLOEXEC) != fd) {
    close(fd);
    return;
  }
  retired_.insert(fd);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);  // the batch ends; the number is freed
}

// After a batch of events: no later epoll_wait returns a retired number.
void Agent::close_retired() {
  std::lock_guard lock(mutex_);
  for (int fd : retired_) close(fd);
  retired_.clear();
}

// A reservation's socket is readable: accept the connection and wait for its
// request (the asker writes right after connecting). A connection is readable:
// answer it (or see the asker gone) and close.
void Agent::serve(int fd) {
  if (fd == wake_fd_) {
    uint64_t count;
    (void)!read(wake_fd_, &count, sizeof count);
    return;
  }
  if (fd == qp_error_fd_.load(std::memory_order_relaxed)) return on_qp_errors();
  if (serve_liveness_socket(fd)) return;
  {
    std::lock_guard cm_lock(cm_mutex_);
    if (mad_port_ != nullptr && fd == mad_port_->fd()) {
      mad_port_->drain([this](const ibv_gid& source, std::span<const uint8_t> mad) {
        on_mad(source, mad);
      });
      if (!lingering_services_.empty()) settle_services();  // an RTU may have come
      return;
    }
    if (serve_pidfd(fd)) return;
    if (iwarp_->serve(fd)) return;
  }
  std::unique_lock lock(mutex_);
  if (retired_.contains(fd)) return;  // a forgotten reservation's stale event
  ibv_context* context = context_;
  if (!reservations_.contains(fd)) {
    lock.unlock();
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    if (context != nullptr)
      answer_gid_request(fd, context);
    else
      close(fd);
    return;
  }
  for (;;) {
    int connection = accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (connection < 0) return;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = connection;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, connection, &event) != 0) close(connection);
  }
}

void Agent::run() {
  epoll_event events[16];
  for (;;) {
    int n = epoll_wait(epoll_fd_, events, 16, next_timeout_ms());
    if (n < 0 && errno != EINTR) return;
    for (int i = 0; i < n; ++i) serve(events[i].data.fd);
    close_retired();
    on_timeouts();
  }
}

}  // namespace softrdma::rdmacm
