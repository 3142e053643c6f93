// One process of a two-process traffic run (a "node"): opens its own software RNIC
// (fabric.h), creates N RC QPs and their memory, exchanges QPNs, PSNs, GID and keys
// with its peer out of band (oob.h), connects the QPs, and runs the phases of the
// plan (plan.h) with a lane (requester, lane.h) and a receiver (receiver.h) per QP.
// Results go to stdout as `kind key=value ...` lines (report.h parses them);
// errors go to stderr.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "traffic/buffers.h"
#include "traffic/fabric.h"
#include "traffic/lane.h"
#include "traffic/oob.h"
#include "traffic/plan.h"
#include "traffic/receiver.h"
#include "traffic/stats.h"

namespace softrdma::traffic {

struct NodeConfig {
  Role role = Role::kClient;
  uint64_t seed = 1;
  uint32_t qps = 4;
  uint32_t mtu = 4096;       // path MTU, 256..4096
  uint8_t ack_timeout = 14;  // QP local ACK timeout: 4.096 us * 2^this (67 ms)
  uint8_t retry_cnt = 7;
  uint8_t min_rnr_timer = 7;  // 0.12 ms (IBA table 45)
  std::string faults;         // this process's fault injection (transmit side)
  std::string pcap;           // capture file of this process
  std::vector<PhaseSpec> phases;
  // Out of band: an inherited socket, or TCP (server listens, client connects).
  int oob_fd = -1;
  uint16_t oob_port = 0;
  std::string oob_host = "127.0.0.1";
  int stall_timeout_ms = 30000;  // no progress for this long: fail, printing the state
  // Tests of the checks themselves: spoil the first received SEND, READ result and
  // WRITE target range (QP 0) before checking them.
  bool inject_data_errors = false;
};

struct PeerInfo {
  transport::Gid gid{};
  uint64_t config_hash = 0;
  RemoteMemory exposed;
  RemoteMemory atomics;
  std::vector<uint32_t> qpn, psn;
  std::vector<RemoteMemory> landing;
};

class Node {
 public:
  explicit Node(NodeConfig config);
  ~Node();
  // Sets up, runs every phase, prints results. The process's exit status.
  int run();

 private:
  struct QpSlot {
    engine::Qp* qp = nullptr;
    uint32_t psn = 0;
    Region local, landing, recv;
    std::unique_ptr<Lane> lane;
    std::unique_ptr<Receiver> receiver;
  };

  // node.cc: set-up and tear-down.
  bool setup(std::string& error);
  bool open_oob(std::string& error);
  bool create_qps(std::string& error);
  bool exchange(std::string& error);
  bool connect_qp(QpSlot& slot, uint32_t index, std::string& error);
  void make_lanes();
  uint64_t config_hash() const;
  uint64_t max_message() const;
  void teardown();

  // runner.cc: the phases.
  bool run_phase(uint32_t phase);
  bool step(uint32_t phase, int64_t now);
  bool poll_cqs(int64_t now);
  bool handle_oob();
  void handle_frame(const Frame& f);
  void answer_check(const CheckRequest& request);
  void wait_for_events(int timeout_ms);
  void dump_state(int64_t now);
  bool lanes_done() const;
  bool receivers_done() const;
  uint64_t slot_value(uint32_t qp) const;

  // report lines (runner.cc)
  void print_phase(uint32_t phase, int64_t ns, const std::map<std::string, uint64_t>& before);
  void print_final();

  NodeConfig config_;
  ErrorLog errors_;
  Verified verified_;
  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<OobChannel> oob_;
  Region exposed_, atomics_;
  std::vector<QpSlot> qps_;  // after fabric_: destroyed before it
  std::unordered_map<uint32_t, uint32_t> index_of_qpn_;
  PeerInfo peer_;
  uint32_t peer_phases_started_ = 0;
  uint32_t peer_phases_done_ = 0;
  bool phase_done_sent_ = false;
  bool write_spoiled_ = false;  // inject_data_errors: the first WRITE range was spoiled
  int64_t last_progress_ns_ = 0;
};

int64_t now_ns();

}  // namespace softrdma::traffic
