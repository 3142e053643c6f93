// A connected pair of RC QPs on one of the paths a softrdma QP may take (issue 26:
// one test body per behaviour, run over every path, UCX-style): RoCEv2 over the
// fake network or over UDP sockets on loopback, the same-host path (node
// segments), iWARP over fake streams or over a TCP connection on loopback. The
// fake paths run on a manual clock moved only when nothing is left to do; UDP and
// TCP run on the steady clock and wait for events with a wall-clock deadline.
// Each path is built with the pieces the other fixtures use (rc_fixture.h's
// connect_qp and NodeDirectory, iwarp_fixture.h's loopback TCP pair).
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/device.h"
#include "engine/rc_fixture.h"
#include "samehost/host.h"
#include "transport/fake/fake_network.h"
#include "transport/fake/fake_streams.h"
#include "transport/tcp/tcp_streams.h"

namespace softrdma::engine::testing {

// kSharedAddress: the same-host path between two processes of one shared address
// (docs/decisions/host-rnic.md): one GID, told apart by their QPN blocks.
enum class Path { kRoceFake, kRoceUdp, kSameHost, kSharedAddress, kIwarpFake, kIwarpTcp };
std::string path_param_name(const ::testing::TestParamInfo<Path>& info);

struct PathNode {
  std::unique_ptr<samehost::Host> host;  // kSameHost, kSharedAddress; outlives the device
  std::unique_ptr<transport::Transport> transport;             // fake or UDP datagrams
  std::unique_ptr<transport::fake::FakeStreams> fake_streams;  // kIwarpFake
  std::unique_ptr<transport::tcp::TcpStreams> tcp_streams;     // kIwarpTcp
  std::unique_ptr<Device> device;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Qp* qp = nullptr;
  std::vector<uint8_t> mem;
  Mr* mr = nullptr;
  int stream_fd = -1;  // kIwarpTcp: a duplicate of the socket handed to the device

  uint64_t addr(size_t offset) const { return uint64_t(uintptr_t(mem.data() + offset)); }
  EngineCounters& counters() { return device->counters(); }
};

class PathPairTest : public ::testing::TestWithParam<Path> {
 protected:
  static constexpr uint32_t kMtu = 1024;  // RoCE's path MTU here (IBV_MTU_1024)
  static constexpr size_t kMemory = 4 << 20;
  static constexpr Nanos kStep = 250'000;  // 250 us of virtual time per idle turn

  void SetUp() override;
  void TearDown() override;

  bool iwarp() const { return GetParam() == Path::kIwarpFake || GetParam() == Path::kIwarpTcp; }
  bool same_host() const {
    return GetParam() == Path::kSameHost || GetParam() == Path::kSharedAddress;
  }
  bool manual_clock() const {
    return GetParam() != Path::kRoceUdp && GetParam() != Path::kIwarpTcp;
  }
  const FamilyTraits& traits() { return a.device->family().traits(); }

  // Runs both engines until `done()`: on the manual clock, a turn in which neither
  // did anything moves time on by kStep (up to 10 s of it); on the steady clock,
  // until a 20 s deadline.
  template <typename Done>
  bool run_until(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    const Nanos until = clock_.now() + 10'000'000'000;
    while (!done()) {
      bool worked = a.device->progress();
      worked |= b.device->progress();
      if (worked) continue;
      if (manual_clock()) {
        if (clock_.now() >= until) break;
        clock_.advance(kStep);
      } else if (std::chrono::steady_clock::now() >= deadline) {
        break;
      }
    }
    return done();
  }
  // Completions of `cq` until `count` arrived (or the deadline).
  std::vector<ibv_wc> wait_for(Cq* cq, size_t count);

  void post_recv(PathNode& n, size_t offset, uint32_t length, uint64_t wr_id);
  // One signaled WR from `n` to its peer's memory at `remote_offset`, changed by
  // `adjust` before it is posted.
  int post(PathNode& n, ibv_wr_opcode opcode, size_t offset, uint32_t length, size_t remote_offset,
           uint64_t wr_id, const std::function<void(ibv_send_wr&)>& adjust = {});
  void fill(PathNode& n, size_t offset, size_t length, uint32_t seed);
  bool same(const PathNode& x, size_t xo, const PathNode& y, size_t yo, size_t length) const;
  PathNode& peer(PathNode& n) { return &n == &a ? b : a; }

  // Checks that the traffic so far took this test's path: packets on the fake
  // network or on the UDP sockets; no packet and the same-host counters for the
  // same-host path; FPDUs on the fake link or the TCP connection, none on the
  // datagram transport, for iWARP.
  void expect_path_taken();

  NodeDirectory node_directory_;
  ManualClock clock_;
  transport::fake::FakeNetwork net_;
  std::unique_ptr<transport::fake::FakeStreamNetwork> streams_net_;
  size_t link_ = 0;  // kIwarpFake: the QPs' link
  PathNode a;
  PathNode b;

 private:
  void make_roce_node(PathNode& n, uint8_t last);
  void make_iwarp_node(PathNode& n, uint8_t last);
  void make_verbs_objects(PathNode& n);
  void connect_iwarp();
};

}  // namespace softrdma::engine::testing
