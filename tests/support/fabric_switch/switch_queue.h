// The output queue of a switch port, as a model (docs/decisions/fabric-switch.md):
// a link of a given rate draining a FIFO of a given depth, packets beyond it
// dropped (drop-tail), and ECN marking at a queue threshold as a data-centre
// switch does it (RED/ECN with Kmin = Kmax, DCTCP's and DCQCN's step marking):
// an ECN-capable packet that arrives while the queue holds at least the
// threshold leaves marked CE (RFC 3168). No qdisc of this kernel marks (tbf, htb
// and fifo only), so the test bed's bottleneck is this model, fed and drained
// through NFQUEUE (fabric_switch.cc). Pure: packets and times in, decisions out.
#pragma once

#include <cstdint>
#include <deque>

namespace softrdma::fabric {

using Nanos = int64_t;
inline constexpr Nanos kNoDeparture = INT64_MAX;

struct PortConfig {
  uint64_t rate_bits_per_s = 1'000'000'000;
  uint64_t buffer_bytes = 128 << 10;
  // CE-mark ECN-capable arrivals while the queue holds this many bytes; 0: never
  // (a drop-tail port, as tbf is).
  uint64_t mark_bytes = 0;
};

enum class Verdict { kDrop, kQueue, kQueueMarked };

struct PortStats {
  uint64_t arrived = 0, arrived_bytes = 0;
  uint64_t dropped = 0, marked = 0, departed = 0;
  uint64_t max_queue_bytes = 0;
};

class SwitchPort {
 public:
  explicit SwitchPort(const PortConfig& config) : config_(config) {}

  // A packet of `bytes` arrives at `now`; `ect`: its ECN field says ECN-capable.
  // Queued packets leave in arrival order at the link's rate.
  Verdict arrive(uint32_t bytes, bool ect, Nanos now);
  // When the oldest queued packet has been sent on the link (kNoDeparture: none).
  Nanos head_departure() const { return queue_.empty() ? kNoDeparture : queue_.front().departure; }
  // The oldest packet leaves.
  void depart();

  uint64_t queue_bytes() const { return queue_bytes_; }
  const PortStats& stats() const { return stats_; }

 private:
  struct Queued {
    uint32_t bytes;
    Nanos departure;
  };
  PortConfig config_;
  std::deque<Queued> queue_;
  uint64_t queue_bytes_ = 0;
  Nanos link_free_at_ = 0;  // when the link finishes what it was given
  PortStats stats_;
};

}  // namespace softrdma::fabric
