// SO_KEEPALIVE for rsockets, as rdma-core's rsocket.c does it (its tcp_svc
// thread): every keepalive time (TCP_KEEPIDLE, seconds; by default the host's
// net.ipv4.tcp_keepalive_time) a connected rsocket with the option on sends a
// zero-length RDMA WRITE WITH IMMEDIATE carrying the control message KEEPALIVE,
// which the peer takes and ignores. Against a peer that is gone the WRITE is
// never acknowledged: the QP exhausts its retries (IBA 9.7.6.1.3), the WRITE
// completes with IBV_WC_RETRY_EXC_ERR and the stream ends with ECONNRESET, which
// wakes a thread blocked in rrecv, rsend or rpoll (docs/decisions/rsockets.md).
//
// One thread serves every such rsocket, started with the first and ended with the
// last. It never holds its own lock while it takes a socket's (rsetsockopt holds
// the socket's lock while it adds or changes an entry).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "rdmacm/rsocket.h"

namespace softrdma::rdmacm::rsock {
namespace {

using Clock = std::chrono::steady_clock;

struct KeepaliveService {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<RSocket*, Clock::time_point> due;  // guarded by mutex
  RSocket* sending = nullptr;                 // being sent on, outside mutex
  bool running = false;
};

KeepaliveService& service() {
  static auto* s = new KeepaliveService;  // outlives exit's destructors (a thread may run)
  return *s;
}

// tcp_svc_send_keepalive: only on a connected socket with a control slot free
// (at most kCtrlSlots control messages in flight); otherwise skipped this time.
void send_keepalive(RSocket& s) {
  std::lock_guard lock(s.mutex);
  if (s.connected() && s.ctrl_seqno != s.ctrl_max_seqno) post_keepalive(s);
}

void run() {
  KeepaliveService& svc = service();
  std::unique_lock lock(svc.mutex);
  while (!svc.due.empty()) {
    auto next = svc.due.begin();
    for (auto it = svc.due.begin(); it != svc.due.end(); ++it)
      if (it->second < next->second) next = it;
    // A copy: wait_until reads its deadline again after waking, and the entry may
    // be erased meanwhile (the socket closed) — ASan caught the reference.
    const Clock::time_point deadline = next->second;
    if (Clock::now() < deadline) {
      svc.changed.wait_until(lock, deadline);
      continue;
    }
    RSocket* s = next->first;
    next->second = Clock::now() + std::chrono::seconds(s->keepalive_time);
    svc.sending = s;
    lock.unlock();
    send_keepalive(*s);
    lock.lock();
    svc.sending = nullptr;
    svc.changed.notify_all();
  }
  svc.running = false;
}

unsigned host_keepalive_time() {
  unsigned seconds = 7200;  // rsocket.c's fallback, TCP's default
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r")) {
    if (std::fscanf(f, "%u", &seconds) != 1) seconds = 7200;
    std::fclose(f);
  }
  return seconds;
}

}  // namespace

// Under the socket's lock.
int set_keepalive(RSocket& s, bool on) {
  KeepaliveService& svc = service();
  std::lock_guard lock(svc.mutex);
  if (on == s.keepalive) return 0;
  s.keepalive = on;
  if (!on) {
    svc.due.erase(&s);
    return 0;
  }
  if (s.keepalive_time == 0) s.keepalive_time = host_keepalive_time();
  svc.due[&s] = Clock::now() + std::chrono::seconds(s.keepalive_time);
  if (!svc.running) {
    svc.running = true;
    std::thread(run).detach();
  }
  svc.changed.notify_all();
  return 0;
}

// TCP_KEEPIDLE, under the socket's lock: the next keepalive is one new period away.
void set_keepalive_time(RSocket& s, unsigned seconds) {
  KeepaliveService& svc = service();
  std::lock_guard lock(svc.mutex);
  s.keepalive_time = seconds;
  auto it = svc.due.find(&s);
  if (it == svc.due.end()) return;
  it->second = Clock::now() + std::chrono::seconds(seconds);
  svc.changed.notify_all();
}

// Before the socket is freed, without its lock: the thread is not using it after.
void forget_keepalive(RSocket& s) {
  KeepaliveService& svc = service();
  std::unique_lock lock(svc.mutex);
  svc.due.erase(&s);
  svc.changed.notify_all();
  svc.changed.wait(lock, [&] { return svc.sending != &s; });
}

}  // namespace softrdma::rdmacm::rsock
