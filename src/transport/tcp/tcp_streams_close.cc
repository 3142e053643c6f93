// How TcpStreams ends a connection (stream.h, CloseMode).
//
// Always with a FIN, never a reset (a live stream resets only when its process
// dies: tcp_streams.cc, reset_if_abandoned): closing a socket that holds unread bytes, or
// that bytes reach afterwards, makes the kernel answer with a RST, and a peer
// reset while its last SEND is in flight fails that SEND. So what still arrives is
// read and dropped until the peer's FIN (or the linger's end), and only then is the
// socket closed.
//
// And, for a disconnect (kAfterPeer), not before the peer is done sending: Linux
// siw fails a SEND whose bytes it already wrote when the peer's FIN arrives before
// it has looked at the result (siw_qp_tx.c, siw_qp_sq_proc_tx: `tx_suspend` is
// tested before DDP_FLAG_LAST), so the last message of an exchange that ends with
// "both sides disconnect" (perftest's closing handshake) fails at random on a slow
// host. The RDMAP specification does not fix when a graceful close reaches the
// LLP; this one sends the FIN once the peer has sent its own, or has
// been quiet for a while (CloseTiming: 100 ms), or at the linger's end (2 s). The
// cost: a peer that waits for our FIN before it closes sees it 100 ms late.
//
// A process that exits right after its disconnect (perftest does) would have the
// kernel send the FIN at once, and reset a connection whose socket holds unread
// bytes, throwing away what it had still to send: exit() waits, at most the
// linger, while the progress thread ends its closing streams as above
// (CloseTiming::exit_waits).
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <cerrno>
#include <climits>

#include "transport/tcp/tcp_streams.h"

namespace softrdma::transport::tcp {

namespace {

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Closing streams that a thread drives, in the whole process, and when the
// last of their lingers ends.
std::atomic<uint32_t> closings{0};
std::atomic<int64_t> closings_until{0};

// atexit: the progress threads still run; they end the closing streams meanwhile.
void wait_for_closings() {
  while (closings.load(std::memory_order_acquire) > 0 &&
         monotonic_ns() < closings_until.load(std::memory_order_relaxed))
    usleep(1000);
}

}  // namespace

void TcpStreams::count_closing(Closing& c, int64_t now) {
  if (!timing_.exit_waits) return;
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(wait_for_closings); });
  c.counted = true;
  closings.fetch_add(1, std::memory_order_release);
  const int64_t end = now + timing_.linger_ns;
  int64_t until = closings_until.load(std::memory_order_relaxed);
  while (until < end && !closings_until.compare_exchange_weak(until, end)) {
  }
}

void TcpStreams::close_now(std::map<int, Closing>::iterator it) {
  if (it->second.counted) closings.fetch_sub(1, std::memory_order_release);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
  ::close(it->first);
  closing_.erase(it);
}

void TcpStreams::close(StreamId stream, CloseMode mode) {
  auto it = connections_.find(stream);
  if (it == connections_.end()) return;
  const Connection c = it->second;
  connections_.erase(it);
  reset_if_abandoned(c.fd, false);  // from here on every end is a FIN
  if (c.want_writable) --wanting_room_;
  if (c.connecting) {  // nothing was said on it: nothing to lose
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = kClosingTag | uint32_t(c.fd);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  const int64_t now = monotonic_ns();
  Closing& closing = closing_[c.fd];
  closing.quiet_until = now + timing_.quiet_ns;
  closing.fin_by = now + timing_.linger_ns;
  count_closing(closing, now);
  if (mode == CloseMode::kNow) send_fin(c.fd, closing, now);
  drain_closing(c.fd);
  arm_closing_timer();
}

// A shutdown that fails (the connection already broke) leaves nothing to wait for.
void TcpStreams::send_fin(int fd, Closing& c, int64_t now) {
  c.fin_sent = true;
  c.close_by = ::shutdown(fd, SHUT_WR) == 0 ? now + timing_.linger_ns : now;
}

// Reads and drops what a closing stream still receives; closes it at its end (the
// peer's FIN: ours, if not yet sent, leaves with the close, nothing being unread).
void TcpStreams::drain_closing(int fd) {
  auto it = closing_.find(fd);
  if (it == closing_.end()) return;
  std::array<uint8_t, 4096> scratch;
  bool heard = false;
  for (;;) {
    const ssize_t n = ::recv(fd, scratch.data(), scratch.size(), MSG_DONTWAIT);
    if (n > 0) {
      heard = true;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (heard) it->second.quiet_until = monotonic_ns() + timing_.quiet_ns;
      return;
    }
    break;  // the peer's FIN, or the connection broke
  }
  close_now(it);
}

// The FINs whose wait is over leave; the sockets whose linger is over close.
void TcpStreams::expire_closing() {
  if (closing_.empty()) return;
  const int64_t now = monotonic_ns();
  for (auto it = closing_.begin(); it != closing_.end();) {
    Closing& c = it->second;
    if (c.due() > now) {
      ++it;
    } else if (!c.fin_sent) {
      send_fin(it->first, c, now);
      if (c.close_by > now) ++it;  // else (no connection left): closed on the next pass
    } else {
      close_now(it++);
    }
  }
  arm_closing_timer();
}

// The timer makes epoll_fd_ (rx_fd) readable at the earliest due(), so the
// engine's loop, asleep on it, turns then; disarmed when nothing is closing.
void TcpStreams::arm_closing_timer() {
  int64_t earliest = INT64_MAX;
  for (const auto& [fd, c] : closing_) earliest = std::min(earliest, c.due());
  itimerspec spec{};
  if (earliest != INT64_MAX) {
    earliest = std::max<int64_t>(earliest, 1);  // 0 would disarm it
    spec.it_value.tv_sec = earliest / 1'000'000'000;
    spec.it_value.tv_nsec = earliest % 1'000'000'000;
  }
  ::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

// The destructor's: the FINs still held wait for their peers (at most the linger);
// then every closing socket closes after a last drain.
void TcpStreams::finish_closing() {
  std::array<epoll_event, 64> ready;
  for (;;) {
    expire_closing();
    int64_t next = INT64_MAX;
    for (const auto& [fd, c] : closing_)
      if (!c.fin_sent) next = std::min(next, c.due());
    if (next == INT64_MAX) break;
    const int64_t wait_ms = std::max<int64_t>((next - monotonic_ns()) / 1'000'000 + 1, 0);
    const int got = ::epoll_wait(epoll_fd_, ready.data(), int(ready.size()), int(wait_ms));
    for (int i = 0; i < got; ++i) {
      const uint64_t tag = ready[i].data.u64;
      uint64_t expirations;
      if (tag == kTimerTag) (void)!::read(timer_fd_, &expirations, sizeof expirations);
      if ((tag & kClosingTag) != 0) drain_closing(int(uint32_t(tag)));
    }
  }
  while (!closing_.empty()) {
    const int fd = closing_.begin()->first;
    drain_closing(fd);
    auto it = closing_.find(fd);
    if (it != closing_.end()) close_now(it);
  }
}

}  // namespace softrdma::transport::tcp
