// Command-line options of a traffic run (CLI11), shared by the launching process
// (softrdma-demo, or a test filling RunOptions itself) and the two node processes
// it starts (softrdma-traffic-node: they get the run's options again, from
// to_node_args, plus their role).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "traffic/node.h"
#include "traffic/plan.h"

namespace softrdma::traffic {

struct RunOptions {
  Transport transport = Transport::kRc;
  uint64_t seed = 1;
  uint32_t qps = 4;
  double loss = 0, dup = 0, reorder = 0;  // fault injection, each process's transmit side
  std::string faults;                     // full SOFTRDMA_FAULTS text (overrides the three)
  std::string pcap;                       // capture file, written by the client process
  std::string mode = "demo";              // demo | test
  double scale = 1.0;                     // multiplies message counts
  uint32_t max_size = 8u << 20;
  uint32_t depth = 8;
  uint32_t mtu = 4096;
  uint32_t ack_timeout = 14;
  std::vector<Op> ops;     // --ops: one custom phase of these
  uint32_t messages = 16;  // --messages: per QP, for --ops
  int time_limit_s = 300;
  int stall_timeout_s = 30;
  bool verbose = false;              // the demo: every engine counter of each node
  bool inject_data_errors = false;  // spoil data before checking it (tests the checks)
  std::string softrdma;             // the `softrdma` command (run, status); "" beside us
  std::string node;                 // the node program; "" beside us
  // A node process (started by the launcher, or by hand with --listen/--connect).
  std::optional<Role> role;
  int oob_fd = -1;
  int report_fd = -1;
  uint16_t port = 0;
  std::string host = "127.0.0.1";
};

// True: parsed. False: the program stops with `exit_status` (0 after --help; 2
// after a message for a bad option).
// `program` names the command in --help.
bool parse_options(int argc, char** argv, const std::string& program, RunOptions& o,
                   int& exit_status);

std::vector<PhaseSpec> phases_for(const RunOptions& o);
// The SOFTRDMA_FAULTS of one process: "" for none. The seed differs per role.
std::string fault_settings_for(const RunOptions& o, Role role);
// What both node processes get: the run's options without the launcher-only ones
// (faults and capture reach them as the library's environment settings).
std::vector<std::string> to_node_args(const RunOptions& o);
SideConfig node_config(const RunOptions& o, Role role);
// The `softrdma` command: --softrdma, else the one beside this program.
std::string softrdma_command(const RunOptions& o);
// The node program: --node, else softrdma-traffic-node beside this program.
std::string node_command(const RunOptions& o);

}  // namespace softrdma::traffic
