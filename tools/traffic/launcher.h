// Starts the two node processes of a run: fork + exec of a program (normally the
// caller's own binary) as `--role=server` and `--role=client`, connected by a
// socketpair for the out-of-band exchange, with their stdout read back line by
// line. Their stderr is the caller's. A run that outlives its time limit is killed.
#pragma once

#include <string>
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

// `args`: arguments for both children (without argv[0] and the role options).
PairResult launch_pair(const std::string& program, const std::vector<std::string>& args,
                       int time_limit_s);

// The running program's own path (/proc/self/exe resolved).
std::string self_path();

}  // namespace softrdma::traffic
