// Asynchronous events (ibv_get_async_event(3)): the engine's events, routed to
// their context by Process (process.cc), wait in the context's queue; async_fd
// is readable while the queue holds one.
#include <sys/eventfd.h>

#include <algorithm>

#include "verbs/objects.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {

const void* element_of(const ibv_async_event& event) {
  switch (target_of(event.event_type)) {
    case EventTarget::kQp: return event.element.qp;
    case EventTarget::kCq: return event.element.cq;
    case EventTarget::kSrq: return event.element.srq;
    default: return nullptr;  // port, device, WQ: no object
  }
  return nullptr;
}

// Counts an event handed to the application on its object, for destroy to
// wait for the matching ibv_ack_async_event.
void count_delivered(const ibv_async_event& event) {
  switch (target_of(event.event_type)) {
    case EventTarget::kQp: {
      Qp* qp = to_qp(event.element.qp);
      pthread_mutex_lock(&qp->ibv()->mutex);
      ++qp->async_events_delivered;
      pthread_mutex_unlock(&qp->ibv()->mutex);
      return;
    }
    case EventTarget::kCq: {
      Cq* cq = to_cq(event.element.cq);
      pthread_mutex_lock(&cq->ibv.mutex);
      ++cq->async_events_delivered;
      pthread_mutex_unlock(&cq->ibv.mutex);
      return;
    }
    case EventTarget::kSrq: {
      Srq* srq = to_srq(event.element.srq);
      pthread_mutex_lock(&srq->ibv.mutex);
      ++srq->async_events_delivered;
      pthread_mutex_unlock(&srq->ibv.mutex);
      return;
    }
    default: return;
  }
}

// The oldest queued event, counted as delivered; false when its object was
// destroyed after the fd was signalled.
bool take_async_event(Context& ctx, ibv_async_event& event) {
  std::lock_guard lock(ctx.events_mutex);
  if (ctx.events.empty()) return false;
  event = ctx.events.front();
  ctx.events.pop_front();
  // Under events_mutex: a destroy's drop_async_events() comes either before
  // (the event is gone) or after (it is counted).
  count_delivered(event);
  return true;
}

}  // namespace

namespace softrdma::verbs {

void push_async_event(Context& ctx, const ibv_async_event& event) {
  {
    std::lock_guard lock(ctx.events_mutex);
    ctx.events.push_back(event);
  }
  eventfd_post(ctx.vctx.context.async_fd);
}

void drop_async_events(Context& ctx, const void* object) {
  std::lock_guard lock(ctx.events_mutex);
  std::erase_if(ctx.events, [&](const ibv_async_event& e) { return element_of(e) == object; });
}

void push_qp_error(Context& ctx, uint32_t qpn) {
  std::lock_guard lock(ctx.events_mutex);
  if (ctx.qp_error_fd < 0) return;  // nobody asked
  ctx.qp_errors.push_back(qpn);
  eventfd_post(ctx.qp_error_fd);
}

}  // namespace softrdma::verbs

// SOFTRDMA_PRIVATE_1, for softrdma's librdmacm only: the kernel's rdma_cm learns
// that a connection failed inside the kernel; softrdma's, a library above the
// verbs API, learns it here without taking the application's async events (the
// application may read those itself). A non-blocking fd, readable while numbers
// of RC QPs of `context` that entered Error (since the first call) wait in
// softrdma_take_qp_error. -1 with errno on failure.
SOFTRDMA_EXPORT int softrdma_qp_error_fd(ibv_context* context) {
  return guard_minus1([&] {
    Context* ctx = to_context(context);
    std::lock_guard lock(ctx->events_mutex);
    if (ctx->qp_error_fd < 0)
      ctx->qp_error_fd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
    return ctx->qp_error_fd;
  });
}

// The oldest such QP number: 0, or -1 with EAGAIN when none waits.
SOFTRDMA_EXPORT int softrdma_take_qp_error(ibv_context* context, uint32_t* qpn) {
  return guard_minus1([&] {
    Context* ctx = to_context(context);
    std::lock_guard lock(ctx->events_mutex);
    if (ctx->qp_error_fd < 0 || eventfd_take(ctx->qp_error_fd) != 0 || ctx->qp_errors.empty()) {
      errno = EAGAIN;
      return -1;
    }
    *qpn = ctx->qp_errors.front();
    ctx->qp_errors.pop_front();
    return 0;
  });
}

// Blocks until an event arrives unless the application made async_fd
// non-blocking (then -1 with EAGAIN). 0 or -1.
SOFTRDMA_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  return guard_minus1([&] {
    Context* ctx = to_context(context);
    if (Process::get().stale(ctx)) {
      errno = EIO;
      return -1;
    }
    for (;;) {
      if (eventfd_take(context->async_fd) != 0) return -1;
      if (take_async_event(*ctx, *event)) return 0;
    }
  });
}

// ibv_ack_async_event(3): every event taken must be acknowledged; destroying its
// QP or CQ waits for that.
SOFTRDMA_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  switch (target_of(event->event_type)) {
    case EventTarget::kQp: {
      ibv_qp* qp = event->element.qp;
      pthread_mutex_lock(&qp->mutex);
      ++qp->events_completed;
      pthread_cond_broadcast(&qp->cond);
      pthread_mutex_unlock(&qp->mutex);
      return;
    }
    case EventTarget::kCq: {
      ibv_cq* cq = event->element.cq;
      pthread_mutex_lock(&cq->mutex);
      ++cq->async_events_completed;
      pthread_cond_broadcast(&cq->cond);
      pthread_mutex_unlock(&cq->mutex);
      return;
    }
    case EventTarget::kSrq: {
      ibv_srq* srq = event->element.srq;
      pthread_mutex_lock(&srq->mutex);
      ++srq->events_completed;
      pthread_cond_broadcast(&srq->cond);
      pthread_mutex_unlock(&srq->mutex);
      return;
    }
    default: return;
  }
}
