// An in-memory network for unit tests (DESIGN.md §8, after eRPC's fake transport).
//
// Several FakeTransports attach to one FakeNetwork, each with its own GID. A packet
// sent is copied, logged, and (unless a scripted rule says otherwise) queued at
// once on its destination: deterministic, no threads, no timing. Tests script
// faults by predicate ("drop the next packet with PSN 5", "hold every ACK, then
// release them reversed") and read what was sent like a story:
//
//   auto sent = net.take_sent();
//   ASSERT_EQ(sent.size(), 1u);                     // expect: one ACK with PSN 5
//   EXPECT_EQ(sent[0].opcode(), wire::op::kRcAcknowledge);
//   EXPECT_EQ(sent[0].psn(), 5u);
//
// Like a real RoCEv2 network the fake carries the ICRC: tx writes it (IPv4 ID 0, DF,
// the port the packet names), rx checks it and drops and counts a bad one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "wire/packet.h"

namespace softrdma::transport::fake {

// What the network did with a packet.
// kMarked: delivered with ECN Congestion Experienced set, as a congested queue
// marks an ECN-capable packet (RxPacket::congestion_experienced).
enum class Fate : uint8_t { kDelivered, kDropped, kHeld, kDuplicated, kUndeliverable, kMarked };
std::string_view to_string(Fate fate);

// One packet on the fake network; owns its bytes (whole UDP payload, ICRC included).
struct FakePacket {
  std::vector<uint8_t> bytes;
  Gid src{};
  Gid dst{};
  uint16_t src_port = 0;
  uint64_t sequence = 0;  // order in which the network saw it sent, from 0
  Fate fate = Fate::kDelivered;
  bool congestion_experienced = false;  // arrives marked CE
  int64_t arrival_ns = 0;  // when it reached the host, as the receiver tells (RxPacket)

  // BTH fields (IBA 9.2). Every packet on the network holds at least BTH + ICRC.
  uint8_t opcode() const { return bytes[0]; }
  uint32_t psn() const { return uint32_t(view().get(wire::bth::kPsn)); }
  uint32_t dest_qp() const { return uint32_t(view().get(wire::bth::kDestQp)); }
  bool ack_req() const { return view().get(wire::bth::kAckReq) != 0; }
  // A view for reading further headers (AETH, RETH ...) by field.
  wire::PacketView view() const;
  // "RC_ACKNOWLEDGE qp=0x000011 psn=5 (60 B)" for test failure messages.
  std::string summary() const;
};

using PacketMatcher = std::function<bool(const FakePacket&)>;

// Matchers for the scripted rules.
namespace match {
PacketMatcher any();
PacketMatcher opcode(uint8_t opcode);
PacketMatcher psn(uint32_t psn);
PacketMatcher dest_qp(uint32_t qpn);
PacketMatcher from(const Gid& src);
PacketMatcher to(const Gid& dst);
PacketMatcher all_of(std::vector<PacketMatcher> matchers);
}  // namespace match

// ::ffff:a.b.c.d, for naming fake endpoints.
Gid ipv4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d);

class FakeTransport;

class FakeNetwork {
 public:
  static constexpr size_t kEvery = std::numeric_limits<size_t>::max();

  FakeNetwork() = default;
  ~FakeNetwork();  // transports must be gone first (asserted)
  FakeNetwork(const FakeNetwork&) = delete;
  FakeNetwork& operator=(const FakeNetwork&) = delete;

  // A transport receiving on `gid` (one per GID). With `qpn_block`, a process of
  // an address its processes share (docs/decisions/host-rnic.md): several may
  // attach to one GID, each naming its QPN block, and a packet goes to the one
  // whose block holds its DestQP, as the kernel's steering program sends it (any
  // other, QP1's included, to the first attached).
  std::unique_ptr<FakeTransport> attach(const Gid& gid, uint32_t qpn_block = 0);

