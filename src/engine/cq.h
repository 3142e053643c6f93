// Completion queue (IBA 11.4.2): a bounded ring of work completions. Producers are
// the QPs' roles (under their QP lock); consumers poll. Overrun is a CQ error
// (IBA 11.4.2.1), reported as an async event and counted, never a crash — unless
// the CQ was created to ignore overruns (ibv_create_cq_ex(3)
// IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "engine/clock.h"

namespace softrdma::engine {

// What a CQ is asked for at creation (ibv_create_cq_ex(3)).
struct CqOptions {
  // Each completion carries the device clock's time at which it was generated
  // (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP[_WALLCLOCK]); without it nobody reads
  // the clock for this CQ.
  bool timestamps = false;
  // A completion that finds the ring full takes the oldest one's place: the CQ
  // never enters error (IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN).
  bool ignore_overrun = false;
};

// What a tag-matching receive completion tells beyond the ibv_wc: the TMH's tag
// and app_ctx (ibv_wc_read_tm_info(3)); zero for every other completion.
struct TmInfo {
  uint64_t tag = 0;
  uint32_t priv = 0;
};

// One entry of the ring: the work completion and when it was generated (device
// clock, Device::clock(); 0 unless CqOptions::timestamps).
struct Completion {
  ibv_wc wc;
  Nanos timestamp;
  TmInfo tm{};
};

class Cq {
 public:
  explicit Cq(uint32_t capacity, CqOptions options = {});

  // What became of a pushed completion. kLost is 0: `if (cq.push(...))` reads
  // "if it was queued".
  enum Pushed : uint8_t {
    kLost = 0,         // the ring was full: the completion is lost, the CQ in error
    kQueued,           // appended
    kDisplacedOldest,  // full and ignoring overruns: appended, the oldest dropped
  };
  // `solicited`: the message carried the Solicited Event bit (IBA 9.2.1).
  Pushed push(const ibv_wc& wc, bool solicited = false, Nanos timestamp = 0, TmInfo tm = {});
  int poll(int max, ibv_wc* out);
  // Takes the oldest completion with its timestamp; false when the CQ is empty
  // (the extended CQ's start_poll/next_poll).
  bool pop(Completion& out);
  // Removes the completions of QP `qpn` not yet polled, keeping the others' order
  // (a QP returned to Reset, as RDMA NICs' providers clean their CQs then).
  void remove_qp(uint32_t qpn);
  uint32_t capacity() const { return capacity_; }
  int resize(uint32_t capacity);
  size_t depth() const;
  bool in_error() const { return overrun_.load(std::memory_order_relaxed); }
  const CqOptions& options() const { return options_; }

  // Completion notification (ibv_req_notify_cq): armed once, fires once; a
  // request for the next completion fires at once if completions wait unpolled.
  void arm(bool solicited_only);
  // Called (outside the CQ lock) when an armed notification fires.
  void set_notify(std::function<void()> fn) { notify_ = std::move(fn); }
  // An extended CQ's poll batch (ibv_start_poll .. ibv_end_poll) is open: a
  // notification due meanwhile waits for its end and fires only if what it
  // announces is still there. A completion the batch itself polled announces
  // nothing: the application has it, and an event for it would send the
  // application to a CQ found empty (ibv_rc_pingpong -e -t takes that as an error).
  void begin_batch();
  void end_batch();

  std::atomic<uint32_t> users{0};  // QPs bound to this CQ

 private:
  const CqOptions options_;
  mutable std::mutex mutex_;
  std::vector<Completion> ring_;
  uint32_t capacity_;
  uint32_t head_ = 0;  // next to poll
  uint32_t count_ = 0;
  std::atomic<bool> overrun_{false};
  enum class Armed : uint8_t { kNo, kNext, kSolicited };
  Armed armed_ = Armed::kNo;
  // Completions came that no notification announced and no poll has seen since.
  bool unannounced_ = false;
  bool fired_since_poll_ = false;  // a notification fired since the last poll
  bool batching_ = false;          // begin_batch .. end_batch
  bool fire_deferred_ = false;     // a notification came due while batching_
  std::function<void()> notify_;
};

}  // namespace softrdma::engine
