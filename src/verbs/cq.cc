// Completion queues and completion channels (ibv_create_cq(3), ibv_poll_cq(3),
// ibv_req_notify_cq(3), ibv_create_comp_channel(3), ibv_get_cq_event(3)).
#include <sched.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <memory>

#include "verbs/objects.h"
#include "verbs/ops.h"
#include "verbs/process.h"

using namespace softrdma::verbs;

namespace {


// A completed RDMA WRITE tells its poller nothing about data coming in, so an
// application that waits for its peer next waits on memory, where only the
// progress thread can serve it (perftest's ib_write_lat; memory-polling
// protocols). After other completions the poller usually polls again.
bool hands_over(const ibv_wc* wc, int n) {
  for (int i = 0; i < n; ++i)
    if (wc[i].opcode == IBV_WC_RDMA_WRITE) return true;
  return false;
}

// The CQ's armed notification fired (engine thread, no CQ lock held): queue the
// CQ on its channel and make the channel's fd readable.
void on_notify(Cq* cq) {
  CompChannel* channel = cq->channel;
  {
    std::lock_guard lock(channel->mutex);
    channel->pending.push_back(cq);
  }
  eventfd_post(channel->ibv.fd);
}

// Events of a CQ being destroyed that the application has not taken yet are
// dropped, as the kernel does (ib_uverbs_release_ucq): they could only hand out
// a dangling pointer.
void drop_pending(Cq* cq) {
  if (cq->channel != nullptr) {
    std::lock_guard lock(cq->channel->mutex);
    std::erase(cq->channel->pending, cq);
  }
  drop_async_events(*cq->ctx, &cq->ibv);
}

// ibv_get_cq_event(3) / ibv_get_async_event(3): destroy waits until every event
// handed out for the CQ has been acknowledged.
void wait_for_acks(Cq* cq) {
  pthread_mutex_lock(&cq->ibv.mutex);
  while (cq->ibv.comp_events_completed != cq->comp_events_delivered ||
         cq->ibv.async_events_completed != cq->async_events_delivered) {
    pthread_cond_wait(&cq->ibv.cond, &cq->ibv.mutex);
  }
  pthread_mutex_unlock(&cq->ibv.mutex);
}

Cq* create_cq(Context* ctx, int cqe, const softrdma::engine::CqOptions& options, int& err) {
  softrdma::engine::Cq* engine_cq = ctx->device->create_cq(cqe, options, err);
  if (engine_cq == nullptr) return nullptr;
  auto* cq = new Cq{};
  cq->engine_cq = engine_cq;
  cq->node = ctx->node;
  cq->ctx = ctx;
  cq->inline_progress = ctx->inline_progress;
  cq->ibv.context = ctx->ibv();
  cq->ibv.cqe = int(engine_cq->capacity());
  pthread_mutex_init(&cq->ibv.mutex, nullptr);
  pthread_cond_init(&cq->ibv.cond, nullptr);
  return cq;
}

// Before the CQ is used: its notifications go to the channel from now on.
void attach_channel(Cq* cq, CompChannel* channel) {
  cq->channel = channel;
  cq->ibv.channel = &channel->ibv;
  {
    std::lock_guard lock(channel->mutex);
    ++channel->ibv.refcnt;
  }
  cq->engine_cq->set_notify([cq] { on_notify(cq); });
}

// ibv_get_cq_event(3): the oldest CQ whose notification fired, counted as
// delivered; null when its CQ was destroyed after the fd was signalled.
Cq* take_cq_event(CompChannel* channel) {
  std::lock_guard lock(channel->mutex);
  if (channel->pending.empty()) return nullptr;
  Cq* cq = channel->pending.front();
  channel->pending.pop_front();
  // Counted under the channel lock: destroy_cq's drop_pending() comes either
  // before (the event is gone) or after (it is counted).
  pthread_mutex_lock(&cq->ibv.mutex);
  ++cq->comp_events_delivered;
  pthread_mutex_unlock(&cq->ibv.mutex);
  return cq;
}

// ibv_get_cq_event(3) on a blocking channel: the waiting thread runs the engine
// itself, as a poller in ibv_poll_cq does, so the completion it waits for is made
// on this thread and the progress thread stands aside (docs/decisions/threading.md).
// It spins for a while (progress, then a look at the channel), then hands the
// engine over to the progress thread (which watches every transport, timers
// included) and sleeps in poll() on the channel and the datagram transport.
// 0 when an event unit was taken, -1 with errno.
int wait_for_event(CompChannel* channel) {
  const int fd = channel->ibv.fd;
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_NONBLOCK) != 0) return eventfd_take(fd);  // EAGAIN as before
  softrdma::runtime::OpenDevice* node = to_context(channel->ibv.context)->node;
  pollfd fds[2] = {{fd, POLLIN, 0}, {node->transport().rx_fd(), POLLIN, 0}};
  constexpr auto kSpin = std::chrono::microseconds(30);
  auto spin_until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    if (poll(fds, 1, 0) == 1 && (fds[0].revents & POLLIN)) return eventfd_take(fd);
    if (node->progress_inline()) {
      spin_until = std::chrono::steady_clock::now() + kSpin;
      continue;
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      sched_yield();
      continue;
    }
    node->poller_satisfied(/*hand_over=*/true);
    // A signal interrupts the wait (-1, EINTR), as it does the kernel's read().
    if (poll(fds, 2, -1) < 0) return -1;
    spin_until = std::chrono::steady_clock::now() + kSpin;
  }
}

