// One traffic run, as a program drives it (the demo, the integration tests):
// the two node processes started through `softrdma run` with each one's fault
// and capture settings, their results as structs, and the verdict.
#pragma once

#include "traffic/launcher.h"
#include "traffic/options.h"
#include "traffic/report.h"

namespace softrdma::traffic {

struct RunResult {
  PairResult nodes;
  // Both nodes exited 0 after their final record, with no error, in time.
  bool pass = false;
  Summary summary;  // of both nodes' reports
};

// The command line of one node: `softrdma run -- <node program> <options>
// --role=R`, and its environment: the library's fault settings (the seed
// differs per role) and, for the client, the capture file (it sees both
// directions; the server's SOFTRDMA_PCAP is unset).
ChildSpec node_spec(const RunOptions& o, Role role);

// `observer` (may be null) hears progress and each phase as it ends.
RunResult run_traffic(const RunOptions& o, RunObserver* observer);

}  // namespace softrdma::traffic
