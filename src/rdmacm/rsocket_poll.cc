// rpoll and rselect (rsocket(7)): readiness of rsockets beside ordinary
// descriptors. An rsocket is first looked at without blocking (its CM events,
// its completions); to wait, its CQ is armed and poll(2) sleeps on the CQ's
// completion channel (connected) or on its rdma_cm channel (connecting,
// accepting, listening), together with the other descriptors — no spinning.
#include <poll.h>
#include <sys/select.h>

#include <chrono>
#include <vector>

#include "rdmacm/cm.h"
#include "rdmacm/rsocket.h"

using namespace softrdma::rdmacm::rsock;

namespace {

short connected_events(RSocket& s, short events) {
  short revents = 0;
  if ((events & POLLIN) != 0 && (s.rmsg_head != s.rmsg_tail || !s.readable)) revents |= POLLIN;
  if ((events & POLLOUT) != 0 && (can_send(s) || !s.writable)) revents |= POLLOUT;
  // POLLHUP once nothing is left to read: data the peer sent before its
  // DISCONNECT is read first (TCP, too, reports a peer's FIN as POLLIN).
  if (s.phase == Phase::kDisconnected && s.rmsg_head == s.rmsg_tail) revents |= POLLHUP;
  if (s.phase == Phase::kError) revents |= POLLERR;
  return revents;
}

// What the socket is ready for now; drives a connection in progress.
short poll_socket(RSocket& s, short events) {
  std::unique_lock lock(s.mutex);
  if (s.opening()) drive_connect(s, true);
  switch (s.phase) {
    case Phase::kListening: {
      pollfd p{s.channel->fd, short(events & POLLIN), 0};
      poll(&p, 1, 0);
      return p.revents;
    }
    case Phase::kConnected:
    case Phase::kDisconnected:
    case Phase::kError:
      process_cq(s, lock, true, [](RSocket&) { return true; });
      return connected_events(s, events);
    case Phase::kConnectError:
      return short((events & (POLLIN | POLLOUT)) | POLLERR);
    default:
      return 0;
  }
}

int check_all(pollfd* fds, nfds_t nfds) {
  int count = 0;
  for (nfds_t i = 0; i < nfds; ++i) {
    fds[i].revents = 0;
    if (fds[i].fd < 0) continue;
    if (RSocket* s = lookup(fds[i].fd)) {
      fds[i].revents = poll_socket(*s, fds[i].events);
    } else {
      poll(&fds[i], 1, 0);
    }
    if (fds[i].revents != 0) ++count;
  }
  return count;
}

// The descriptor to sleep on for an rsocket (its CQ armed first), or -1.
int wait_fd(RSocket& s) {
  std::lock_guard lock(s.mutex);
  if (s.connected()) {
    if (!s.cq_armed) arm_cq(s);
    return s.cq_channel->fd;
  }
  if (s.opening() || s.phase == Phase::kListening) return s.channel->fd;
  return -1;
}

// Takes the CQ event that woke the sleep, so the channel's fd is quiet again.
void take_event(RSocket& s) {
  std::lock_guard lock(s.mutex);
  if (!s.cq_armed || s.cq_channel == nullptr) return;
  pollfd p{s.cq_channel->fd, POLLIN, 0};
  if (poll(&p, 1, 0) != 1) return;
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  if (ibv_get_cq_event(s.cq_channel, &cq, &context) == 0) {
    s.cq_armed = false;
    if (++s.unacked_events >= 64) {
      ibv_ack_cq_events(s.cq, s.unacked_events);
      s.unacked_events = 0;
    }
  }
}

}  // namespace

SOFTRDMA_CM_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  if (nfds > 0 && fds == nullptr) return fail(EFAULT);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout);
  std::vector<pollfd> sleep(nfds);
  for (;;) {
    int count = check_all(fds, nfds);
    if (count != 0 || timeout == 0) return count;
    for (nfds_t i = 0; i < nfds; ++i) {
      RSocket* s = fds[i].fd >= 0 ? lookup(fds[i].fd) : nullptr;
      sleep[i] = s != nullptr ? pollfd{wait_fd(*s), POLLIN, 0} : pollfd{fds[i].fd, fds[i].events, 0};
    }
    // Completions that came before the CQs were armed raise no event: look again.
    if ((count = check_all(fds, nfds)) != 0) return count;
    int wait_ms = -1;
    if (timeout > 0) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return 0;
      wait_ms = int(left);
    }
    int ret = poll(sleep.data(), nfds, wait_ms);
    if (ret < 0) return -1;
    for (nfds_t i = 0; i < nfds; ++i) {
      if (sleep[i].revents == 0 || fds[i].fd < 0) continue;
      if (RSocket* s = lookup(fds[i].fd)) take_event(*s);
    }
    if (ret == 0 && timeout > 0 && Clock::now() >= deadline) return check_all(fds, nfds);
  }
}

// rselect: rpoll over the descriptors of the three sets.
SOFTRDMA_CM_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                               timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) return fail(EINVAL);
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds; ++fd) {
    short events = 0;
    if (readfds != nullptr && FD_ISSET(fd, readfds)) events |= POLLIN;
    if (writefds != nullptr && FD_ISSET(fd, writefds)) events |= POLLOUT;
    if (exceptfds != nullptr && FD_ISSET(fd, exceptfds)) events |= POLLPRI;
    if (events != 0) fds.push_back({fd, events, 0});
  }
  int ms = timeout == nullptr ? -1 : int(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000);
  int ret = rpoll(fds.data(), fds.size(), ms);
  if (ret < 0) return ret;
  if (readfds != nullptr) FD_ZERO(readfds);
  if (writefds != nullptr) FD_ZERO(writefds);
  if (exceptfds != nullptr) FD_ZERO(exceptfds);
  int count = 0;
  for (const pollfd& p : fds) {
    if (readfds != nullptr && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0 && (p.events & POLLIN)) {
      FD_SET(p.fd, readfds);
      ++count;
    }
    if (writefds != nullptr && (p.revents & (POLLOUT | POLLERR)) != 0 && (p.events & POLLOUT)) {
      FD_SET(p.fd, writefds);
      ++count;
    }
    if (exceptfds != nullptr && (p.revents & POLLPRI) != 0) {
      FD_SET(p.fd, exceptfds);
      ++count;
    }
  }
  return count;
}
