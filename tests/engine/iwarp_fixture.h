// Two devices whose ports speak iWARP (engine/iwarp/), an RC QP on each joined by
// a stream handed to both as a connection manager would after the MPA start
// frames (wire/iwarp/handoff.h): a real TCP connection over loopback (the
// default), or fake streams (transport/fake/fake_streams.h) whose faults a test
// scripts, with a clock that moves only when the test's run_until finds nothing
// to do. The datagram transports are fakes: they only give each device its address.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <array>
#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/clock.h"
#include "transport/fake/fake_network.h"
#include "transport/fake/fake_streams.h"
#include "transport/tcp/tcp_streams.h"
#include "wire/iwarp/handoff.h"

namespace softrdma::engine::testing {

// Two connected loopback TCP sockets: [0] the initiator's, [1] the responder's.
std::array<int, 2> loopback_tcp_pair();

struct IwarpOptions {
  bool crc_a = false, crc_b = false;  // what each side believes was negotiated
  wire::iwarp::RtrKind rtr = wire::iwarp::RtrKind::kRead;
  uint16_t ird = 8, ord = 8;
  size_t memory = 4 << 20;
  int mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  // Fake streams on the manual clock instead of TCP on the steady one; `window`:
  // the fake streams' unread bytes each way (TCP's buffers).
  bool fake_streams = false;
  size_t window = 1 << 20;
};

struct IwarpNode {
  std::unique_ptr<transport::fake::FakeTransport> transport;
  std::unique_ptr<transport::tcp::TcpStreams> streams;  // or, IwarpOptions::fake_streams:
  std::unique_ptr<transport::fake::FakeStreams> fake_streams;
  std::unique_ptr<Device> device;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Qp* qp = nullptr;
  std::vector<uint8_t> mem;
  Mr* mr = nullptr;
  uint64_t addr(size_t offset) const { return uint64_t(uintptr_t(mem.data() + offset)); }
  EngineCounters& counters() { return device->counters(); }
};

class IwarpPairTest : public ::testing::Test {
 protected:
  void SetUp() override { connect(IwarpOptions{}); }
  void TearDown() override;
  // (Re)builds both nodes; a's QP is the initiator of the connection.
  void connect(const IwarpOptions& options);
  void make_node(IwarpNode& n, const transport::Gid& gid);
  // An RC QP of `n` (born in INIT on an iWARP device) with `depth` WRs each way.
  static Qp* new_rc_qp(IwarpNode& n, uint32_t depth, uint32_t sges = 1, uint32_t inline_bytes = 0);
  // Two connected loopback TCP sockets: [0] the initiator's, [1] the responder's.
  static std::array<int, 2> tcp_pair();
  // The same over the link this pair runs on: TCP sockets, or the descriptors of
  // a new fake-stream link between a and b (its id in link_).
  std::array<int, 2> stream_pair();
  // Runs both engines until `done()` (real sockets: a wall-clock limit of 20 s).
  // Over fake streams, a turn in which neither engine did anything moves the
  // clock on by kStep (timers fire), up to `limit` of virtual time.
  template <typename Done>
  bool run_until(Done done, Nanos limit = 10'000'000'000) {
    const Nanos until = clock_.now() + limit;
    for (int i = 0; i < 2'000'000 && !done(); ++i) {
      bool worked = a.device->progress();
      worked |= b.device->progress();
      if (!options_.fake_streams || worked) continue;
      if (clock_.now() >= until) break;
      clock_.advance(kStep);
    }
    return done();
  }
  static constexpr Nanos kStep = 250'000;  // 250 us
  // Completions of `cq` until `count` arrived (or the limit).
  std::vector<ibv_wc> wait_for(Cq* cq, size_t count);
  void post_recv(IwarpNode& n, size_t offset, uint32_t length, uint64_t wr_id);
  int post(IwarpNode& n, ibv_wr_opcode opcode, size_t offset, uint32_t length,
           size_t remote_offset, uint64_t wr_id, uint32_t rkey = 0);
  void fill(IwarpNode& n, size_t offset, size_t length, uint32_t seed);
  IwarpNode& peer(IwarpNode& n) { return &n == &a ? b : a; }

  IwarpOptions options_;
  ManualClock clock_;  // the devices' over fake streams
  transport::fake::FakeNetwork net_;
  std::unique_ptr<transport::fake::FakeStreamNetwork> streams_net_;
  size_t link_ = 0;  // over fake streams: a's and b's QPs' link
  IwarpNode a;
  IwarpNode b;
};

}  // namespace softrdma::engine::testing
