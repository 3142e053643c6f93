// The engine's counters of this process, as `softrdma status` shows them (the
// status segment every softrdma process publishes, docs/decisions/live-status.md).
// A verbs program has no verbs call for them (ibv_query_port's counters are not
// these), so the node asks the `softrdma` command, as a user would, and reads its
// own process's block.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace softrdma::traffic {

// Runs `tool status` and returns the `engine.NAME VALUE` lines of this process's
// block (names without "engine."; it lists those that are not zero). A message in
// `error` when the tool failed or did not list this process.
std::map<std::string, uint64_t> engine_counters_from_status(const std::string& tool,
                                                            std::string& error);

}  // namespace softrdma::traffic
