// softrdma-demo: the README's main job. Two processes exchange data over RoCEv2 on
// UDP loopback with every RC operation (SEND, SEND with immediate, RDMA WRITE, RDMA
// WRITE with immediate, RDMA READ, atomic compare-and-swap and fetch-and-add),
// check every byte and every completion, and the table says what moved and how fast.
//
// Without --role it is the launcher: it starts itself twice (server and client)
// and prints the table. With --role it is one of those two processes (the traffic
// engine in tools/traffic/).
#include <cstdio>
#include <string>

#include "traffic/launcher.h"
#include "traffic/node.h"
#include "traffic/options.h"
#include "traffic/report.h"

namespace {

using namespace softrdma::traffic;

void print_header(const RunOptions& o, const std::vector<PhaseSpec>& phases) {
  const std::string faults = fault_settings_for(o, Role::kClient);
  std::printf(
      "softrdma-demo: 2 processes, RoCEv2 over UDP loopback, %u RC QPs each, seed %llu, "
      "path MTU %u\n",
      o.qps, (unsigned long long)o.seed, o.mtu);
  std::printf("faults (each process's transmit side): %s\n",
              faults.empty() ? "none" : faults.c_str());
  if (!o.pcap.empty())
    std::printf("capture: %s (the client's packets, both directions)\n", o.pcap.c_str());
  std::printf(
      "%zu phases; every byte is checked by the receiver or target, every completion "
      "by its owner\n\n",
      phases.size());
  std::fflush(stdout);
}

void print_verification(const NodeReport& s, const NodeReport& c) {
  Verified v = s.verified;
  v.merge(c.verified);
  std::printf(
      "\nverified: %llu work completions, %llu bytes compared byte for byte, "
      "%llu ranges with matching CRC-32 in both processes, %llu atomic values\n",
      (unsigned long long)v.completions, (unsigned long long)v.bytes_compared,
      (unsigned long long)v.crc_matches, (unsigned long long)v.atomics);
  for (const auto* r : {&s, &c}) {
    const char* who = r == &s ? "server" : "client";
    auto get = [&](const char* k) {
      auto it = r->totals.find(k);
      return (unsigned long long)(it == r->totals.end() ? 0 : it->second);
    };
    std::printf(
        "%s: %llu packets sent, %llu retransmitted (%llu timeouts, %llu NAKs received), "
        "fault injector dropped %llu / duplicated %llu / reordered %llu, errors %llu\n",
        who, get("tx_packets"), get("retransmitted_packets"), get("retransmit_timeouts"),
        get("seq_naks_received"), get("faults.tx_dropped"), get("faults.tx_duplicated"),
        get("faults.tx_reordered"), (unsigned long long)r->errors);
  }
}

int run_launcher(const RunOptions& o) {
  print_header(o, phases_for(o));
  const PairResult r = launch_pair(self_path(), o.forwarded, o.time_limit_s);
  if (!r.error.empty()) {
    std::fprintf(stderr, "softrdma-demo: %s\n", r.error.c_str());
    return 2;
  }
  if (o.verbose) {
    for (const std::string& l : r.server.lines) std::printf("  %s\n", l.c_str());
    for (const std::string& l : r.client.lines) std::printf("  %s\n", l.c_str());
  }
  const NodeReport server = parse_report(r.server.lines);
  const NodeReport client = parse_report(r.client.lines);
  print_table(stdout, server, client);
  print_verification(server, client);
  const bool pass = !r.timed_out && r.server.exit_code == 0 && r.client.exit_code == 0 &&
                    server.has_final && client.has_final && server.errors == 0 &&
                    client.errors == 0;
  if (r.timed_out)
    std::printf("the run exceeded --time-limit=%d s and was stopped\n", o.time_limit_s);
  for (const auto* c : {&r.server, &r.client}) {
    if (c->exit_code != 0)
      std::printf("%s process: exit code %d%s\n", c == &r.server ? "server" : "client",
                  c->exit_code, c->signal ? (", signal " + std::to_string(c->signal)).c_str() : "");
  }
  std::printf("%s\n", summary_line(server, client, pass).c_str());
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions o;
  std::string error;
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(usage(argv[0]).c_str(), stdout);
    return 0;
  }
  if (!parse_options(argc, argv, o, error)) {
    std::fprintf(stderr, "softrdma-demo: %s\n%s", error.c_str(), usage(argv[0]).c_str());
    return 2;
  }
  if (o.role) {
    Node node(node_config(o, *o.role));
    return node.run();
  }
  return run_launcher(o);
}
