// softrdma-demo: the README's main job, an ordinary verbs program (it includes only
// <infiniband/verbs.h> and links libibverbs). Two processes exchange data over
// RoCEv2 on UDP loopback with every operation of the transport (RC: SEND, SEND with
// immediate, RDMA WRITE, RDMA WRITE with immediate, RDMA READ, atomic
// compare-and-swap and fetch-and-add; UC, UD, and RC on an SRQ: what those offer),
// check every byte and every completion, and the table says what moved and how fast.
//
// Without --role it is the launcher: it starts itself twice (server and client)
// through `softrdma run`, so both run on softrdma's drop-in libibverbs with the
// fault and capture settings in their environment, and prints the table. With
// --role it is one of those two processes (tests/support/traffic/).
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
  const std::string transport(transport_name(o.transport));
  std::printf(
      "softrdma-demo: 2 processes, verbs on softrdma (RoCEv2 over UDP loopback), %u %s QPs "
      "each, seed %llu, path MTU %u\n",
      o.qps, transport.c_str(), (unsigned long long)o.seed, o.mtu);
  std::printf("faults (SOFTRDMA_FAULTS of each process, transmit side): %s\n",
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
      "%llu ranges with matching CRC-32 in both processes, %llu atomic values\n"
      "data messages: %llu sent, %llu arrived intact, %llu lost (never arrived; UC, UD), "
      "%llu late, %llu duplicates\n",
      (unsigned long long)v.completions, (unsigned long long)v.bytes_compared,
      (unsigned long long)v.crc_matches, (unsigned long long)v.atomics,
      (unsigned long long)v.sent, (unsigned long long)v.received, (unsigned long long)v.lost,
      (unsigned long long)v.late, (unsigned long long)v.duplicates);
  for (const auto* r : {&s, &c}) {
    const char* who = r == &s ? "server" : "client";
    auto get = [&](const char* k) {
      auto it = r->totals.find(k);
      return (unsigned long long)(it == r->totals.end() ? 0 : it->second);
    };
    std::printf(
        "%s (engine counters from `softrdma status`): %llu packets sent, %llu received, %llu "
        "retransmitted (%llu timeouts, %llu NAKs received), %llu duplicate requests, UC "
        "messages dropped %llu, errors %llu\n",
        who, get("tx_packets"), get("rx_packets"), get("retransmitted_packets"),
        get("retransmit_timeouts"), get("seq_naks_received"), get("duplicate_requests"),
        get("uc_messages_dropped"), (unsigned long long)r->errors);
  }
}

// The command line of one node: `softrdma run -- <this program> <options> --role=R`,
// and its environment: the library's fault settings (the seed differs per role)
// and, for the client, the capture file (it sees both directions).
ChildSpec node_spec(const RunOptions& o, Role role) {
  ChildSpec c;
  c.argv = {softrdma_command(o), "run", "--", self_path()};
  for (std::string& a : to_node_args(o)) c.argv.push_back(std::move(a));
  c.argv.push_back("--role=" + std::string(role_name(role)));
  c.env.emplace_back("SOFTRDMA_FAULTS", fault_settings_for(o, role));
  c.env.emplace_back("SOFTRDMA_PCAP", role == Role::kClient ? o.pcap : "");
  return c;
}

int run_launcher(const RunOptions& o) {
  print_header(o, phases_for(o));
  const PairResult r =
      launch_pair(node_spec(o, Role::kServer), node_spec(o, Role::kClient), o.time_limit_s);
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
  std::printf("%s\n", summary_line(server, client, pass, transport_name(o.transport)).c_str());
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions o;
  int exit_status = 0;
  if (!parse_options(argc, argv, o, exit_status)) return exit_status;
  if (o.role) {
    Node node(node_config(o, *o.role));
    return node.run();
  }
  return run_launcher(o);
}
