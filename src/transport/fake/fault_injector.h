// A Transport decorator that impairs any transport (fake or UDP): drops,
// duplicates, reorders, delays and corrupts packets, at random rates (seeded,
// reproducible; fault_settings.h, env SOFTRDMA_FAULTS) or by scripted rule
// (predicate on the packet bytes + action + count), on tx and/or rx.
//
// Semantics (docs/decisions/transport.md):
// - Each packet of an impaired direction draws the same number of pseudo-random
//   numbers from that direction's own generator, whatever the rates: a given seed
//   and packet sequence always gives the same faults, and changing one rate does
//   not move the others' decisions.
// - A scripted rule that matches replaces the random decisions for that packet.
// - Corruption flips one bit *after* the ICRC was computed: on tx as a BitError
//   the injector keeps beside the packet and hands the inner transport with it
//   (tx_burst_with_errors: applied after the ICRC is written);
//   on rx the bit is flipped in the received bytes and the ICRC is checked again
//   with the address information of the RxPacket. Either way an ICRC check drops
//   it and rx_bad_icrc counts it.
// - Delayed and reordered packets are copied and released later: on the next
//   tx_burst/rx_burst once due. rx_fd() is an epoll fd over the inner rx_fd and a
//   timerfd set to the next due time, so a progress loop blocked on it wakes up.
// - tx never pushes back: a packet the inner transport refuses is kept (in order)
//   and retried; beyond kBacklogLimit packets they are dropped, like a switch queue.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "transport/fake/fault_settings.h"
#include "transport/transport.h"

namespace softrdma::transport {

enum class FaultAction : uint8_t { kDrop, kDuplicate, kReorder, kDelay, kCorrupt };

using BytePredicate = std::function<bool(std::span<const uint8_t> udp_payload)>;

struct FaultRule {
  FaultDirection direction = FaultDirection::kTx;
  BytePredicate matches;
  FaultAction action = FaultAction::kDrop;
  size_t count = 1;       // packets it applies to
  uint32_t delay_us = 0;  // kDelay only
};

struct FaultCounters {
  struct Side {
    uint64_t packets = 0;  // seen in this direction
    uint64_t dropped = 0, duplicated = 0, reordered = 0, delayed = 0, corrupted = 0;
    uint64_t backlog_dropped = 0;  // tx: refused by the inner transport, backlog full
  };
  Side tx, rx;
};

class FaultInjector final : public Transport {
 public:
  static constexpr size_t kBacklogLimit = 4096;
  static constexpr uint32_t kReorderHoldUs = 1000;  // a reordered packet's longest wait

  // `now_ns`: CLOCK_MONOTONIC nanoseconds; tests pass a fake clock.
  FaultInjector(std::unique_ptr<Transport> inner, FaultSettings settings,
                std::function<int64_t()> now_ns = {});
  ~FaultInjector() override;

  void add_rule(FaultRule rule);
  FaultCounters fault_counters() const;
  Transport& inner() { return *inner_; }
  size_t pending() const;  // packets held back (delayed, reordered, backlog)

  size_t tx_burst(std::span<TxPacket> packets) override;
  size_t rx_burst(std::span<RxPacket> packets) override;
  int rx_fd() const override { return epoll_fd_; }
  Gid local_gid() const override { return inner_->local_gid(); }
  std::vector<Gid> local_gids() const override { return inner_->local_gids(); }
  bool refresh_addresses() override { return inner_->refresh_addresses(); }
  TransportCounters counters() const override;
  std::string describe() const override;
  uint16_t udp_port() const override { return inner_->udp_port(); }
  int join_group(const Gid& group) override { return inner_->join_group(group); }
  int leave_group(const Gid& group) override { return inner_->leave_group(group); }

 private:
  struct Decision {
    bool drop = false, duplicate = false, reorder = false, corrupt = false;
    int64_t delay_ns = 0;
    uint64_t corrupt_bits = 0;  // picks the byte and the bit
  };
  // A packet copied out of the caller's buffers to be released later.
  struct Held {
    std::vector<uint8_t> bytes;
    TxPacket tx{};  // direction tx: addresses, port
    RxPacket rx{};  // direction rx: addresses, port, solved IPv4 ID
    BitError error{};  // direction tx: the corruption it leaves with (mask 0: none)
  };
  using HeldQueue = std::multimap<int64_t, Held>;  // by due time; equal times FIFO
  // Held back for reordering: released once the next packet has passed, or when due.
  // One constant hold time, so it is sorted by due time too.
  using ReorderQueue = std::deque<std::pair<int64_t, Held>>;

  class Random;
  Decision decide(FaultDirection side, std::span<const uint8_t> bytes);
  Decision decide_by_rule(FaultRule& rule);
  Decision decide_at_random(Random& random);

  void stage_tx(TxPacket& packet, const Decision& d, int64_t now);
  void stage(const TxPacket& packet, const BitError& error);
  BitError staged_error(size_t index) const;
  size_t send_staged();
  void stage_held_tx(Held&& held);
  void send_staged_tx();
  void release_due_tx(int64_t now);
  bool corrupt_rx(RxPacket& packet, uint64_t bits);
  void take_rx(RxPacket& packet, const Decision& d, int64_t now);
  void deliver_held_rx(Held&& held);
  void release_due_rx(int64_t now);
  void arm_timer();

  std::unique_ptr<Transport> inner_;
  const FaultSettings settings_;
  std::function<int64_t()> now_ns_;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;

  mutable std::mutex mutex_;  // guards everything below (tx may come from any thread)
  std::unique_ptr<Random> tx_random_, rx_random_;
  std::vector<FaultRule> rules_;
  FaultCounters counters_;
  uint64_t rx_bad_icrc_ = 0;     // rx-side corruption caught by the re-check
  std::vector<TxPacket> staged_;  // reused: packets for one inner tx_burst
  std::vector<BitError> staged_errors_;  // their corruption (BitError::packet: index)
  std::vector<Held> staged_held_;  // owned bytes staged_ points into, this burst only
  HeldQueue tx_held_, rx_held_;
  ReorderQueue tx_reordered_, rx_reordered_;
  int64_t armed_due_ = 0;  // what timer_fd_ is set to (0: disarmed, -1: unknown)
  std::vector<Held> tx_backlog_;   // refused by the inner transport, in order
  std::vector<RxPacket> inner_rx_;  // reused: the inner rx_burst's packets
  std::vector<RxPacket> rx_ready_;  // reused: what this rx_burst returns
  std::vector<Held> rx_delivered_;  // owned bytes of released rx packets, until next rx_burst
};

// Wraps `inner` in a FaultInjector configured by `settings_text` (SOFTRDMA_FAULTS).
// Returns `inner` itself when the text configures no fault; on a parse error returns
// null with the reason in `error` and leaves `inner` untouched.
std::unique_ptr<Transport> wrap_with_faults(std::unique_ptr<Transport>&& inner,
                                            std::string_view settings_text, std::string& error);

}  // namespace softrdma::transport
