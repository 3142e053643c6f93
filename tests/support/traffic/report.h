// The results of a traffic run as structs. Each node sends its launcher a
// record per phase, progress while a phase runs, and a final record, as frames
// over a socketpair of its own (oob.h's framing; MsgType::kProgress and after):
// the launcher (launcher.h) never parses text. The integration tests assert on
// these structs and on the Summary of both nodes; the demo prints them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "traffic/oob.h"
#include "traffic/stats.h"

namespace softrdma::traffic {

using Counters = std::map<std::string, uint64_t>;

struct PhaseRecord {
  uint32_t index = 0;
  std::string label;
  int64_t ns = 0;     // first post to last completion (UC, UD: last round confirmed)
  OpTable ops{};      // what this node issued
  uint64_t sent = 0;  // data messages this node issued in the phase
  uint64_t lost = 0;  // of the peer's, those this node found never arrived
};

// How far a node is in a phase: messages of its plan completed so far.
struct Progress {
  uint32_t phase = 0;
  uint64_t done = 0;
  uint64_t total = 0;
};

struct SideReport {
  std::map<uint32_t, PhaseRecord> phases;
  bool has_final = false;
  Transport transport = Transport::kRc;  // the QPs the node made (final record)
  uint64_t errors = 0;
  Verified verified;
  Counters totals;  // the engine's counters at the end (`softrdma status`), not zero
};

// Both nodes together: what tests assert and the demo's last lines print.
struct Summary {
  uint64_t errors = 0;
  Verified verified;  // summed
  OpTable ops{};      // every phase, both nodes
  OpStats all;        // every op together
  Counters engine;    // summed; retry_streak_max is the larger of the two
  uint64_t counter(const std::string& name) const;
  const OpStats& op(Op o) const { return ops[op_index(o)]; }
};
Summary summarize(const SideReport& server, const SideReport& client);

// Frames (node -> launcher). The decoders return nothing for a short or
// malformed payload.
Encoder encode(const PhaseRecord& r);
Encoder encode(const Progress& p);
Encoder encode_final(const SideReport& r);  // transport, errors, verified, totals
std::optional<PhaseRecord> decode_phase(std::span<const uint8_t> payload);
std::optional<Progress> decode_progress(std::span<const uint8_t> payload);
// Fills has_final, transport, errors, verified and totals of `into`.
bool decode_final(std::span<const uint8_t> payload, SideReport& into);

}  // namespace softrdma::traffic
