#include "traffic/report.h"

#include <algorithm>

namespace softrdma::traffic {

namespace {

// Each record's fields are listed once (k...Fields below) and one visitor writes
// them, another reads them: the two directions cannot disagree on order or width.
struct Put {
  Encoder& e;
  void operator()(uint32_t v) { e.u32(v); }
  void operator()(uint64_t v) { e.u64(v); }
  void operator()(int64_t v) { e.u64(uint64_t(v)); }
  void operator()(Transport v) { e.u8(uint8_t(v)); }
  void operator()(const std::string& v) { e.str(v); }
  void operator()(const Counters& v) {
    e.u32(uint32_t(v.size()));
    for (const auto& [name, value] : v) e.str(name).u64(value);
  }
};

struct Get {
  Decoder& d;
  bool valid = true;  // what the Decoder cannot judge: an enumeration's range
  void operator()(uint32_t& v) { v = d.u32(); }
  void operator()(uint64_t& v) { v = d.u64(); }
  void operator()(int64_t& v) { v = int64_t(d.u64()); }
  void operator()(Transport& v) {
    const uint8_t raw = d.u8();
    valid &= raw <= uint8_t(Transport::kSrq);
    v = Transport(raw);
  }
  void operator()(std::string& v) { v = d.str(); }
  void operator()(Counters& v) {
    const uint32_t n = d.u32();
    for (uint32_t i = 0; i < n && d.ok(); ++i) {
      std::string name = d.str();
      v[std::move(name)] = d.u64();
    }
  }
};

// The fields of each record, in wire order; `r` may be const (encoding) or not.
constexpr auto kPhaseFields = [](auto& r, auto& f) {
  f(r.index), f(r.label), f(r.ns), f(r.sent), f(r.lost);
  for (auto& s : r.ops) f(s.messages), f(s.bytes), f(s.latency_ns), f(s.max_length);
};
constexpr auto kProgressFields = [](auto& p, auto& f) { f(p.phase), f(p.done), f(p.total); };
// The final record: a SideReport without its phases (sent one by one before).
constexpr auto kFinalFields = [](auto& r, auto& f) {
  f(r.transport), f(r.errors);
  auto& v = r.verified;
  f(v.completions), f(v.bytes_compared), f(v.crc_matches), f(v.atomics), f(v.sent),
      f(v.received), f(v.lost), f(v.late), f(v.duplicates);
  f(r.totals);
};

template <typename T, typename Fields>
Encoder encode_as(const T& record, Fields fields) {
  Encoder e;
  Put put{e};
  fields(record, put);
  return e;
}

// Nothing when the payload is short, long or out of range.
template <typename T, typename Fields>
std::optional<T> decode_as(std::span<const uint8_t> payload, Fields fields) {
  Decoder d(payload);
  Get get{d};
  T record;
  fields(record, get);
  if (!d.ok() || !d.at_end() || !get.valid) return std::nullopt;
  return record;
}

}  // namespace

uint64_t Summary::counter(const std::string& name) const {
  auto it = engine.find(name);
  return it == engine.end() ? 0 : it->second;
}

Summary summarize(const SideReport& server, const SideReport& client) {
  Summary s;
  for (const SideReport* r : {&server, &client}) {
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

Encoder encode(const PhaseRecord& r) { return encode_as(r, kPhaseFields); }
Encoder encode(const Progress& p) { return encode_as(p, kProgressFields); }
Encoder encode_final(const SideReport& r) { return encode_as(r, kFinalFields); }

std::optional<PhaseRecord> decode_phase(std::span<const uint8_t> payload) {
  return decode_as<PhaseRecord>(payload, kPhaseFields);
}

std::optional<Progress> decode_progress(std::span<const uint8_t> payload) {
  return decode_as<Progress>(payload, kProgressFields);
}

bool decode_final(std::span<const uint8_t> payload, SideReport& into) {
  std::optional<SideReport> r = decode_as<SideReport>(payload, kFinalFields);
  if (!r) return false;
  r->phases = std::move(into.phases);  // those came before, one record each
  into = std::move(*r);
  into.has_final = true;
  return true;
}

}  // namespace softrdma::traffic
