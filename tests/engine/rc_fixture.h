// A connected pair of RC (or UC) QPs on two devices joined by the fake network, with a
// clock that moves only when the test says so (STYLE.md "players" fixture).
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <functional>
#include <memory>
#include <vector>

#include "engine/device.h"
#include "samehost/host.h"
#include "transport/fake/fake_network.h"

namespace softrdma::engine::testing {

struct RcOptions {
  ibv_qp_type type = IBV_QPT_RC;  // or IBV_QPT_UC (no ACK, retry or READ attributes), UD
  uint32_t qkey = 0x11111111;     // UD: both QPs' Q_Key
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t timeout = 10;  // 4.096 us * 2^10 ~= 4.2 ms
  uint8_t retry_cnt = 3;
  uint8_t rnr_retry = 3;
  uint8_t min_rnr_timer = 1;  // 10 us
  uint32_t a_psn = 100;       // a's send PSN (b's receive PSN)
  uint32_t b_psn = 5000;
  int b_qp_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  int mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                  IBV_ACCESS_REMOTE_ATOMIC;
  uint8_t max_rd_atomic = 4;
  size_t memory = 256 * 1024;
  uint32_t window = 64;  // DeviceConfig::max_unacked_packets
  // DeviceConfig::selective_window; 0: `window`, for selective repeat too.
  uint32_t selective_window = 0;
  bool delay_control = true;  // DeviceConfig::delay_control (Swift's window)
  // DeviceConfig::initial_window: at the ceiling, so that a story counts what a
  // whole window sends at once (the slow start has tests of its own).
  uint32_t initial_window = 4096;
  uint32_t srq_wrs = 0;  // non-zero: each node's QP receives from an SRQ this deep
  uint32_t max_recv_wr = 256;
  uint32_t max_recv_sge = 4;
  // DeviceConfig::idle_probe_interval_ns and max_retry_interval_ns (the product's).
  Nanos idle_probe = DeviceConfig{}.idle_probe_interval_ns;
  Nanos max_retry_interval = DeviceConfig{}.max_retry_interval_ns;
  // Both devices publish node segments (in the test's own directory): RDMA WRITE,
  // READ and ATOMIC then take the same-host path (docs/decisions/same-host.md).
  bool same_host = false;
  // DeviceConfig::shared_pages_max_bytes: MRs up to this size share their pages
  // with same-host peers (0: peers copy by cross-memory attach).
  uint64_t shared_pages = DeviceConfig{}.shared_pages_max_bytes;
  // Both QPs are told (as ibv_set_ece does) that their peer agreed to selective
  // repeat (docs/decisions/selective-repeat.md); DeviceConfig::selective_repeat.
  bool selective = false;
  bool wide_sack = false;  // and to the wide SACK (ECE option bit 1, wire/sack.h)
  SelectiveRepeatMode selective_mode = SelectiveRepeatMode::kNegotiated;
};

// The test's own directory for node segments (removed with it).
class NodeDirectory {
 public:
  NodeDirectory();
  ~NodeDirectory() { remove(); }
  const std::string& path() const { return path_; }  // ends with '/'
  // Removes the directory now: a death test's child, which dies without running
  // destructors, calls it before it dies (its fixture made a directory of its own).
  void remove();

 private:
  std::string path_;
};

struct Node {
  std::unique_ptr<samehost::Host> host;  // RcOptions::same_host; outlives the device
  std::unique_ptr<transport::fake::FakeTransport> transport;
  std::unique_ptr<Device> device;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Qp* qp = nullptr;
  Srq* srq = nullptr;  // RcOptions::srq_wrs
  std::vector<uint8_t> mem;
  Mr* mr = nullptr;

  uint64_t addr(size_t offset) const { return uint64_t(uintptr_t(mem.data() + offset)); }
  EngineCounters& counters() { return device->counters(); }
};

// Moves `qp` to RTS connected to QP `peer_qpn` of `peer_device` (its GID 1); UD
// QPs get the Q_Key instead. XRC QPs follow RC's attributes.
void connect_qp(Qp& qp, const Device& peer_device, uint32_t peer_qpn, uint32_t sq_psn,
                uint32_t rq_psn, int access, const RcOptions& o);

// The paths a connected QP may take (RcPathTest): the wire, and the same-host path
// (the requester executes WRITE/READ/ATOMIC on the peer's memory); kSharedAddress
// is the same-host path between two processes of one shared address
// (docs/decisions/host-rnic.md): one GID, QPNs of blocks 3 and 5.
enum class TestPath { kWire, kHost, kSharedAddress };

class RcPairTest : public ::testing::Test {
 protected:
  void SetUp() override { connect(RcOptions{}); }
  void TearDown() override;

