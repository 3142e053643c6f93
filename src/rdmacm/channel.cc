// Event channels and events: rdma_create_event_channel(3),
// rdma_destroy_event_channel(3), rdma_get_cm_event(3), rdma_ack_cm_event(3),
// rdma_event_str(3).
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <memory>

#include "rdmacm/cm.h"

namespace softrdma::rdmacm {

Event* new_event(CmId& id, rdma_cm_event_type type, int status) {
  auto event = std::make_unique<Event>();
  event->ibv.id = &id.ibv;
  event->ibv.event = type;
  event->ibv.status = status;
  return event.release();
}

void consume_tokens(EventChannel& channel, int count) {
  // Only bytes already there: one missing was taken by a reader that will find
  // no event for it and read again (take_event).
  for (int i = 0; i < count; ++i) {
    pollfd readable{channel.ibv.fd, POLLIN, 0};
    char token;
    if (poll(&readable, 1, 0) != 1 || read(channel.ibv.fd, &token, 1) != 1) return;
  }
}

void post(CmId& id, Event* event) {
  EventChannel& channel = *id.channel;
  {
    std::lock_guard lock(channel.mutex);
    channel.queue.push_back(event);
    ++id.events_outstanding;
  }
  // One byte per event: the reader takes the byte, then the event. A full pipe
  // (65 536 unread events) would block here; the count cannot get there
  // because each id has a handful of events at most before it is acknowledged.
  const char token = 0;
  while (write(channel.write_fd, &token, 1) < 0 && errno == EINTR) {
  }
}

namespace {

// rdma_destroy_event_channel(3) while a thread is blocked in rdma_get_cm_event
// on it (rping's event thread, when its main thread ends): with the kernel's
// device the read stays blocked until the process exits, and so does this one.
// Returning an error instead would make such programs exit with a failure (rping
// calls exit() on it).
[[noreturn]] void wait_forever() {
  for (;;) poll(nullptr, 0, -1);
}

// Takes the next event: blocks in read(2) unless the application made the fd
// non-blocking (then EAGAIN, as rdma_get_cm_event(3) answers).
int take_event(EventChannel& channel, Event*& out) {
  for (;;) {
    if (channel.destroyed.load(std::memory_order_acquire)) wait_forever();
    char token;
    ssize_t n = read(channel.ibv.fd, &token, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) wait_forever();  // the channel was destroyed under this reader
    if (n != 1) return errno;
    std::lock_guard lock(channel.mutex);
    // Empty: the byte was an event's that rdma_destroy_id dropped; wait for the next.
    if (channel.queue.empty()) continue;
    out = channel.queue.front();
    channel.queue.pop_front();
    return 0;
  }
}

void release(Event* event) {
  CmId& id = *to_id(event->ibv.id);
  EventChannel& channel = *id.channel;
  {
    std::lock_guard lock(channel.mutex);
    --id.events_outstanding;
  }
  id.events_acked.notify_all();
  delete event;
}

}  // namespace

uint32_t random_psn() {
  uint32_t psn = 0;
  if (getrandom(&psn, sizeof psn, 0) != sizeof psn) psn = uint32_t(uintptr_t(&psn));
  return psn & 0xffffff;
}

int complete_synchronously(CmId& id) {
  Event* event = nullptr;
  if (int err = take_event(*id.channel, event)) return err;
  const int status = event->ibv.status;
  const rdma_cm_event_type type = event->ibv.event;
  const bool failed = status != 0 || (type != RDMA_CM_EVENT_ADDR_RESOLVED &&
                                      type != RDMA_CM_EVENT_ROUTE_RESOLVED &&
                                      type != RDMA_CM_EVENT_ESTABLISHED);
  release(event);
  if (!failed) return 0;
  // A REJECTED event's status is the REJ's reason, not an errno: the call fails
  // with ECONNREFUSED, as rdma-core's synchronous calls do.
  if (type == RDMA_CM_EVENT_REJECTED || status == 0) return ECONNREFUSED;
  return status < 0 ? -status : status;
}

}  // namespace softrdma::rdmacm

using namespace softrdma::rdmacm;

SOFTRDMA_CM_EXPORT rdma_event_channel* rdma_create_event_channel() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* channel = new (std::nothrow) EventChannel;
  if (channel == nullptr) {
    close(fds[0]);
    close(fds[1]);
    errno = ENOMEM;
    return nullptr;
  }
  channel->ibv.fd = fds[0];
  channel->write_fd = fds[1];
  return &channel->ibv;
}

// rdma_destroy_event_channel(3): "All rdma_cm_id's associated with the event
// channel must be destroyed, and all returned events must be acked before
// calling this function." The function returns void; a channel still in use is
// left alone (a leak rather than a use after free).
//
// A channel read after its destruction: rping (rdma-core 44, Debian 12's) acks
// its last event on its event thread, which loops back into rdma_get_cm_event
// while the main thread destroys the channel and exits. Closing the fd and
// freeing the channel there made that late call read a closed (or reused) fd or
// freed memory: rping then exits 255 on EBADF after every ping succeeded, or
// worse. So destruction closes only the pipe's write end (a reader then sees
// end-of-file and waits, as one blocked on the kernel's device does until the
// process exits) and keeps the channel, read end included, among the last
// kDestroyedChannelsKept destroyed; the oldest is freed when another joins.
namespace {
constexpr size_t kDestroyedChannelsKept = 8;

void retire(EventChannel* channel) {
  // Never destroyed: a late reader may still run while the process exits.
  struct Retired {
    std::mutex mutex;
    std::deque<EventChannel*> oldest_first;
  };
  static auto* retired = new Retired;
  EventChannel* oldest = nullptr;
  {
    std::lock_guard lock(retired->mutex);
    retired->oldest_first.push_back(channel);
    if (retired->oldest_first.size() <= kDestroyedChannelsKept) return;
    oldest = retired->oldest_first.front();
    retired->oldest_first.pop_front();
  }
  close(oldest->ibv.fd);
  delete oldest;
}
}  // namespace

SOFTRDMA_CM_EXPORT void rdma_destroy_event_channel(rdma_event_channel* ibv) {
  if (ibv == nullptr) return;
  EventChannel* channel = to_channel(ibv);
  {
    std::lock_guard lock(channel->mutex);
    if (channel->ids != 0) return;
  }
  channel->destroyed.store(true, std::memory_order_release);
  close(channel->write_fd);
  channel->write_fd = -1;
  retire(channel);
}

SOFTRDMA_CM_EXPORT int rdma_get_cm_event(rdma_event_channel* ibv, rdma_cm_event** event) {
  return guard([&] {
    if (ibv == nullptr || event == nullptr) return EINVAL;
    Event* taken = nullptr;
    if (int err = take_event(*to_channel(ibv), taken)) return err;
    *event = &taken->ibv;
    return 0;
  });
}

SOFTRDMA_CM_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  return guard([&] {
    if (event == nullptr) return EINVAL;
    release(reinterpret_cast<Event*>(event));
    return 0;
  });
}

SOFTRDMA_CM_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}
