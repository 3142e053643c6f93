// A running process's device, counters and QPs, visible from outside (issue 6
// "Live counters"; docs/decisions/live-status.md): a small shared-memory file per
// process and device, /dev/shm/softrdma-<pid>-<device>, that `softrdma status`
// reads, like `rdma statistic` for a kernel device.
//
// The engine's and the UDP transport's counters live in the segment itself
// (DeviceConfig::counters, UdpConfig::counters), so publishing them costs nothing:
// their owners write them where they always did. QP rows are written on the cold
// paths (create, state change, destroy), one row per QP found through an index
// the owner keeps, in a table that grows with the QPs (issue 14 defect 11).
//
// The file is created exclusively, never through a link, readable by its owner
// only; a name taken by anything else is never adopted (issue 14 defect 8,
// docs/decisions/status-segment-safety.md). It is removed when the device closes
// or the process exits normally (defect 9); one left by a killed process is
// removed by the next reader of the same user that finds its pid gone.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/counters.h"
#include "engine/limits.h"
#include "transport/udp/udp_counters.h"

namespace softrdma::runtime {

// "4": issue 17's layout (issue 14's transport counters and growing table, and
// the writer's version) with each QP's round trips and delay target (issue 28);
// a reader of another layout skips the file.
inline constexpr char kStatusMagic[8] = {'s', 'r', 'd', 'm', 'a', 's', 't', '4'};
// Rows the segment can grow to (address space is reserved for them, memory and
// file grow as rows are used): one per QP the device allows.
inline constexpr uint32_t kStatusMaxQpRows = 1u << 18;
static_assert(kStatusMaxQpRows >= engine::DeviceLimits{}.max_qp, "a row for every QP");

struct StatusHeader {
  char magic[8];
  uint32_t header_bytes;             // sizeof(StatusHeader)
  uint32_t counter_count;            // engine counters that follow the header
  uint32_t transport_counter_count;  // then the UDP transport's
  uint32_t row_bytes;                // sizeof(StatusQpRow): the rows follow
  int32_t pid;
  // Rows [0, rows_in_use) may hold a QP (qpn 0: a free row). Raised by the owner
  // only after the file holds those rows; a reader also bounds it by the file size.
  uint32_t rows_in_use;
  char device[64];
  char address[64];
  char version[32];  // softrdma's version in the writing process (src/version.h.in)
};

// One QP; `qpn` 0 is a free row (QPN 0 is never handed out, IBA 3.5.6).
struct StatusQpRow {
  uint32_t qpn;
  uint32_t dest_qpn;
  uint8_t type;   // ibv_qp_type
  uint8_t state;  // ibv_qp_state
  uint8_t path;   // 1: the same-host path (docs/decisions/same-host.md); 0: UDP
  uint8_t reserved[5];
  uint8_t peer[16];  // the connected peer's GID
  engine::QpCounters counters;  // live: the engine counts into them
};

// What update_qp writes into a QP's row.
struct StatusQpUpdate {
  uint32_t qpn;
  uint32_t dest_qpn;
  uint8_t type;
  uint8_t state;
  uint8_t peer[16];
  uint8_t path;
};

class StatusSegment {
 public:
  // Creates this process's file for `device` in `directory` (/dev/shm; tests
  // name another). Null when no file can be made (the device then works without
  // it). A name already taken by something this process did not create is left
  // alone and another name is used, said once on stderr.
  static std::unique_ptr<StatusSegment> create(const std::string& device,
                                               const std::string& directory = "/dev/shm");
  ~StatusSegment();  // unmaps and removes the file
  StatusSegment(const StatusSegment&) = delete;
  StatusSegment& operator=(const StatusSegment&) = delete;

  // The transport's address, known once it is open (after the segment).
  void set_address(const std::string& address);
  engine::EngineCounters* counters() { return counters_; }
  transport::UdpCounters* transport_counters() { return transport_counters_; }
  const transport::UdpCounters* transport_counters() const { return transport_counters_; }
  // Cold paths, under the engine: the QP's row set (made when new), or freed when
  // `gone`. Returns the row's counters (where the QP is to count); null when gone
  // or when the table cannot grow.
  engine::QpCounters* update_qp(const StatusQpUpdate& qp, bool gone);
  const std::string& path() const { return path_; }
  size_t file_bytes() const { return file_bytes_; }
  // Test hook: rows update_qp has looked at since the segment was made (one per
  // call: the row is found through the index, the table is never scanned).
  uint64_t rows_examined() const { return rows_examined_; }

 private:
  StatusSegment() = default;
  bool map_initial(int fd, const std::string& device);
  [[gnu::cold]] bool grow_rows();
  StatusQpRow* new_row();

  std::string path_;
  int fd_ = -1;        // kept to grow the file
  pid_t owner_pid_ = 0;  // a forked child must not remove its parent's file
  void* base_ = nullptr;     // the reserved range; the file is mapped at its start
  size_t reserved_bytes_ = 0;
  size_t file_bytes_ = 0;
  StatusHeader* header_ = nullptr;
  engine::EngineCounters* counters_ = nullptr;
  transport::UdpCounters* transport_counters_ = nullptr;
  StatusQpRow* rows_ = nullptr;
  uint32_t row_capacity_ = 0;  // rows the file holds now
  uint32_t rows_in_use_ = 0;   // high-water mark, published in the header
  std::unordered_map<uint32_t, uint32_t> row_of_qpn_;  // the owner's index
  std::vector<uint32_t> free_rows_;                    // below rows_in_use_
  uint64_t rows_examined_ = 0;
};

// What a reader found: one entry per live process and device.
struct StatusReport {
  int pid = 0;
  std::string device, address, path, version;
  std::vector<std::pair<std::string, uint64_t>> counters;            // the engine's
  std::vector<std::pair<std::string, uint64_t>> transport_counters;  // UDP's
  struct Qp {
    uint32_t qpn, dest_qpn;
    uint8_t type, state;
    uint8_t peer[16];
    uint64_t tx_packets, rx_packets, retransmitted_packets;
    uint8_t path = 0;
    uint64_t host_operations = 0;
    uint64_t cnps_received = 0;
    uint64_t rate_mbps = 0;  // 0: unpaced
    uint64_t window_hundredths = 0;  // 0: no delay control measured
    uint64_t base_rtt_us = 0, rtt_us = 0, target_us = 0;  // the delay control's; 0 likewise
  };
  std::vector<Qp> qps;
};

// Reads every segment of the host in `directory` that this user may trust: a
// regular file (never through a link) owned by the reader, or, for root, by the
// user that runs the process it describes. Removes the reader's own segments whose
// process is gone, counting in `stale_removed` only removals that succeeded.
// Malformed files are skipped, never trusted past their size.
std::vector<StatusReport> read_status_segments(int& stale_removed,
                                               const std::string& directory = "/dev/shm");

// The same removal of this user's segments whose process is gone (a process
// killed by a signal runs no exit handler), reading headers only: run when a
// device opens, so that killed processes' segments do not pile up. Returns how
// many removals succeeded.
int remove_stale_status_segments(const std::string& directory = "/dev/shm");

}  // namespace softrdma::runtime