void free_cq(Cq* cq) {
  if (cq->channel != nullptr) {
    std::lock_guard lock(cq->channel->mutex);
    --cq->channel->ibv.refcnt;
  }
  pthread_cond_destroy(&cq->ibv.cond);
  pthread_mutex_destroy(&cq->ibv.mutex);
  delete cq;
}

// ibv_create_cq_ex(3) asks for what this CQ cannot give: 0 or an errno, as
// rdma-core answers. Unknown comp_mask bits and wc_flags beyond the API are
// EOPNOTSUPP (libibverbs' own checks); of the API's fields, those that need what
// softrdma lacks are EOPNOTSUPP (as rxe refuses what it lacks): CVLAN (VLAN
// stripping of raw packet QPs), FLOW_TAG (flow steering).
// Unknown creation flags are EINVAL (mlx5). IBV_CQ_INIT_ATTR_MASK_PD must name a
// parent domain of this context (ibv_alloc_parent_domain(3)); a plain PD is
// EINVAL, as mlx5 answers. The CQ's ring stays the engine's own: the parent
// domain's allocator serves QP queues (docs/decisions/parent-domains.md).
int check_cq_ex(const ibv_context* context, const ibv_cq_init_attr_ex& attr) {
  constexpr uint32_t kKnownMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  constexpr uint64_t kLacking = IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG;
  constexpr uint32_t kKnownFlags =
      IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  if (attr.comp_mask & ~kKnownMask) return EOPNOTSUPP;
  if (attr.wc_flags & (~uint64_t(IBV_CREATE_CQ_SUP_WC_FLAGS) | kLacking)) return EOPNOTSUPP;
  if ((attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr.flags & ~kKnownFlags)) return EINVAL;
  if ((attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
      (attr.parent_domain == nullptr || attr.parent_domain->context != context ||
       to_pd(attr.parent_domain)->protection == nullptr))
    return EINVAL;
  if (attr.comp_vector >= uint32_t(context->num_comp_vectors)) return EINVAL;
  if (attr.channel != nullptr && attr.channel->context != context) return EINVAL;
  if (attr.cqe > uint32_t(INT_MAX)) return EINVAL;  // above max_cqe too
  return 0;
}

softrdma::engine::CqOptions options_of(const ibv_cq_init_attr_ex& attr) {
  softrdma::engine::CqOptions options;
  options.timestamps = (attr.wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                         IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) != 0;
  options.ignore_overrun = (attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                           (attr.flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
  return options;
}

}  // namespace

namespace softrdma::verbs {

// The verbs_context slot behind the inline ibv_create_cq_ex(3). The CQ is an
// ordinary one as well: ibv_poll_cq, ibv_req_notify_cq, ibv_resize_cq and
// ibv_destroy_cq take its ibv_cq_ex_to_cq().
ibv_cq_ex* op_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  return guard_ptr([&]() -> ibv_cq_ex* {
    if (!live(context)) return fail(EIO);
    if (int err = check_cq_ex(context, *attr)) return fail(err);
    int err = 0;
    Cq* cq = create_cq(to_context(context), int(attr->cqe), options_of(*attr), err);
    if (cq == nullptr) return fail(err);  // 0 or above max_cqe: EINVAL
    cq->batch = std::make_unique<CqPollBatch>();
    cq->batch->wc_flags = attr->wc_flags;
    cq->batch->single_threaded = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                                 (attr->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
    cq->ex.comp_mask = 0;  // no optional ibv_cq_ex field is defined
    install_cq_ex_ops(cq->ex, attr->wc_flags);
    cq->ex.cq_context = attr->cq_context;
    if (attr->channel != nullptr) attach_channel(cq, to_channel(attr->channel));
    if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
      cq->parent_domain = to_pd(attr->parent_domain);
      cq->parent_domain->users.fetch_add(1);  // deallocating it is EBUSY meanwhile
    }
    Process::get().add_cq(cq);
    return &cq->ex;
  });
}

// The fast path. Completions already queued are returned at once; otherwise
// progress is made on the caller's thread (SOFTRDMA_PROGRESS=inline depends on
// it; with the progress thread it saves the thread's wake-up latency).
int op_poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq* cq = to_cq(ibcq);
  if (num_entries <= 0 || Process::get().stale(cq->ctx)) [[unlikely]]
    return num_entries == 0 ? 0 : -1;
  int n = cq->engine_cq->poll(num_entries, wc);
  if (n < num_entries && (n == 0 || cq->inline_progress)) {
    const bool worked = cq->node->progress_inline();
    n += cq->engine_cq->poll(num_entries - n, wc + n);
    if (n > 0) cq->node->poller_satisfied(hands_over(wc, n));
    if (n == 0 && !worked) after_idle_poll(cq->node->idle_poll_yields_at_once());
  }
  if (n > 0) after_busy_poll();
  return n;
}

namespace {
// Empty polls of this thread in a row.
thread_local uint32_t idle_polls = 0;
constexpr uint32_t kIdlePollsBeforeYielding = 32;
constexpr uint32_t kIdlePollsPerYield = 8;
}  // namespace

// Nothing to return and nothing done: give the core away. A busy poller otherwise
// holds a core that the peer process or this process's progress thread needs when
// threads outnumber cores (these machines have two); with nobody else runnable,
// sched_yield returns at once, but it still costs a system call and a pass through
// the scheduler (0.6 µs here), which was a fifth of a same-host ping-pong's time
// when every empty poll paid it (docs/performance.md). While the wire carries
// traffic, the thread that must run next is often this process's progress thread
// (ib_write_lat over UDP: 41 -> 54 µs without the yield): every empty poll yields
// (`at_once`). Otherwise (a quiet wire; iWARP, whose poller reads its own streams)
// a poller yields once it has found nothing kIdlePollsBeforeYielding times in a
// row (some µs: an answer on the same host comes within them), then on every
// kIdlePollsPerYield-th.
void after_idle_poll(bool at_once) {
  ++idle_polls;
  if (at_once ||
      (idle_polls >= kIdlePollsBeforeYielding && idle_polls % kIdlePollsPerYield == 0))
    sched_yield();
}

void after_busy_poll() { idle_polls = 0; }

// ibv_req_notify_cq(3): arms the CQ once; the next (solicited) completion fires.
int op_req_notify_cq(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = to_cq(ibcq);
  if (Process::get().stale(cq->ctx)) return EIO;
  cq->engine_cq->arm(solicited_only != 0);
  return 0;
}

}  // namespace softrdma::verbs

