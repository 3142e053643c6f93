// softrdma-demo: the README's main job. Two processes exchange data over RoCEv2 on
// UDP loopback with every operation of the transport (RC: SEND, SEND with
// immediate, RDMA WRITE, RDMA WRITE with immediate, RDMA READ, atomic
// compare-and-swap and fetch-and-add; UC, UD, and RC on an SRQ: what those offer);
// they check every byte and every completion, and this program prints what moved,
// how fast, and what was verified.
//
// The checking is the traffic oracle's (tests/support/traffic, the integration
// tests' too): run_traffic starts two softrdma-traffic-node processes through
// `softrdma run`, so both are ordinary verbs programs on softrdma's drop-in
// libibverbs, and hands back their records. This file is only the report: a table
// row per phase as it ends, a progress line while one runs, the verdict.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "traffic/run.h"

namespace {

using namespace softrdma::traffic;
using Clock = std::chrono::steady_clock;

// Without a terminal (a log, a pipe) a long phase says how far it is this often.
constexpr auto kPlainProgressEvery = std::chrono::seconds(5);

void print_row(const std::string& label, const std::string& op, const OpStats& s, int64_t ns,
               const std::string& extra) {
  const double mbps = ns > 0 ? double(s.bytes) * 1e3 / double(ns) : 0.0;
  const double lat_us = s.messages ? double(s.latency_ns) / double(s.messages) / 1e3 : 0.0;
  std::printf("%-18s %-10s %8llu %14llu %10.1f %11.1f  %s\n", label.c_str(), op.c_str(),
              (unsigned long long)s.messages, (unsigned long long)s.bytes, mbps, lat_us,
              extra.c_str());
}

// The table: a row per operation of each phase as both nodes finish it, both
// nodes' issued messages together; a progress line while a phase runs (rewritten
// in place on a terminal, a plain line now and then otherwise).
class Report : public RunObserver {
 public:
  explicit Report(std::vector<PhaseSpec> phases)
      : phases_(std::move(phases)), tty_(isatty(STDOUT_FILENO) != 0) {}

  void on_progress(const Progress& p) override {
    if (p.phase >= phases_.size() || p.total == 0) return;
    const auto now = Clock::now();
    if (p.phase != phase_) {
      phase_ = p.phase;
      last_plain_ = now;
    }
    if (!tty_ && now - last_plain_ < kPlainProgressEvery) return;  // short phases say nothing
    last_plain_ = now;
    std::printf("%s  phase %u/%zu %s: %llu%% (%llu of %llu messages)%s", tty_ ? "\r\033[K" : "",
                p.phase + 1, phases_.size(), phases_[p.phase].label.c_str(),
                (unsigned long long)(p.done * 100 / p.total), (unsigned long long)p.done,
                (unsigned long long)p.total, tty_ ? "" : "\n");
    std::fflush(stdout);
  }

  void on_phase(const PhaseRecord& server, const PhaseRecord& client) override {
    if (tty_) std::printf("\r\033[K");  // the progress line gives way to the row
    // After the nodes' set-up lines on stderr, so they do not split the table.
    if (!header_printed_) {
      std::printf("%-18s %-10s %8s %14s %10s %11s  %s\n", "phase", "operation", "messages",
                  "bytes", "MB/s", "avg lat us", "data messages lost / sent");
      header_printed_ = true;
    }
    const int64_t ns = std::max(server.ns, client.ns);
    const std::string extra = std::to_string(server.lost + client.lost) + " / " +
                              std::to_string(server.sent + client.sent);
    OpStats total;
    int rows = 0;
    for (Op op : kAllOps) {
      OpStats s = client.ops[op_index(op)];
      s.merge(server.ops[op_index(op)]);
      if (s.messages == 0) continue;
      print_row(rows == 0 ? client.label : "", std::string(op_info(op).name), s, ns,
                rows == 0 ? extra : "");
      total.merge(s);
      ++rows;
    }
    if (rows > 1) print_row("", "(all)", total, ns, "");
    std::fflush(stdout);
  }

