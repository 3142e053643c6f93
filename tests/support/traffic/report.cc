#include "traffic/report.h"

#include <algorithm>
#include <sstream>

namespace softrdma::traffic {

namespace {

uint64_t counter(const std::map<std::string, uint64_t>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

// Counters summed over both nodes for one phase.
uint64_t phase_counter(const NodeReport& a, const NodeReport& b, uint32_t index,
                       const std::string& k) {
  uint64_t v = 0;
  for (const NodeReport* r : {&a, &b}) {
    auto it = r->phases.find(index);
    if (it != r->phases.end()) v += counter(it->second.counters, k);
  }
  return v;
}

void print_row(std::FILE* out, const std::string& label, const std::string& op, const OpStats& s,
               int64_t ns, const std::string& extra) {
  const double mbps = ns > 0 ? double(s.bytes) * 1e3 / double(ns) : 0.0;
  const double lat_us = s.messages ? double(s.latency_ns) / double(s.messages) / 1e3 : 0.0;
  std::fprintf(out, "%-18s %-10s %8llu %14llu %10.1f %11.1f  %s\n", label.c_str(), op.c_str(),
               (unsigned long long)s.messages, (unsigned long long)s.bytes, mbps, lat_us,
               extra.c_str());
}

OpTable total_ops(const NodeReport& a, const NodeReport& b) {
  OpTable t{};
  for (const NodeReport* r : {&a, &b})
    for (const auto& [i, p] : r->phases)
      for (size_t k = 0; k < kOpCount; ++k) t[k].merge(p.ops[k]);
  return t;
}

}  // namespace

bool parse_line(const std::string& line, std::string& kind, Fields& fields) {
  std::istringstream in(line);
  if (!(in >> kind)) return false;
  fields.clear();
  std::string tok;
  while (in >> tok) {
    const size_t eq = tok.find('=');
    if (eq != std::string::npos) fields[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return true;
}

uint64_t field_u64(const Fields& f, const std::string& key) {
  auto it = f.find(key);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

NodeReport parse_report(const std::vector<std::string>& lines) {
  NodeReport r;
  std::string kind;
  Fields f;
  for (const std::string& line : lines) {
    if (!parse_line(line, kind, f)) continue;
    const uint32_t index = uint32_t(field_u64(f, "index"));
    if (kind == "phase") {
      r.phases[index].label = f["label"];
      r.phases[index].ns = int64_t(field_u64(f, "ns"));
    } else if (kind == "op") {
      const std::optional<Op> op = op_from_name(f["op"]);
      if (!op) continue;
      OpStats& s = r.phases[index].ops[op_index(*op)];
      s.messages = field_u64(f, "messages");
      s.bytes = field_u64(f, "bytes");
      s.latency_ns = field_u64(f, "latency_ns");
      s.max_length = uint32_t(field_u64(f, "max_length"));
    } else if (kind == "counters" || kind == "totals") {
      auto& m = kind == "counters" ? r.phases[index].counters : r.totals;
      for (const auto& [k, v] : f)
        if (k != "index" && k != "role") m[k] = std::strtoull(v.c_str(), nullptr, 10);
    } else if (kind == "final") {
      r.has_final = true;
      r.errors = field_u64(f, "errors");
      r.verified.completions = field_u64(f, "completions");
      r.verified.bytes_compared = field_u64(f, "bytes_compared");
      r.verified.crc_matches = field_u64(f, "crc_matches");
      r.verified.atomics = field_u64(f, "atomics");
      r.verified.sent = field_u64(f, "sent");
      r.verified.received = field_u64(f, "received");
      r.verified.lost = field_u64(f, "lost");
      r.verified.late = field_u64(f, "late");
      r.verified.duplicates = field_u64(f, "duplicates");
    }
  }
  return r;
}

void print_phase_lines(std::FILE* out, const std::string& role, uint32_t index,
                       const PhaseRecord& p) {
  std::fprintf(out, "phase index=%u role=%s label=%s ns=%lld\n", index, role.c_str(),
               p.label.c_str(), (long long)p.ns);
  for (Op op : kAllOps) {
    const OpStats& s = p.ops[op_index(op)];
    if (s.messages == 0) continue;
    std::fprintf(out,
                 "op index=%u role=%s op=%s messages=%llu bytes=%llu latency_ns=%llu "
                 "max_length=%u\n",
                 index, role.c_str(), std::string(op_info(op).name).c_str(),
                 (unsigned long long)s.messages, (unsigned long long)s.bytes,
                 (unsigned long long)s.latency_ns, s.max_length);
  }
  std::fprintf(out, "counters index=%u role=%s", index, role.c_str());
  for (const auto& [k, v] : p.counters)
    if (v != 0) std::fprintf(out, " %s=%llu", k.c_str(), (unsigned long long)v);
  std::fprintf(out, "\n");
  std::fflush(out);
}

void print_final_lines(std::FILE* out, const std::string& role, uint64_t errors, const Verified& v,
                       const std::map<std::string, uint64_t>& totals) {
  std::fprintf(out, "totals role=%s", role.c_str());
  for (const auto& [k, val] : totals)
    if (val != 0) std::fprintf(out, " %s=%llu", k.c_str(), (unsigned long long)val);
  std::fprintf(out,
               "\nfinal role=%s errors=%llu completions=%llu bytes_compared=%llu "
               "crc_matches=%llu atomics=%llu sent=%llu received=%llu lost=%llu late=%llu "
               "duplicates=%llu\n",
               role.c_str(), (unsigned long long)errors, (unsigned long long)v.completions,
               (unsigned long long)v.bytes_compared, (unsigned long long)v.crc_matches,
               (unsigned long long)v.atomics, (unsigned long long)v.sent,
               (unsigned long long)v.received, (unsigned long long)v.lost,
               (unsigned long long)v.late, (unsigned long long)v.duplicates);
  std::fflush(out);
}

void print_table(std::FILE* out, const NodeReport& server, const NodeReport& client) {
  std::fprintf(out, "%-18s %-10s %8s %14s %10s %11s  %s\n", "phase", "operation", "messages",
               "bytes", "MB/s", "avg lat us", "data messages lost / sent");
  for (const auto& [index, cp] : client.phases) {
    const auto sit = server.phases.find(index);
    const PhaseRecord* sp = sit == server.phases.end() ? nullptr : &sit->second;
    const int64_t ns = std::max(cp.ns, sp ? sp->ns : 0);
    const std::string extra = std::to_string(phase_counter(server, client, index, "lost")) +
                              " / " +
                              std::to_string(phase_counter(server, client, index, "sent"));
    OpStats total;
    int rows = 0;
    for (Op op : kAllOps) {
      OpStats s = cp.ops[op_index(op)];
      if (sp) s.merge(sp->ops[op_index(op)]);
      if (s.messages == 0) continue;
      print_row(out, rows == 0 ? cp.label : "", std::string(op_info(op).name), s, ns,
                rows == 0 ? extra : "");
      total.merge(s);
      ++rows;
    }
    if (rows > 1) print_row(out, "", "(all)", total, ns, "");
  }
}

std::string summary_line(const NodeReport& server, const NodeReport& client, bool pass,
                         std::string_view transport) {
  Verified v = server.verified;
  v.merge(client.verified);
  const OpTable ops = total_ops(server, client);
  OpStats all;
  for (const OpStats& s : ops) all.merge(s);
  auto both = [&](const std::string& k) {
    return counter(server.totals, k) + counter(client.totals, k);
  };
  std::ostringstream o;
  o << "summary status=" << (pass ? "PASS" : "FAIL") << " transport=" << transport << " errors=" << server.errors + client.errors
    << " completions=" << v.completions << " bytes_compared=" << v.bytes_compared
    << " crc_matches=" << v.crc_matches << " atomics=" << v.atomics << " messages=" << all.messages
    << " bytes=" << all.bytes << " retransmitted=" << both("retransmitted_packets")
    << " timeouts=" << both("retransmit_timeouts") << " retries=" << both("retries")
    << " retry_streak_max="
    << std::max(counter(server.totals, "retry_streak_max"),
                counter(client.totals, "retry_streak_max"))
    << " duplicate_requests=" << both("duplicate_requests")
    << " seq_naks=" << both("seq_naks_sent") << " uc_messages_dropped="
    << both("uc_messages_dropped") << " ud_no_receive_wqe=" << both("ud_no_receive_wqe")
    << " rx_malformed=" << both("rx_malformed") << " sent=" << v.sent
    << " received=" << v.received << " lost=" << v.lost << " late=" << v.late
    << " duplicates=" << v.duplicates;
  for (Op op : kAllOps) {
    const OpStats& s = ops[op_index(op)];
    o << " msgs_" << op_info(op).name << "=" << s.messages << " max_" << op_info(op).name << "="
      << s.max_length;
  }
  return o.str();
}

}  // namespace softrdma::traffic
