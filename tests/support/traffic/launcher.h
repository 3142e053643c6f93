// Starts the two node processes of a run: fork + exec of a command line each
// (normally `softrdma run -- softrdma-traffic-node ... --role=server|client`)
// with environment settings of its own (the library's SOFTRDMA_FAULTS,
// SOFTRDMA_PCAP), joined by a socketpair for their out-of-band exchange
// (`--oob-fd=N` is appended), each with a socketpair of its own to the launcher
// for its results (`--report-fd=N`; report.h). Their stdout and stderr are the
// caller's. A run that outlives its time limit is killed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "traffic/report.h"

namespace softrdma::traffic {

struct ChildResult {
  int exit_code = -1;  // -1: did not exit normally
  int signal = 0;      // the signal that ended it, if any
  SideReport report;
};

struct PairResult {
  ChildResult server, client;
  bool timed_out = false;
  std::string error;  // could not start, or a malformed report frame
};

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] is the program's path
  // Set in the child's environment; an empty value unsets the variable.
  std::vector<std::pair<std::string, std::string>> env;
};

// Told what the nodes report while they run (on the launching thread).
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  // The phase the nodes are in, both nodes' messages counted together.
  virtual void on_progress(const Progress&) {}
  // Both nodes' records of one phase have arrived.
  virtual void on_phase(const PhaseRecord& server, const PhaseRecord& client) {
    (void)server;
    (void)client;
  }
};

PairResult launch_pair(const ChildSpec& server, const ChildSpec& client, int time_limit_s,
                       RunObserver* observer);

// The running program's own path (/proc/self/exe resolved).
std::string self_path();

}  // namespace softrdma::traffic