  // Scripted rules: each packet sent gets the fate of the first rule, in the order
  // added, that matches it and has count left; otherwise it is delivered. Matchers
  // run under the network's lock: they must not call the network.
  void drop(PacketMatcher matcher, size_t count = 1);
  void duplicate(PacketMatcher matcher, size_t count = 1);  // delivered twice
  void hold(PacketMatcher matcher, size_t count = kEvery);  // kept until released
  void mark(PacketMatcher matcher, size_t count = 1);       // delivered marked CE
  void clear_rules();

  // Held packets, in the order they were held.
  std::vector<FakePacket> held() const;
  size_t held_count() const;
  void release_held();           // delivers all, in the order held
  void release_held_reversed();  // delivers all, last held first
  // Delivers held()[order[0]], held()[order[1]] ...; the others stay held.
  void release_held(const std::vector<size_t>& order);
  void drop_held();

  // Every packet sent since the last take_sent(), in order, with its fate.
  std::vector<FakePacket> take_sent();
  size_t sent_count() const;

  // Delivers `bytes` to `dst` as if `src` had sent it from `src_port`; the ICRC is
  // written here (the last four bytes are overwritten). Logged like a sent packet.
  // `arrival_ns`: the arrival its receiver reports (RxPacket::arrival_ns; 0: none).
  void inject(const Gid& src, const Gid& dst, std::vector<uint8_t> bytes,
              uint16_t src_port = 0xC000, bool congestion_experienced = false,
              int64_t arrival_ns = 0);

  struct Stats {
    uint64_t sent = 0, delivered = 0, dropped = 0, held = 0, duplicated = 0, undeliverable = 0,
             marked = 0;
  };
  Stats stats() const;

 private:
  friend class FakeTransport;
  struct Rule {
    PacketMatcher matcher;
    Fate fate;
    size_t remaining;
  };

  void add_rule(PacketMatcher matcher, Fate fate, size_t count);
  void send_locked(FakePacket packet);
  Fate decide_locked(const FakePacket& packet);
  void deliver_locked(FakePacket packet);
  void detach(FakeTransport* transport);
  // The receivers of `packet`: its destination's endpoint, or a group's members.
  std::vector<FakeTransport*> receivers_locked(const FakePacket& packet) const;

  struct Endpoint {
    uint32_t qpn_block = 0;  // 0: the GID's only endpoint
    FakeTransport* transport = nullptr;
  };
  mutable std::mutex mutex_;
  std::map<Gid, std::vector<Endpoint>> endpoints_;
  // Multicast groups and the transports that joined each (as IP multicast with
  // IP_MULTICAST_LOOP: a member that sends to its group gets a copy too).
  std::map<Gid, std::set<FakeTransport*>> groups_;
  std::vector<Rule> rules_;
  std::vector<FakePacket> held_;
  std::vector<FakePacket> sent_log_;
  uint64_t next_sequence_ = 0;
  Stats stats_;
};

class FakeTransport final : public Transport {
 public:
  ~FakeTransport() override;
  FakeTransport(const FakeTransport&) = delete;
  FakeTransport& operator=(const FakeTransport&) = delete;

  size_t tx_burst(std::span<TxPacket> packets) override;
  size_t tx_burst_with_errors(std::span<TxPacket> packets,
                              std::span<const BitError> errors) override;
  size_t rx_burst(std::span<RxPacket> packets) override;
  // An eventfd: readable while packets wait here, so a progress loop can block on it.
  int rx_fd() const override { return event_fd_; }
  Gid local_gid() const override { return gid_; }
  TransportCounters counters() const override;
  std::string describe() const override;
  int join_group(const Gid& group) override;
  int leave_group(const Gid& group) override;

  size_t queued() const;  // packets waiting for rx_burst

 private:
  friend class FakeNetwork;
  FakeTransport(FakeNetwork& network, const Gid& gid);
  void enqueue_locked(FakePacket packet);  // network mutex held

  FakeNetwork& network_;
  const Gid gid_;
  const int event_fd_;
  std::deque<FakePacket> queue_;        // guarded by network_.mutex_
  std::vector<FakePacket> last_burst_;  // what the last rx_burst returned points here
  TransportCounters counters_;          // guarded by network_.mutex_
};

}  // namespace softrdma::transport::fake
