#include "engine/cq.h"

#include <algorithm>
#include <cerrno>

namespace softrdma::engine {

Cq::Cq(uint32_t capacity, CqOptions options)
    : options_(options), ring_(capacity), capacity_(capacity) {}

Cq::Pushed Cq::push(const ibv_wc& wc, bool solicited, Nanos timestamp, TmInfo tm) {
  std::function<void()> fire;
  Pushed pushed = kQueued;
  {
    std::lock_guard lock(mutex_);
    if (count_ == capacity_) {
      if (!options_.ignore_overrun) {
        overrun_.store(true, std::memory_order_relaxed);
        return kLost;
      }
      // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: "CQE always will be written to next
      // entry" (ibv_create_cq_ex(3)); the next entry of a full ring is the oldest.
      head_ = (head_ + 1) % capacity_;
      --count_;
      pushed = kDisplacedOldest;
    }
    ring_[(head_ + count_) % capacity_] = Completion{wc, timestamp, tm};
    ++count_;
    // ibv_req_notify_cq(3): "next" fires on any completion; "solicited" fires on a
    // solicited or an unsuccessful one.
    bool wanted = armed_ == Armed::kNext ||
                  (armed_ == Armed::kSolicited && (solicited || wc.status != IBV_WC_SUCCESS));
    if (wanted && notify_ && batching_) {
      fire_deferred_ = true;
    } else if (wanted && notify_) {
      armed_ = Armed::kNo;
      fire = notify_;
    }
    unannounced_ = !fire;
    if (fire) fired_since_poll_ = true;
  }
  if (fire) fire();
  return pushed;
}

int Cq::poll(int max, ibv_wc* out) {
  if (max <= 0) return 0;  // ibv_poll_cq(3): nothing asked, nothing taken
  std::lock_guard lock(mutex_);
  int n = std::min<int>(max, int(count_));
  unannounced_ = false;  // the application has looked at what is queued
  fired_since_poll_ = false;
  for (int i = 0; i < n; ++i) {
    out[i] = ring_[head_].wc;
    head_ = (head_ + 1) % capacity_;
  }
  count_ -= uint32_t(n);
  return n;
}

bool Cq::pop(Completion& out) {
  std::lock_guard lock(mutex_);
  unannounced_ = false;
  fired_since_poll_ = false;
  if (count_ == 0) return false;
  out = ring_[head_];
  head_ = (head_ + 1) % capacity_;
  --count_;
  return true;
}

void Cq::remove_qp(uint32_t qpn) {
  std::lock_guard lock(mutex_);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    const Completion& c = ring_[(head_ + i) % capacity_];
    if (c.wc.qp_num != qpn) ring_[(head_ + kept++) % capacity_] = c;
  }
  count_ = kept;
}

size_t Cq::depth() const {
  std::lock_guard lock(mutex_);
  return count_;
}

int Cq::resize(uint32_t capacity) {
  std::lock_guard lock(mutex_);
  // ibv_resize_cq(3): at least the unpolled entries; a CQ of no entries is no CQ.
  if (capacity == 0 || capacity < count_) return EINVAL;
  std::vector<Completion> ring(capacity);
  for (uint32_t i = 0; i < count_; ++i) ring[i] = ring_[(head_ + i) % capacity_];
  ring_ = std::move(ring);
  capacity_ = capacity;
  head_ = 0;
  return 0;
}

void Cq::arm(bool solicited_only) {
  std::function<void()> fire;
  {
    std::lock_guard lock(mutex_);
    // IBA 11.4.2.2 (C11-31, C11-32): a pending "next completion" request is not
    // narrowed by a later "solicited only" one; the other way round widens it.
    if (armed_ != Armed::kNext) armed_ = solicited_only ? Armed::kSolicited : Armed::kNext;
    // A "next completion" request made after a poll, while completions wait that
    // came since and no event announced, fires at once, as on mlx4/mlx5 (their arm
    // doorbell carries the consumer index). Programs that poll, arm and sleep
    // rely on it: UCX's ud_verbs does, and here a poll of one CQ runs the engine
    // and may fill another (docs/decisions/ucx.md). A program woken by an event
    // re-arms and then polls (ibv_rc_pingpong -e -t, which takes an event with
    // nothing to poll for an error): its request waits for a new completion.
    if (armed_ == Armed::kNext && count_ > 0 && unannounced_ && !fired_since_poll_ &&
        notify_) {
      unannounced_ = false;
      fired_since_poll_ = true;
      armed_ = Armed::kNo;
      fire = notify_;
    }
  }
  if (fire) fire();
}

void Cq::begin_batch() {
  std::lock_guard lock(mutex_);
  batching_ = true;
}

void Cq::end_batch() {
  std::function<void()> fire;
  {
    std::lock_guard lock(mutex_);
    batching_ = false;
    if (fire_deferred_ && count_ > 0 && armed_ != Armed::kNo && notify_) {
      armed_ = Armed::kNo;
      fired_since_poll_ = true;
      unannounced_ = false;
      fire = notify_;
    }
    fire_deferred_ = false;
  }
  if (fire) fire();
}

}  // namespace softrdma::engine
