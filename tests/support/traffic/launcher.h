// Starts the two node processes of a run: fork + exec of a command line each
// (normally `softrdma run -- <this program> ... --role=server|client`) with
// environment settings of its own (the library's SOFTRDMA_FAULTS, SOFTRDMA_PCAP),
// connected by a socketpair for the out-of-band exchange (`--oob-fd=N` is
// appended), with their stdout read back line by line. Their stderr is the
// caller's. A run that outlives its time limit is killed.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace softrdma::traffic {

struct ChildResult {
  int exit_code = -1;  // -1: did not exit normally
  int signal = 0;      // the signal that ended it, if any
  std::vector<std::string> lines;
};

struct PairResult {
  ChildResult server, client;
  bool timed_out = false;
  std::string error;  // could not start
};

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] is the program's path
  // Set in the child's environment; an empty value unsets the variable.
  std::vector<std::pair<std::string, std::string>> env;
};

PairResult launch_pair(const ChildSpec& server, const ChildSpec& client, int time_limit_s);

// The running program's own path (/proc/self/exe resolved).
std::string self_path();

}  // namespace softrdma::traffic
