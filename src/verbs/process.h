// What the verbs library keeps per process (docs/decisions/verbs-contexts.md):
//
// - one ibv_device, described from the settings (SOFTRDMA_DEVICE);
// - one runtime OpenDevice (UDP transport, engine, progress thread), shared by every
//   context the process opens, as one RNIC serves every context of a host: it is
//   opened by the first ibv_open_device and closed with the last context;
// - the routing of the engine's async events to the context that owns the QP or
//   CQ they name (the engine has one event queue per device);
// - fork: a child forgets the parent's OpenDevice (it belongs to the parent's threads
//   and sockets) and the parent's objects are dead in it (generation()).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/open_device.h"
#include "verbs/objects.h"

namespace softrdma::verbs {

// IBA 11.6.3: which object an async event names (ibv_async_event::element).
enum class EventTarget { kQp, kCq, kSrq, kPort, kDevice, kOther };
EventTarget target_of(ibv_event_type type);

class Process {
 public:
  static Process& get();

  // The device this process sees, or null when the settings are malformed (the
  // reason is printed to stderr once).
  ibv_device* device();

  // The shared OpenDevice: opened on first use, counted. Null with `err` (an errno)
  // when it cannot be opened; the runtime's reason is printed to stderr once.
  runtime::OpenDevice* acquire(int& err);
  void release();

  // Bumped in a forked child: objects of older generations belong to the parent.
  uint64_t generation() const { return generation_.load(std::memory_order_relaxed); }
  bool stale(const Context* ctx) const { return ctx->generation != generation(); }

  // Async event routing (async.cc delivers; create/destroy register).
  void add_context(Context* ctx);
  void remove_context(Context* ctx);
  // ibv_import_device(3): the open context whose cmd_fd refers to the same file as
  // `fd` (a dup of it), or null.
  Context* context_of_cmd_fd(int fd);
  void add_qp(Qp* qp);
  void remove_qp(Qp* qp);
  void add_cq(Cq* cq);
  void remove_cq(Cq* cq);
  void add_srq(Srq* srq);
  void remove_srq(Srq* srq);

 private:
  Process();
  void route_events(engine::Device& device);
  void deliver(const engine::AsyncEvent& event);
  void route_qp_error(uint32_t qpn);
  void warn_once(const std::string& message);
  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();

  std::mutex node_mutex_;
  std::unique_ptr<runtime::OpenDevice> node_;
  unsigned node_users_ = 0;
  std::atomic<uint64_t> generation_{1};
  std::atomic<bool> warned_{false};

  std::once_flag device_once_;
  ibv_device device_{};
  bool device_ok_ = false;

  // Leaf lock: held only to look up and queue, never while calling the engine.
  std::mutex route_mutex_;
  std::vector<Context*> contexts_;
  std::unordered_map<uint32_t, Qp*> qps_;
  std::unordered_map<const engine::Cq*, Cq*> cqs_;
  std::unordered_map<const engine::Srq*, Srq*> srqs_;
};

// Queues an event on a context and makes its async_fd readable (async.cc).
void push_async_event(Context& ctx, const ibv_async_event& event);
// Drops the queued, not yet taken events that name `qp` / `cq` (their objects are
// being destroyed; the kernel does the same, ib_uverbs_release_uevent).
void drop_async_events(Context& ctx, const void* object);
// Queues the number of a QP of `ctx` that entered Error for softrdma_qp_error_fd's
// reader, if there is one (async.cc).
void push_qp_error(Context& ctx, uint32_t qpn);

// False once the process forked or the context's OpenDevice is gone: calls on it are EIO.
inline bool live(Context* ctx) { return !Process::get().stale(ctx); }
inline bool live(ibv_context* context) { return live(to_context(context)); }

// Adds one unit to an EFD_SEMAPHORE eventfd; takes one (-1 with errno when the
// fd is non-blocking and empty, or on a signal).
void eventfd_post(int fd);
int eventfd_take(int fd);

}  // namespace softrdma::verbs
