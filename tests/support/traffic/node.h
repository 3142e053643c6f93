// One side of a two-process traffic run (one process): an ordinary verbs program.
// It opens the first verbs device (fabric.h), creates N QPs of the run's transport
// (RC, UC, UD, or RC on one SRQ) and their memory, exchanges QPNs, PSNs, GID and
// keys with its peer out of band (oob.h), connects the QPs, and runs the phases of
// the plan (plan.h) with a lane (requester, lane.h) and a receiver per QP (RC:
// receiver.h; UC, UD, SRQ: slot_pool.h and arrivals.h). Results go to the
// launcher as records (report.h) on the report channel, or, for a node started
// by hand, as a few readable lines on stdout; errors go to stderr.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "traffic/arrivals.h"
#include "traffic/buffers.h"
#include "traffic/checks.h"
#include "traffic/fabric.h"
#include "traffic/lane.h"
#include "traffic/oob.h"
#include "traffic/plan.h"
#include "traffic/receiver.h"
#include "traffic/report.h"
#include "traffic/slot_pool.h"
#include "traffic/stats.h"

namespace softrdma::traffic {

struct SideConfig {
  Role role = Role::kClient;
  Transport transport = Transport::kRc;
  uint64_t seed = 1;
  uint32_t qps = 4;
  uint32_t mtu = 4096;       // path MTU, 256..4096
  uint8_t ack_timeout = 14;  // QP local ACK timeout: 4.096 us * 2^this (67 ms)
  uint8_t retry_cnt = 7;
  uint8_t min_rnr_timer = 7;  // 0.12 ms (IBA table 45)
  std::vector<PhaseSpec> phases;
  // Out of band: an inherited socket, or TCP (server listens, client connects).
  int oob_fd = -1;
  uint16_t oob_port = 0;
  std::string oob_host = "127.0.0.1";
  // The launcher's end of the report channel (report.h); -1: started by hand.
  int report_fd = -1;
  int stall_timeout_ms = 30000;  // no progress for this long: fail, printing the state
  // `softrdma` (its `status` command reports this process's engine counters); ""
  // for none.
  std::string status_tool;
  // Tests of the checks themselves: spoil the first received SEND, READ result and
  // WRITE target range (QP 0) before checking them.
  bool inject_data_errors = false;
};

struct PeerInfo {
  Gid gid{};
  uint64_t config_hash = 0;
  uint32_t recv_slots = 0;  // UC, UD: receive WQEs the peer keeps posted per QP
  RemoteMemory exposed;
  RemoteMemory atomics;
  std::vector<uint32_t> qpn, psn;
  std::vector<RemoteMemory> landing;
  // Each QP's ECE offer (ibv_query_ece(3); vendor 0: none), which this side's QP
  // takes before RTR (ibv_set_ece(3)): how an application that connects without
  // the rdma_cm agrees on vendor options such as softrdma's selective repeat.
  std::vector<ibv_ece> ece;
};

class Side {
 public:
  explicit Side(SideConfig config);
  ~Side();
  // Sets up, runs every phase, prints results. The process's exit status.
  int run();

 private:
  struct QpSlot {
    ibv_qp* qp = nullptr;
    ibv_ah* ah = nullptr;  // UD: the peer
    uint32_t psn = 0;
    Region local, landing, recv;
    std::unique_ptr<Lane> lane;
    std::unique_ptr<Receiver> receiver;  // RC
    std::unique_ptr<SlotPool> pool;      // UC, UD (SRQ: the node's shared pool)
    std::unique_ptr<Arrivals> arrivals;  // UC, UD, SRQ
  };
  // UD: a marker seen, its round closed once the QP was quiet for a while.
  struct PendingClose {
    uint32_t qp = 0;
    MarkerTag tag;
  };

  // node.cc: set-up and tear-down.
  bool setup(std::string& error);
  bool open_oob(std::string& error);
  bool allocate_memory(std::string& error);
  bool create_qps(std::string& error);
  bool create_qp(QpSlot& slot, uint32_t index, std::string& error);
  bool exchange(std::string& error);
  bool connect_qp(QpSlot& slot, uint32_t index, std::string& error);
  bool make_receivers(std::string& error);
  void make_lanes();
  uint64_t config_hash() const;
  uint64_t max_message() const;
  uint32_t slot_bytes() const;
  uint64_t landing_poison_key(uint32_t qp) const;
  void teardown();

  // runner.cc: the phases.
  void start_phase(uint32_t phase);  // plans, receive WQEs, tell the peer
  bool run_phase(uint32_t phase);
  bool step(uint32_t phase, int64_t now);
  bool poll_cqs(int64_t now);
  void on_receive(const ibv_wc& wc, uint32_t qp, int64_t now);
  bool close_rounds(int64_t now);
  bool handle_oob();
  void handle_frame(const Frame& f);
  void answer_check(const CheckRequest& request);
  void wait_for_events(int64_t now);
  void dump_state(int64_t now);
  bool lanes_done() const;
  bool receivers_done() const;
  uint64_t slot_value(uint32_t qp) const;

  // node_report.cc: results to the launcher (or stdout).
  void report_phase(uint32_t phase, int64_t ns, const Verified& before);
  void report_progress(uint32_t phase, int64_t now);
  void report_final();

  SideConfig config_;
  ErrorLog errors_;
  Verified verified_;
  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<OobChannel> oob_;
  std::unique_ptr<OobChannel> report_;  // null: started by hand
  int64_t last_progress_report_ns_ = 0;
  Region exposed_, atomics_;
  Region shared_recv_;                    // SRQ: the shared pool's buffers
  std::unique_ptr<SlotPool> shared_pool_;  // SRQ
  std::vector<QpSlot> qps_;  // after fabric_: destroyed before it
  std::unordered_map<uint32_t, uint32_t> index_of_qpn_;
  PeerInfo peer_;
  uint32_t recv_slots_ = 0;  // UC, UD: per QP; SRQ: in the shared pool
  uint32_t current_phase_ = 0;
  uint32_t peer_phases_started_ = 0;
  uint32_t peer_phases_done_ = 0;
  bool phase_done_sent_ = false;
  bool write_spoiled_ = false;  // inject_data_errors: the first WRITE range was spoiled
  int64_t last_progress_ns_ = 0;
  int64_t last_receive_ns_ = 0;  // UD: rounds close once receives have been quiet
  std::vector<PendingClose> pending_closes_;
};

int64_t now_ns();

}  // namespace softrdma::traffic
