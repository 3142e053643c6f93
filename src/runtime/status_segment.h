// A running process's device, counters and QPs, visible from outside (issue 6
// "Live counters"; docs/decisions/live-status.md): a small shared-memory file per
// process and device, /dev/shm/softrdma-<pid>-<device>, that `softrdma status`
// reads, like `rdma statistic` for a kernel device.
//
// The engine's counters live in the segment itself (DeviceConfig::counters), so
// publishing them costs nothing: the engine's owner writes them where it always
// did. QP rows are written on the cold paths (create, state change, destroy). The
// file is removed when the device closes; one left by a killed process is removed
// by the next reader that finds its pid gone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/counters.h"

namespace softrdma::runtime {

inline constexpr char kStatusMagic[8] = {'s', 'r', 'd', 'm', 'a', 's', 't', '1'};
inline constexpr uint32_t kStatusQpRows = 65536;

struct StatusHeader {
  char magic[8];
  uint32_t header_bytes;   // sizeof(StatusHeader): a reader of another build refuses
  uint32_t counter_count;  // number of engine counters that follow the header
  uint32_t qp_rows;
  int32_t pid;
  char device[64];
  char address[64];
};

// One QP; `qpn` 0 is a free row (QPN 0 is never handed out, IBA 3.5.6).
struct StatusQpRow {
  uint32_t qpn;
  uint32_t dest_qpn;
  uint8_t type;   // ibv_qp_type
  uint8_t state;  // ibv_qp_state
  uint8_t reserved[6];
  uint8_t peer[16];  // the connected peer's GID
  engine::QpCounters counters;  // live: the engine counts into them
};

class StatusSegment {
 public:
  // Creates the file for this process and `device`; null when /dev/shm cannot
  // be used (the device then works without it).
  static std::unique_ptr<StatusSegment> create(const std::string& device,
                                               const std::string& address);
  ~StatusSegment();  // unmaps and removes the file
  StatusSegment(const StatusSegment&) = delete;
  StatusSegment& operator=(const StatusSegment&) = delete;

  engine::EngineCounters* counters() { return counters_; }
  // Cold paths, under the engine: a QP's row set, or freed when `gone`.
  // Returns the row's counters (where the QP is to count), null when gone or full.
  engine::QpCounters* update_qp(uint32_t qpn, uint32_t dest_qpn, uint8_t type, uint8_t state,
                                const uint8_t (&peer)[16], bool gone);
  const std::string& path() const { return path_; }

 private:
  StatusSegment() = default;
  std::string path_;
  int owner_pid_ = 0;  // a forked child must not remove its parent's file
  void* base_ = nullptr;
  size_t bytes_ = 0;
  engine::EngineCounters* counters_ = nullptr;
  StatusQpRow* rows_ = nullptr;
};

// What a reader found: one entry per live process and device.
struct StatusReport {
  int pid = 0;
  std::string device, address, path;
  std::vector<std::pair<std::string, uint64_t>> counters;
  struct Qp {
    uint32_t qpn, dest_qpn;
    uint8_t type, state;
    uint8_t peer[16];
    uint64_t tx_packets, rx_packets, retransmitted_packets;
  };
  std::vector<Qp> qps;
};

// Reads every segment of the host; removes those whose process is gone (counted in
// `stale_removed`). Malformed files are skipped, never trusted past their size.
std::vector<StatusReport> read_status_segments(int& stale_removed);

}  // namespace softrdma::runtime
