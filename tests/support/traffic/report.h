// The results of a traffic run as text: each node prints `kind key=value ...` lines
// on stdout while it runs; the launching process parses both nodes' lines, prints
// the table, and ends with one `summary` line that tests parse.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "traffic/stats.h"

namespace softrdma::traffic {

using Fields = std::map<std::string, std::string>;

// "kind k=v k=v" -> kind and fields. False for an empty line.
bool parse_line(const std::string& line, std::string& kind, Fields& fields);
uint64_t field_u64(const Fields& f, const std::string& key);

struct PhaseRecord {
  std::string label;
  int64_t ns = 0;                            // first post to last completion
  OpTable ops{};                             // what this node issued
  std::map<std::string, uint64_t> counters;  // increments during the phase
};

struct NodeReport {
  std::map<uint32_t, PhaseRecord> phases;
  bool has_final = false;
  uint64_t errors = 0;
  Verified verified;
  std::map<std::string, uint64_t> totals;  // counters at the end of the run
};

NodeReport parse_report(const std::vector<std::string>& lines);

// Node side: the lines.
void print_phase_lines(std::FILE* out, const std::string& role, uint32_t index,
                       const PhaseRecord& record);
void print_final_lines(std::FILE* out, const std::string& role, uint64_t errors,
                       const Verified& verified, const std::map<std::string, uint64_t>& totals);

// Launcher side: the table, the verification and counter summary, and the
// `summary` line: status=PASS|FAIL transport= errors= completions= bytes_compared=
// crc_matches= atomics= messages= bytes=, engine counters of both processes
// (retransmitted= ...), the data messages sent= received= lost= late= duplicates=,
// and for every op msgs_<OP>= and max_<OP>= (largest message).
void print_table(std::FILE* out, const NodeReport& server, const NodeReport& client);
std::string summary_line(const NodeReport& server, const NodeReport& client, bool pass,
                         std::string_view transport);

}  // namespace softrdma::traffic