  // (Re)builds both nodes and moves both QPs to RTS, and checks that RC and UC
  // QPs connected on the path asked for (RcOptions::same_host).
  void connect(const RcOptions& options);
  void expect_path_taken();
  // Runs both devices until no packet is left in flight.
  void pump();
  // Moves time on by `ns` in small steps, pumping after each, so timers fire.
  void advance(Nanos ns);
  // Pumps and advances time until `done()` or `limit` of virtual time passed.
  template <typename Done>
  bool run_until(Done done, Nanos limit = 1'000'000'000) {
    pump();
    for (Nanos t = 0; t < limit && !done(); t += kStep) advance(kStep);
    return done();
  }

  std::vector<ibv_wc> poll(Cq* cq, int max = 256);
  void post_recv(Node& n, size_t offset, uint32_t length, uint64_t wr_id);
  // Posts one signaled WR from `n` to its peer's memory at `remote_offset`.
  int post(Node& n, ibv_wr_opcode opcode, size_t offset, uint32_t length,
           size_t remote_offset, uint64_t wr_id, unsigned flags = IBV_SEND_SIGNALED);
  // The same WR, changed by `adjust` before it is posted (a foreign rkey, an
  // immediate, a wrong lkey ...).
  int post_with(Node& n, ibv_wr_opcode opcode, size_t offset, uint32_t length,
                size_t remote_offset, uint64_t wr_id,
                const std::function<void(ibv_send_wr&, ibv_sge&)>& adjust);
  int post_wr(Node& n, ibv_send_wr& wr);
  // UD: an AH on `from`'s device addressing `to` (by its GID 1), and a send through
  // it to `to`'s QP with the Q_Key `qkey` (with immediate: kUdImmediate).
  static constexpr uint32_t kUdImmediate = 0xabcd;
  static Ah* make_ah(Node& from, const Node& to);
  int post_ud(Node& n, Ah* ah, ibv_wr_opcode opcode, size_t offset, uint32_t length,
              uint64_t wr_id, uint32_t qkey);
  // An ATOMIC from `n` on the peer's 8 bytes at `remote_offset`; the old value lands
  // at `offset` of n's memory.
  int post_atomic(Node& n, ibv_wr_opcode opcode, size_t offset, size_t remote_offset,
                  uint64_t compare_add, uint64_t swap, uint64_t wr_id);
  static uint64_t load64(const Node& n, size_t offset);
  static void store64(Node& n, size_t offset, uint64_t value);
  void fill(Node& n, size_t offset, size_t length, uint32_t seed);
  bool same(const Node& x, size_t xo, const Node& y, size_t yo, size_t length) const;
  Node& peer(Node& n) { return &n == &a ? b : a; }

  static constexpr Nanos kStep = 250'000;  // 250 us
  // Set by RcPathTest: every connect() of the test takes this path.
  bool same_host_ = false;
  bool shared_address_ = false;  // TestPath::kSharedAddress
  void take_path(TestPath path) {
    same_host_ = path != TestPath::kWire;
    shared_address_ = path == TestPath::kSharedAddress;
  }
  // Same-host tests whose QPs take the wire by design (a TM SRQ, an XRC SRQ
  // beyond the segment): TearDown does not require a silent wire of them.
  bool wire_traffic_expected_ = false;
  NodeDirectory node_directory_;
  RcOptions options_;
  ManualClock clock_;
  transport::fake::FakeNetwork net_;
  Node a;
  Node b;
};

// The same test body over every path a connected QP may take (TestPath).
std::string path_name(const ::testing::TestParamInfo<TestPath>& info);

class RcPathTest : public RcPairTest, public ::testing::WithParamInterface<TestPath> {
 protected:
  void SetUp() override {
    take_path(GetParam());
    RcPairTest::SetUp();
  }
};

// A pair whose devices publish node segments: the same-host path only.
class RcHostPairTest : public RcPairTest {
 protected:
  void SetUp() override {
    same_host_ = true;
    RcPairTest::SetUp();
  }
};

}  // namespace softrdma::engine::testing