 private:
  std::vector<PhaseSpec> phases_;
  bool tty_;
  bool header_printed_ = false;
  uint32_t phase_ = ~0u;
  Clock::time_point last_plain_;  // the phase's start, or its last plain progress line
};

void print_header(const RunOptions& o, size_t phases) {
  const std::string faults = fault_settings_for(o, Role::kClient);
  const char* transport = std::getenv("SOFTRDMA_TRANSPORT");
  // docs/decisions/same-host.md: faults and capture need packets, so the wire.
  const bool wire = !faults.empty() || !o.pcap.empty() ||
                    (transport != nullptr && std::string(transport) == "udp");
  std::printf("softrdma-demo: 2 processes, verbs on softrdma, %u %s QPs each, seed %llu, path MTU %u\n",
              o.qps, std::string(transport_name(o.transport)).c_str(), (unsigned long long)o.seed,
              o.mtu);
  std::printf("path: %s\n", wire ? "RoCEv2 over UDP loopback"
                                 : "same-host (cross-memory attach; UDP loopback if not "
                                   "permitted; SOFTRDMA_TRANSPORT=udp for the wire)");
  std::printf("faults (SOFTRDMA_FAULTS of each process, transmit side): %s\n",
              faults.empty() ? "none" : faults.c_str());
  if (!o.pcap.empty())
    std::printf("capture: %s (the client's packets, both directions)\n", o.pcap.c_str());
  std::printf(
      "%zu phases; every byte is checked by the receiver or target, every completion by its "
      "owner\n\n",
      phases);
  std::fflush(stdout);
}

// A node's engine counters: the wire's packets, or what the same-host path moved.
void print_node(const char* who, const SideReport& r, bool verbose) {
  auto get = [&](const char* k) {
    auto it = r.totals.find(k);
    return (unsigned long long)(it == r.totals.end() ? 0 : it->second);
  };
  std::printf("%s (engine counters from `softrdma status`): ", who);
  const bool host = get("host_bytes") != 0, wire = get("tx_packets") != 0 || !host;
  if (host)
    std::printf("same-host path: %llu sends, %llu writes, %llu reads, %llu atomics, %llu bytes%s",
                get("host_sends"), get("host_writes"), get("host_reads"), get("host_atomics"),
                get("host_bytes"), wire ? "; " : "");
  if (wire)
    std::printf(
        "wire: %llu packets sent, %llu received, %llu retransmitted (%llu timeouts, %llu NAKs "
        "received), %llu duplicate requests, UC messages dropped %llu",
        get("tx_packets"), get("rx_packets"), get("retransmitted_packets"),
        get("retransmit_timeouts"), get("seq_naks_received"), get("duplicate_requests"),
        get("uc_messages_dropped"));
  std::printf("; errors %llu\n", (unsigned long long)r.errors);
  if (!verbose) return;
  for (const auto& [name, value] : r.totals)
    std::printf("  %s.%s %llu\n", who, name.c_str(), (unsigned long long)value);
}

void print_verdict(const RunOptions& o, const RunResult& r) {
  const Verified& v = r.summary.verified;
  std::printf(
      "\nverified: %llu work completions, %llu bytes compared byte for byte, %llu ranges with "
      "matching CRC-32 in both processes, %llu atomic values\n"
      "data messages: %llu sent, %llu arrived intact, %llu lost (never arrived; UC, UD), %llu "
      "late, %llu duplicates\n",
      (unsigned long long)v.completions, (unsigned long long)v.bytes_compared,
      (unsigned long long)v.crc_matches, (unsigned long long)v.atomics,
      (unsigned long long)v.sent, (unsigned long long)v.received, (unsigned long long)v.lost,
      (unsigned long long)v.late, (unsigned long long)v.duplicates);
  print_node("server", r.nodes.server.report, o.verbose);
  print_node("client", r.nodes.client.report, o.verbose);
  if (!r.nodes.error.empty()) std::printf("launcher: %s\n", r.nodes.error.c_str());
  if (r.nodes.timed_out)
    std::printf("the run exceeded --time-limit=%d s and was stopped\n", o.time_limit_s);
  for (const auto* c : {&r.nodes.server, &r.nodes.client}) {
    if (c->exit_code != 0 || c->signal != 0)
      std::printf("%s process: exit code %d, signal %d\n",
                  c == &r.nodes.server ? "server" : "client", c->exit_code, c->signal);
  }
  std::printf("%s: %s, %llu errors\n", r.pass ? "PASS" : "FAIL",
              std::string(transport_name(o.transport)).c_str(),
              (unsigned long long)r.summary.errors);
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions o;
  int exit_status = 0;
  if (!parse_options(argc, argv, "softrdma-demo", o, exit_status)) return exit_status;
  if (o.role) {
    std::fprintf(stderr, "softrdma-demo: a node is softrdma-traffic-node (--role is its option)\n");
    return 2;
  }
  const std::vector<PhaseSpec> phases = phases_for(o);
  print_header(o, phases.size());
  Report report(phases);
  const RunResult r = run_traffic(o, &report);
  print_verdict(o, r);
  return r.pass ? 0 : 1;
}
