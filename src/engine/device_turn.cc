// The device's turn (docs/decisions/threading.md): doorbells, the receive burst,
// timers, completions made visible after the turn's packets, the QPs with output
// waiting. Part of Device, split from device.cc by concern.
#include "engine/device.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "engine/guarded_memory.h"
#include "engine/host/executor.h"
#include "samehost/host.h"
#include "wire/ip_udp.h"

namespace softrdma::engine {

// Engine owner. The QP joins the timer list; the loop is woken if the timer is due
// before anything it waits for.
void Device::arm_timer(Qp& qp, Nanos when) {
  if (!qp.device_links().timed) {
    qp.device_links().timed = true;
    timed_.push_back(&qp);
  }
  Nanos cur = next_deadline_.load(std::memory_order_acquire);
  while (when < cur) {
    if (next_deadline_.compare_exchange_weak(cur, when, std::memory_order_acq_rel)) {
      if (wakeup_) wakeup_();
      return;
    }
  }
}

bool Device::progress_held(Turner who) {
  bool worked = false;
  // As progress(): a doorbell rung during the turn is served before leaving.
  do {
    worked |= turn(true, who);
  } while (doorbells_.load(std::memory_order_seq_cst) != nullptr);
  return worked;
}

bool Device::progress(Turner who) {
  bool worked = false;
  // A doorbell rung while this thread held the engine found it busy: serve it
  // before leaving, or it would wait for the next turn of whoever comes next.
  do {
    std::unique_lock engine(engine_mutex_, std::try_to_lock);
    if (!engine.owns_lock()) return worked;
    worked |= turn(true, who);
  } while (doorbells_.load(std::memory_order_seq_cst) != nullptr);
  return worked;
}

void Device::ring_doorbell_from_engine(Qp& qp) {
  // IBA-free plumbing: a lock-free stack push, done at most once until served.
  if (!qp.device_links().doorbell_rung.exchange(true, std::memory_order_acq_rel)) {
    Qp* head = doorbells_.load(std::memory_order_relaxed);
    do {
      qp.device_links().doorbell_next = head;
    } while (!doorbells_.compare_exchange_weak(head, &qp, std::memory_order_release,
                                               std::memory_order_relaxed));
  }
}

void Device::ring_doorbell(Qp& qp) {
  ring_doorbell_from_engine(qp);
  do {
    std::unique_lock engine(engine_mutex_, std::try_to_lock);
    if (!engine.owns_lock()) return;  // the owner serves it before it lets go
    turn(false);
  } while (doorbells_.load(std::memory_order_seq_cst) != nullptr);
}

// Engine owner: the QPs whose doorbell rang, oldest first.
bool Device::serve_doorbells(Nanos now) {
  Qp* stack = doorbells_.exchange(nullptr, std::memory_order_acquire);
  if (stack == nullptr) return false;
  Qp* fifo = nullptr;
  while (stack != nullptr) {
    Qp* next = stack->device_links().doorbell_next;
    stack->device_links().doorbell_next = fifo;
    fifo = stack;
    stack = next;
  }
  for (Qp* qp = fifo; qp != nullptr;) {
    Qp* next = qp->device_links().doorbell_next;
    // Cleared before serving, as an exchange: it synchronises with the poster's
    // exchange, so whatever it published before ringing is seen now, and a post
    // after this point rings again.
    qp->device_links().doorbell_rung.exchange(false, std::memory_order_acq_rel);
    qp->serve_doorbell(now);
    qp = next;
  }
  return true;
}

// The loop reads every turn (it runs when a socket is readable, or spins briefly
// after work); so does a poller while the wire carries traffic, and before timers
// (issue 14 defect 3: the ACK that answers a deadline may be waiting).
bool Device::socket_check_due(Turner who, Nanos now, bool timers_due) const {
  if (who == Turner::kLoop || timers_due) return true;
  return !wire_quiet(now) || now - last_rx_check_ >= kQuietSocketCheck;
}

// One turn of the engine's owner. `receive`: also take a receive burst (pollers
// and the loop do; a posting thread only sends what it posted).
bool Device::turn(bool receive, Turner who) {
  const Nanos now = clock_.now();
  staging_ = true;
  bool worked = serve_doorbells(now);
  worked |= take_peer_faults(now);
  worked |= take_host_notices(now);
  // A timer is due: take first what has already arrived. A process that was
  // descheduled past a deadline finds the ACK that answers it waiting in its own
  // socket, possibly behind a burst of other packets; firing the timer before
  // reading it retransmits what the peer has (issue 14 defect 3).
  const bool timers_due = now >= next_deadline_.load(std::memory_order_acquire);
  const int bursts = timers_due ? kBurstsBeforeTimers : 1;
  if (receive && socket_check_due(who, now, timers_due)) {
    last_rx_check_ = now;
    const bool got = family_->receive(now, bursts);
    if (got) last_rx_packet_.store(now, std::memory_order_relaxed);
    worked |= got;
  }
  if (timers_due) worked |= run_timers(now);
  if (receive) worked |= serve_busy(now);
  family_->flush();
  publish_staged();
  return worked;
}

// A completion is visible only once the packets its turn produced have left: the
// ACK of a received SEND or WRITE with immediate goes before the application can
// see the message (as an RNIC acknowledges on reception, whatever the process does),
// so a receiver that exits right after its last poll has already acknowledged.
// The timestamp is the time of generation, not of visibility: a software device's
// "completion timestamp" is when its engine wrote the completion, as an RNIC's is
// when it wrote the CQE (ibv_create_cq_ex(3) IBV_WC_EX_WITH_COMPLETION_TIMESTAMP).
void Device::complete(Cq& cq, const ibv_wc& wc, bool solicited, TmInfo tm) {
  const Nanos timestamp = cq.options().timestamps ? clock_.now() : 0;
  if (staging_) {
    staged_.push_back({&cq, wc, solicited, timestamp, tm});
    return;
  }
  push_completion(cq, wc, solicited, timestamp, tm);
}

void Device::publish_staged() {
  staging_ = false;
  for (const StagedCompletion& c : staged_)
    push_completion(*c.cq, c.wc, c.solicited, c.timestamp, c.tm);
  staged_.clear();
}

// IBA 11.4.2.1: a completion that does not fit is lost and the CQ is in error;
// the first overrun raises IBV_EVENT_CQ_ERR. A CQ that ignores overruns loses its
// oldest completion instead, silently but counted.
void Device::push_completion(Cq& cq, const ibv_wc& wc, bool solicited, Nanos timestamp,
                             TmInfo tm) {
  const bool was_in_error = cq.in_error();
  switch (cq.push(wc, solicited, timestamp, tm)) {
    case Cq::kQueued: return;
    case Cq::kDisplacedOldest: bump(counters_.cq_overruns); return;
    case Cq::kLost:
      bump(counters_.cq_overruns);
      if (!was_in_error) post_async_event(AsyncEvent{IBV_EVENT_CQ_ERR, 0, &cq});
      return;
  }
}

void Device::want_tx(Qp& qp) {
  if (qp.device_links().busy) return;
  qp.device_links().busy = true;
  busy_.push_back(&qp);
}

// One burst for each QP with output queued, so that no QP's large response (a READ
// of megabytes) holds the engine while others wait (round robin over turns).
bool Device::serve_busy(Nanos now) {
  if (busy_.empty()) return false;
  for (size_t i = 0; i < busy_.size();) {
    Qp* qp = busy_[i];
    if (qp->protocol().on_tx_ready(now, kTxBurstPerQp)) {
      ++i;
      continue;
    }
    qp->device_links().busy = false;
    busy_[i] = busy_.back();
    busy_.pop_back();
  }
  return true;
}

// Engine owner: runs the due timers of the QPs that have any and recomputes the
// earliest deadline; QPs with no timer left leave the list (cost: QPs with timers,
// not all QPs).
bool Device::run_timers(Nanos now) {
  next_deadline_.store(kNever, std::memory_order_release);
  Nanos earliest = kNever;
  for (size_t i = 0; i < timed_.size();) {
    Qp* qp = timed_[i];
    if (qp->protocol().deadline() <= now) qp->protocol().on_timer(now);
    const Nanos due = qp->protocol().deadline();
    if (due == kNever) {
      qp->device_links().timed = false;
      timed_[i] = timed_.back();
      timed_.pop_back();
      continue;
    }
    earliest = std::min(earliest, due);
    ++i;
  }
  Nanos cur = next_deadline_.load(std::memory_order_acquire);
  while (earliest < cur &&
         !next_deadline_.compare_exchange_weak(cur, earliest, std::memory_order_acq_rel)) {
  }
  return true;
}

}  // namespace softrdma::engine
