// One RC QP, and the test as its peer (DESIGN.md §8, STYLE.md's eRPC example): the
// test hands the QP packets it builds itself and reads every packet the QP sends
// back, moving the clock when it wants timers to fire. One role at a time is driven
// this way: the responder by requests, the requester and completer by ACKs, NAKs and
// responses. Only the public surface of Device and Qp is used (verbs in, packets
// and completions out), so the roles' internals may change under these tests.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/device.h"
#include "transport/fake/fake_network.h"
#include "wire/packet.h"

namespace softrdma::engine::testing {

struct RoleOptions {
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t timeout = 14;  // 4.096 us * 2^14 ~= 67 ms: far beyond what a story waits
  uint8_t retry_cnt = 3;
  uint8_t rnr_retry = 3;
  uint8_t min_rnr_timer = 1;  // what this QP's responder asks for (10 us)
  uint32_t sq_psn = 100;      // the QP's first request PSN
  uint32_t rq_psn = 5000;     // the first request PSN it expects from the peer
  double line_rate_bytes_per_ns = 5.0;  // DCQCN's line rate (DeviceConfig)
  bool delay_control = true;            // Swift (DeviceConfig)
  Nanos target_queueing = 200'000;      // ... and its target above the base RTT
  uint32_t initial_window = 4096;       // ... and its start: the ceiling (no slow start)
  bool selective = false;  // selective repeat as if agreed (SelectiveRepeatMode::kAlways)
};

// A packet from the peer, laid out by wire::build_packet; set its fields through
// view(), copy its payload into view().payload().
class PeerPacket {
 public:
  PeerPacket(uint8_t opcode, uint32_t dest_qp, uint32_t psn, size_t payload_len);
  wire::PacketView view() { return wire::PacketView(bytes_); }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class RcRoleTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kPeerQpn = 0x77;
  static constexpr size_t kMemory = 64 * 1024;

  void SetUp() override { open(RoleOptions{}); }
  void TearDown() override;

  // (Re)builds the device and its QP, connected to the peer and at RTS.
  void open(const RoleOptions& options);

  // Runs the device until it has nothing left to do; what the QP sent meanwhile.
  std::vector<transport::fake::FakePacket> run();
  // Delivers `packet` to the QP as the peer's, then run(); `marked`: it arrives
  // with ECN Congestion Experienced set; `waited`: as if it had waited that long in
  // the kernel before the device took it (RxPacket::arrival_ns).
  std::vector<transport::fake::FakePacket> deliver(PeerPacket packet, bool marked = false,
                                                   Nanos waited = 0);
  // Moves the clock on by `ns` in steps of `step`, running the device after each;
  // what the QP sent meanwhile.
  std::vector<transport::fake::FakePacket> advance(Nanos ns, Nanos step = 10'000);

  // Requests from the peer (the QP's responder answers them).
  PeerPacket send_only(uint32_t psn, size_t length, bool ack_req = true);
  PeerPacket read_request(uint32_t psn, size_t offset, uint32_t length);
  PeerPacket fetch_add(uint32_t psn, size_t offset, uint64_t add);
  // Answers from the peer (the QP's completer takes them): an ACK, a NAK of
  // `code` (wire::syndrome), an RNR NAK asking for timer `timer_code`.
  PeerPacket ack(uint32_t psn);
  PeerPacket nak(uint32_t psn, uint8_t code);
  PeerPacket rnr_nak(uint32_t psn, uint8_t timer_code);
  // Selective repeat: a SACK (wire/sack.h) whose last PSN in order is `psn`, holding
  // `held` (PSNs beyond the gap).
  // kAlways agrees on the wide SACK and the responder's hold too (`hold_ns` after
  // the bitmap; wire/ack_hold.h).
  PeerPacket sack(uint32_t psn, std::initializer_list<uint32_t> held, Nanos hold_ns = 0);
  // An ACK that says the responder held what it answers for `hold_ns`.
  PeerPacket timed_ack(uint32_t psn, Nanos hold_ns);

  // Verbs on the QP.
  void post_recv(size_t offset, uint32_t length, uint64_t wr_id);
  int post_send(size_t offset, uint32_t length, uint64_t wr_id);
  std::vector<ibv_wc> poll(Cq* cq);

  uint64_t addr(size_t offset) const { return uint64_t(uintptr_t(mem_.data() + offset)); }
  uint64_t load64(size_t offset) const;
  void store64(size_t offset, uint64_t value);
  EngineCounters& counters() { return device_->counters(); }
  uint32_t msn_of(const transport::fake::FakePacket& p) const;
  uint8_t syndrome_of(const transport::fake::FakePacket& p) const;

  RoleOptions options_;
  ManualClock clock_;
  transport::fake::FakeNetwork net_;
  const transport::Gid qp_gid_ = transport::fake::ipv4_gid(10, 0, 0, 1);
  const transport::Gid peer_gid_ = transport::fake::ipv4_gid(10, 0, 0, 2);
  std::unique_ptr<transport::fake::FakeTransport> transport_;
  std::unique_ptr<Device> device_;
  Pd* pd_ = nullptr;
  Cq* scq_ = nullptr;
  Cq* rcq_ = nullptr;
  Qp* qp_ = nullptr;
  Mr* mr_ = nullptr;
  std::vector<uint8_t> mem_;
};

}  // namespace softrdma::engine::testing
