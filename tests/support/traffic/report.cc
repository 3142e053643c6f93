#include "traffic/report.h"

#include <algorithm>

namespace softrdma::traffic {

namespace {

// Verified's fields in one order, for both directions of the encoding.
template <typename V, typename F>
void each_verified(V& v, F f) {
  for (auto* field : {&v.completions, &v.bytes_compared, &v.crc_matches, &v.atomics, &v.sent,
                      &v.received, &v.lost, &v.late, &v.duplicates})
    f(*field);
}

}  // namespace

uint64_t Summary::counter(const std::string& name) const {
  auto it = engine.find(name);
  return it == engine.end() ? 0 : it->second;
}

Summary summarize(const NodeReport& server, const NodeReport& client) {
  Summary s;
  for (const NodeReport* r : {&server, &client}) {
    s.errors += r->errors;
    s.verified.merge(r->verified);
    for (const auto& [index, p] : r->phases)
      for (size_t k = 0; k < kOpCount; ++k) s.ops[k].merge(p.ops[k]);
    for (const auto& [name, value] : r->totals) {
      uint64_t& sum = s.engine[name];
      // A streak is a maximum, not an amount: the larger process's is the run's.
      sum = name == "retry_streak_max" ? std::max(sum, value) : sum + value;
    }
  }
  for (const OpStats& o : s.ops) s.all.merge(o);
  return s;
}

Encoder encode(const PhaseRecord& r) {
  Encoder e;
  e.u32(r.index).str(r.label).u64(uint64_t(r.ns)).u64(r.sent).u64(r.lost);
  for (const OpStats& s : r.ops) e.u64(s.messages).u64(s.bytes).u64(s.latency_ns).u32(s.max_length);
  return e;
}

std::optional<PhaseRecord> decode_phase(std::span<const uint8_t> payload) {
  Decoder d(payload);
  PhaseRecord r;
  r.index = d.u32();
  r.label = d.str();
  r.ns = int64_t(d.u64());
  r.sent = d.u64();
  r.lost = d.u64();
  for (OpStats& s : r.ops) {
    s.messages = d.u64();
    s.bytes = d.u64();
    s.latency_ns = d.u64();
    s.max_length = d.u32();
  }
  if (!d.ok() || !d.at_end()) return std::nullopt;
  return r;
}

Encoder encode(const Progress& p) {
  Encoder e;
  e.u32(p.phase).u64(p.done).u64(p.total);
  return e;
}

std::optional<Progress> decode_progress(std::span<const uint8_t> payload) {
  Decoder d(payload);
  Progress p;
  p.phase = d.u32();
  p.done = d.u64();
  p.total = d.u64();
  if (!d.ok() || !d.at_end()) return std::nullopt;
  return p;
}

Encoder encode_final(const NodeReport& r) {
  Encoder e;
  e.u8(uint8_t(r.transport)).u64(r.errors);
  each_verified(r.verified, [&](uint64_t v) { e.u64(v); });
  e.u32(uint32_t(r.totals.size()));
  for (const auto& [name, value] : r.totals) e.str(name).u64(value);
  return e;
}

bool decode_final(std::span<const uint8_t> payload, NodeReport& into) {
  Decoder d(payload);
  NodeReport r;
  const uint8_t transport = d.u8();
  r.errors = d.u64();
  each_verified(r.verified, [&](uint64_t& v) { v = d.u64(); });
  const uint32_t n = d.u32();
  for (uint32_t i = 0; i < n && d.ok(); ++i) {
    std::string name = d.str();
    r.totals[std::move(name)] = d.u64();
  }
  if (!d.ok() || !d.at_end() || transport > uint8_t(Transport::kSrq)) return false;
  into.has_final = true;
  into.transport = Transport(transport);
  into.errors = r.errors;
  into.verified = r.verified;
  into.totals = std::move(r.totals);
  return true;
}

}  // namespace softrdma::traffic