SOFTRDMA_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                      ibv_comp_channel* channel, int comp_vector) {
  return guard_ptr([&]() -> ibv_cq* {
    if (!live(context)) return fail(EIO);
    if (comp_vector < 0 || comp_vector >= context->num_comp_vectors) return fail(EINVAL);
    if (channel != nullptr && channel->context != context) return fail(EINVAL);
    int err = 0;
    Cq* cq = create_cq(to_context(context), cqe, {}, err);  // cqe > max_cqe: EINVAL
    if (cq == nullptr) return fail(err);
    cq->ibv.cq_context = cq_context;
    if (channel != nullptr) attach_channel(cq, to_channel(channel));
    Process::get().add_cq(cq);
    return &cq->ibv;
  });
}

// ibv_destroy_cq(3): EBUSY while a QP uses it.
SOFTRDMA_EXPORT int ibv_destroy_cq(ibv_cq* ibcq) {
  return guard_errno([&] {
    Cq* cq = to_cq(ibcq);
    if (live(ibcq->context)) {
      if (int err = cq->ctx->device->destroy_cq(cq->engine_cq)) return err;
      Process::get().remove_cq(cq);
      drop_pending(cq);
      wait_for_acks(cq);
    }
    if (cq->parent_domain != nullptr) cq->parent_domain->users.fetch_sub(1);
    free_cq(cq);
    return 0;
  });
}

