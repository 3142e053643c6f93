// Completion queue (IBA 11.4.2): a bounded ring of work completions. Producers are
// the QPs' roles (under their QP lock); consumers poll. Overrun is a CQ error
// (IBA 11.4.2.1), reported as an async event and counted, never a crash.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace softrdma::engine {

class Cq {
 public:
  explicit Cq(uint32_t capacity);

  // False when the queue was full: the completion is lost and the CQ is in error.
  // `solicited`: the message carried the Solicited Event bit (IBA 9.2.1).
  bool push(const ibv_wc& wc, bool solicited = false);
  int poll(int max, ibv_wc* out);
  // Removes the completions of QP `qpn` not yet polled, keeping the others' order
  // (a QP returned to Reset, as RDMA NICs' providers clean their CQs then).
  void remove_qp(uint32_t qpn);
  uint32_t capacity() const { return capacity_; }
  int resize(uint32_t capacity);
  size_t depth() const;
  bool in_error() const { return overrun_.load(std::memory_order_relaxed); }

  // Completion notification (ibv_req_notify_cq): armed once, fires once; a
  // request for the next completion fires at once if completions wait unpolled.
  void arm(bool solicited_only);
  // Called (outside the CQ lock) when an armed notification fires.
  void set_notify(std::function<void()> fn) { notify_ = std::move(fn); }

  std::atomic<uint32_t> users{0};  // QPs bound to this CQ

 private:
  mutable std::mutex mutex_;
  std::vector<ibv_wc> ring_;
  uint32_t capacity_;
  uint32_t head_ = 0;  // next to poll
  uint32_t count_ = 0;
  std::atomic<bool> overrun_{false};
  enum class Armed : uint8_t { kNo, kNext, kSolicited };
  Armed armed_ = Armed::kNo;
  std::function<void()> notify_;
};

}  // namespace softrdma::engine
