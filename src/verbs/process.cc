#include "verbs/process.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/settings.h"

namespace softrdma::verbs {

// IBA 11.6.3: which events name a QP, a CQ, or the port / device as a whole.
EventTarget target_of(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR: return EventTarget::kCq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: return EventTarget::kQp;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE: return EventTarget::kPort;
    case IBV_EVENT_DEVICE_FATAL: return EventTarget::kDevice;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: return EventTarget::kSrq;
    case IBV_EVENT_WQ_FATAL: return EventTarget::kOther;  // no WQs
  }
  return EventTarget::kOther;
}

namespace {


void copy_name(char* dst, size_t size, const std::string& src) {
  std::snprintf(dst, size, "%s", src.c_str());
}

}  // namespace

Process& Process::get() {
  // Never destroyed: a verbs call from a thread that outlives main() (or an
  // atexit handler) must not meet a destructed registry.
  static Process* process = new Process();
  return *process;
}

Process::Process() {
  pthread_atfork(&Process::before_fork, &Process::after_fork_in_parent,
                 &Process::after_fork_in_child);
}

void Process::warn_once(const std::string& message) {
  if (warned_.exchange(true)) return;
  const bool prefixed = message.rfind("softrdma:", 0) == 0;  // the transport's are
  std::fprintf(stderr, "%s%s\n", prefixed ? "" : "softrdma: ", message.c_str());
}

ibv_device* Process::device() {
  std::call_once(device_once_, [this] {
    // The device is listed whatever the other settings say: a malformed one makes
    // opening it fail, with the message (docs/configuration.md), as a kernel
    // device that cannot be opened is still listed. Only a name that cannot be a
    // verbs device name leaves the list empty.
    std::string error;
    auto settings = runtime::Settings::from_environment(error);
    if (!settings && !runtime::Settings::device_name_usable()) {
      warn_once(error);
      return;
    }
    const std::string name = runtime::Settings::device_name_from_environment();
    // What rdma-core reads from sysfs for a kernel device. The paths need not
    // exist: ibv_read_sysfs_file() answers -1 for every file (device.cc).
    // RoCE is IB transport (IBA A16); an iWARP port is an RNIC's (as siw's).
    const bool iwarp = runtime::Settings::iwarp_from_environment();
    device_.node_type = iwarp ? IBV_NODE_RNIC : IBV_NODE_CA;
    device_.transport_type = iwarp ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB;
    copy_name(device_.name, sizeof device_.name, name);
    copy_name(device_.dev_name, sizeof device_.dev_name, "uverbs0");
    copy_name(device_.dev_path, sizeof device_.dev_path, "/sys/class/infiniband_verbs/uverbs0");
    copy_name(device_.ibdev_path, sizeof device_.ibdev_path,
              "/sys/class/infiniband/" + name);
    device_ok_ = true;
  });
  return device_ok_ ? &device_ : nullptr;
}

runtime::OpenDevice* Process::acquire(int& err) {
  std::lock_guard lock(node_mutex_);
  if (node_) {
    ++node_users_;
    return node_.get();
  }
  std::string error;
  auto settings = runtime::Settings::from_environment(error);
  std::unique_ptr<runtime::OpenDevice> node;
  if (settings) node = runtime::OpenDevice::open(*settings, error);
  if (!node) {
    warn_once(error);
    err = settings ? ENODEV : EINVAL;
    return nullptr;
  }
  // Set before any QP or CQ exists, so before the progress thread can post.
  engine::Device* device = &node->device();
  device->set_async_notify([this, device] { route_events(*device); });
  node->set_qp_error_listener([this](uint32_t qpn) { route_qp_error(qpn); });
  node_ = std::move(node);
  node_users_ = 1;
  return node_.get();
}

void Process::release() {
  std::lock_guard lock(node_mutex_);
  // Closed under the lock: a concurrent acquire must not open a second OpenDevice on
  // the same address while this one still holds it.
  if (node_users_ > 0 && --node_users_ == 0) node_.reset();
}

void Process::add_context(Context* ctx) {
  std::lock_guard lock(route_mutex_);
  contexts_.push_back(ctx);
}

Context* Process::context_of_cmd_fd(int fd) {
  struct stat wanted {};
  if (fstat(fd, &wanted) != 0) return nullptr;
  std::lock_guard lock(route_mutex_);
  for (Context* ctx : contexts_) {
    struct stat st {};
    if (fstat(ctx->vctx.context.cmd_fd, &st) == 0 && st.st_ino == wanted.st_ino &&
        st.st_dev == wanted.st_dev)
      return ctx;
  }
  return nullptr;
}

