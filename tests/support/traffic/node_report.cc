// A node's results: records to the launcher over the report channel (report.h),
// or, for a node started by hand, a few readable lines on stdout. The engine's
// counters come from `softrdma status` while the device is still open.
#include <cstdio>

#include "traffic/node.h"
#include "traffic/status.h"

namespace softrdma::traffic {

namespace {

// A long phase shows movement at this pace; more often only costs the launcher
// wake-ups on the two cores the progress threads need.
constexpr int64_t kProgressEveryNs = 250'000'000;
constexpr int kFinalDrainMs = 10000;

}  // namespace

void Side::report_phase(uint32_t phase, int64_t ns, const Verified& before) {
  PhaseRecord r;
  r.index = phase;
  r.label = config_.phases[phase].label;
  r.ns = ns;
  for (const QpSlot& s : qps_)
    for (size_t k = 0; k < kOpCount; ++k) r.ops[k].merge(s.lane->stats()[k]);
  r.sent = verified_.sent - before.sent;
  r.lost = verified_.lost - before.lost;
  if (report_) return report_->send(MsgType::kPhaseResult, encode(r));
  OpStats all;
  for (const OpStats& s : r.ops) all.merge(s);
  std::printf("[%s] phase %u %s: %llu messages, %llu bytes in %.1f ms; data messages lost %llu\n",
              std::string(role_name(config_.role)).c_str(), phase, r.label.c_str(),
              (unsigned long long)all.messages, (unsigned long long)all.bytes, double(ns) / 1e6,
              (unsigned long long)r.lost);
}

void Side::report_progress(uint32_t phase, int64_t now) {
  if (!report_) return;
  // Whatever is queued goes out now: the launcher waits on these frames.
  report_->flush();
  if (now - last_progress_report_ns_ < kProgressEveryNs) return;
  last_progress_report_ns_ = now;
  Progress p;
  p.phase = phase;
  for (const QpSlot& s : qps_) {
    p.done += s.lane->completed();
    p.total += s.lane->planned();
  }
  report_->send(MsgType::kProgress, encode(p));
}

void Side::report_final() {
  const std::string role(role_name(config_.role));
  SideReport r;
  r.transport = config_.transport;
  r.errors = errors_.count();
  r.verified = verified_;
  if (!config_.status_tool.empty()) {
    std::string error;
    r.totals = engine_counters_from_status(config_.status_tool, error);
    if (!error.empty()) std::fprintf(stderr, "[%s] no engine counters: %s\n", role.c_str(), error.c_str());
  }
  if (report_) {
    report_->send(MsgType::kFinalResult, encode_final(r));
    if (!report_->drain(kFinalDrainMs))
      std::fprintf(stderr, "[%s] the launcher did not take the results\n", role.c_str());
    return;
  }
  const Verified& v = r.verified;
  std::printf(
      "[%s] errors %llu; verified %llu completions, %llu bytes, %llu CRC ranges, %llu atomics; "
      "data messages %llu sent, %llu arrived intact, %llu lost\n",
      role.c_str(), (unsigned long long)r.errors, (unsigned long long)v.completions,
      (unsigned long long)v.bytes_compared, (unsigned long long)v.crc_matches,
      (unsigned long long)v.atomics, (unsigned long long)v.sent, (unsigned long long)v.received,
      (unsigned long long)v.lost);
  // By hand (no launcher to read the report): the engine's counters that moved,
  // so a run across a lossy fabric shows how it recovered (tests/conformance/
  // lossy_fabric.sh reads them).
  std::string moved;
  for (const auto& [name, value] : r.totals)
    if (value != 0) moved += " " + name + "=" + std::to_string(value);
  if (!moved.empty()) std::printf("[%s] engine counters:%s\n", role.c_str(), moved.c_str());
}

}  // namespace softrdma::traffic