// ibv_resize_cq(3): not below the completions it holds (EINVAL), nor above max_cqe.
SOFTRDMA_EXPORT int ibv_resize_cq(ibv_cq* ibcq, int cqe) {
  return guard_errno([&] {
    Cq* cq = to_cq(ibcq);
    if (!live(ibcq->context)) return EIO;
    if (cqe < 1 || uint32_t(cqe) > cq->ctx->device->limits().max_cqe) return EINVAL;
    cq->ctx->device->settle();  // completions of work already posted count
    if (int err = cq->engine_cq->resize(uint32_t(cqe))) return err;
    ibcq->cqe = int(cq->engine_cq->capacity());
    return 0;
  });
}

SOFTRDMA_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  return guard_ptr([&]() -> ibv_comp_channel* {
    if (!live(context)) return fail(EIO);
    const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    if (fd < 0) return nullptr;  // errno from eventfd
    auto* channel = new CompChannel{};
    channel->ibv.context = context;
    channel->ibv.fd = fd;
    channel->ibv.refcnt = 0;
    return &channel->ibv;
  });
}

// ibv_destroy_comp_channel(3): EBUSY while a CQ uses it.
SOFTRDMA_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* ibchannel) {
  return guard_errno([&] {
    CompChannel* channel = to_channel(ibchannel);
    {
      std::lock_guard lock(channel->mutex);
      if (channel->ibv.refcnt > 0) return EBUSY;
    }
    close(channel->ibv.fd);
    delete channel;
    return 0;
  });
}

// ibv_get_cq_event(3): blocks on the channel's fd unless the application made it
// non-blocking (then -1 with EAGAIN); 0 or -1.
SOFTRDMA_EXPORT int ibv_get_cq_event(ibv_comp_channel* ibchannel, ibv_cq** cq_out,
                                     void** cq_context) {
  return guard_minus1([&] {
    CompChannel* channel = to_channel(ibchannel);
    if (!live(ibchannel->context)) {
      errno = EIO;
      return -1;
    }
    for (;;) {
      if (wait_for_event(channel) != 0) return -1;
      Cq* cq = take_cq_event(channel);
      if (cq == nullptr) continue;
      *cq_out = &cq->ibv;
      *cq_context = cq->ibv.cq_context;
      return 0;
    }
  });
}

SOFTRDMA_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_broadcast(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}