void Process::remove_context(Context* ctx) {
  std::lock_guard lock(route_mutex_);
  std::erase(contexts_, ctx);
}

void Process::add_qp(Qp* qp) {
  std::lock_guard lock(route_mutex_);
  qps_[qp->ex.qp_base.qp_num] = qp;
}

void Process::remove_qp(Qp* qp) {
  std::lock_guard lock(route_mutex_);
  auto it = qps_.find(qp->ex.qp_base.qp_num);
  if (it != qps_.end() && it->second == qp) qps_.erase(it);
}

void Process::add_cq(Cq* cq) {
  std::lock_guard lock(route_mutex_);
  cqs_[cq->engine_cq] = cq;
}

void Process::remove_cq(Cq* cq) {
  std::lock_guard lock(route_mutex_);
  cqs_.erase(cq->engine_cq);
}

void Process::add_srq(Srq* srq) {
  std::lock_guard lock(route_mutex_);
  srqs_[srq->srq] = srq;
}

void Process::remove_srq(Srq* srq) {
  std::lock_guard lock(route_mutex_);
  srqs_.erase(srq->srq);
}

// Called by the engine (any thread, possibly under a QP lock) after it queued an
// event: move every queued event to its context.
void Process::route_events(engine::Device& device) {
  engine::AsyncEvent event;
  while (device.next_async_event(event)) deliver(event);
}

void Process::route_qp_error(uint32_t qpn) {
  std::lock_guard lock(route_mutex_);
  auto it = qps_.find(qpn);
  if (it != qps_.end() && !it->second->error_requested.load(std::memory_order_relaxed))
    push_qp_error(*it->second->ctx, qpn);
}

void Process::deliver(const engine::AsyncEvent& event) {
  ibv_async_event out{};
  out.event_type = event.type;
  std::lock_guard lock(route_mutex_);
  switch (target_of(event.type)) {
    case EventTarget::kQp: {
      auto it = qps_.find(event.qpn);
      if (it == qps_.end()) return;  // destroyed meanwhile: nobody to tell
      out.element.qp = it->second->ibv();
      push_async_event(*it->second->ctx, out);
      return;
    }
    case EventTarget::kCq: {
      auto it = cqs_.find(event.cq);
      if (it == cqs_.end()) return;
      out.element.cq = &it->second->ibv;
      push_async_event(*it->second->ctx, out);
      return;
    }
    case EventTarget::kSrq: {
      auto it = srqs_.find(event.srq);
      if (it == srqs_.end()) return;
      out.element.srq = &it->second->ibv;
      push_async_event(*it->second->ctx, out);
      return;
    }
    case EventTarget::kPort:
      out.element.port_num = 1;
      [[fallthrough]];
    case EventTarget::kDevice:
      for (Context* ctx : contexts_) push_async_event(*ctx, out);
      return;
    case EventTarget::kOther:
      return;
  }
}

// fork(): the registry's locks must not be copied held (a child could never take
// them again), so fork waits for them.
void Process::before_fork() {
  Process& p = get();
  p.node_mutex_.lock();
  p.route_mutex_.lock();
}

void Process::after_fork_in_parent() {
  Process& p = get();
  p.route_mutex_.unlock();
  p.node_mutex_.unlock();
}

// The child has a copy of the parent's OpenDevice without its progress thread, with
// the parent's sockets: using it would steal the parent's packets, and
// destroying it would join a thread that does not exist here. Its receive and
// hand-over sockets are closed (the child must not hold the parent's place on a
// shared address after the parent exits); the rest is forgotten (leaked), and
// every object of the parent's contexts is dead in the child
// (docs/decisions/verbs-abi.md, "fork").
void Process::after_fork_in_child() {
  Process& p = get();
  if (p.node_) p.node_->close_after_fork();
  (void)p.node_.release();
  p.node_users_ = 0;
  p.contexts_.clear();
  p.qps_.clear();
  p.cqs_.clear();
  p.generation_.fetch_add(1, std::memory_order_relaxed);
  p.route_mutex_.unlock();
  p.node_mutex_.unlock();
}

void eventfd_post(int fd) {
  const uint64_t one = 1;
  // Cannot fail short of 2^64-2 pending units.
  ssize_t n = write(fd, &one, sizeof one);
  (void)n;
}

// A signal interrupts the wait with EINTR, as rdma-core's read() of the kernel's
// event file does: applications use that to stop a blocked ibv_get_cq_event.
int eventfd_take(int fd) {
  uint64_t value = 0;
  return read(fd, &value, sizeof value) == sizeof value ? 0 : -1;
}

}  // namespace softrdma::verbs
