#include "traffic/options.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <sstream>

#include "traffic/launcher.h"

namespace softrdma::traffic {

namespace {

const char* const kDescription =
    "Two processes (server and client, softrdma-traffic-node) exchange data over verbs\n"
    "(softrdma's RoCEv2 on UDP loopback when run through `softrdma run`) with every\n"
    "operation of the transport and check every byte and completion. softrdma-demo starts\n"
    "both and prints a table. By hand, in two shells: softrdma-traffic-node\n"
    "--role=server --listen=PORT / --role=client --connect=HOST:PORT (with the same other\n"
    "options), each under `softrdma run --`.";

std::string op_list(const std::vector<Op>& ops) {
  std::string s;
  for (Op op : ops) s += (s.empty() ? "" : ",") + std::string(op_info(op).name);
  return s;
}

void add_traffic_options(CLI::App& app, RunOptions& o) {
  app.add_option_function<std::string>(
         "--transport",
         [&o](const std::string& v) { o.transport = *transport_from_name(v); },
         "rc (all ops), uc (SEND, SEND_IMM, WRITE, WRITE_IMM; lost messages counted), "
         "ud (SEND, SEND_IMM up to the MTU), srq (RC on one shared receive queue)")
      ->check(CLI::IsMember({"rc", "uc", "ud", "srq"}))
      ->default_str("rc");
  app.add_option("--seed", o.seed, "traffic plan and contents")->capture_default_str();
  app.add_option("--qps", o.qps, "QPs per process")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--loss", o.loss, "fault injection: loss on each process's transmit side")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--dup", o.dup, "fault injection: duplication")->check(CLI::Range(0.0, 0.99));
  app.add_option("--reorder", o.reorder, "fault injection: reordering")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--faults", o.faults, "full SOFTRDMA_FAULTS settings (docs/configuration.md)");
  app.add_option("--pcap", o.pcap, "capture the client's packets (both directions) to FILE");
}

// What the phases are made of.
void add_plan_options(CLI::App& app, RunOptions& o) {
  app.add_option("--mode", o.mode, "demo: every op at a few sizes, then a mix; test: mixes")
      ->check(CLI::IsMember({"demo", "test"}))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--ops",
         [&o](const std::string& list) {
           std::istringstream in(list);
           for (std::string name; std::getline(in, name, ',');) {
             const std::optional<Op> op = op_from_name(name);
             if (!op) throw CLI::ValidationError("--ops", "unknown op " + name);
             o.ops.push_back(*op);
           }
         },
         "one custom mixed phase of these ops: SEND SEND_IMM WRITE WRITE_IMM READ CMP_SWAP "
         "FETCH_ADD");
  app.add_option("--messages", o.messages, "messages per QP for --ops")
      ->check(CLI::Range(1u, 1u << 24))
      ->capture_default_str();
  app.add_option("--scale", o.scale, "multiply message counts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-size", o.max_size, "largest message, bytes")
      ->check(CLI::Range(8u, 1u << 30))
      ->capture_default_str();
  app.add_option("--depth", o.depth, "work requests outstanding per QP")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--mtu", o.mtu, "path MTU")
      ->check(CLI::IsMember({256, 512, 1024, 2048, 4096}))
      ->capture_default_str();
}

// Pacing, limits, output and the checks' own test.
void add_run_options(CLI::App& app, RunOptions& o) {
  app.add_option("--ack-timeout", o.ack_timeout, "RC local ACK timeout 4.096us*2^N")
      ->check(CLI::Range(1, 31))
      ->capture_default_str();
  app.add_option("--time-limit", o.time_limit_s, "stop the run after S seconds")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option("--stall-timeout", o.stall_timeout_s,
                 "a node gives up after S seconds without progress")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_flag("-v,--verbose", o.verbose, "print every engine counter of each node");
  app.add_flag("--inject-data-errors", o.inject_data_errors,
               "each process spoils one received SEND, READ result and WRITE target range "
               "before checking it: the run must fail");
  app.add_option("--softrdma", o.softrdma,
                 "the softrdma command (runs the nodes, reports their engine counters); "
                 "default: the one beside this program");
  app.add_option("--node", o.node,
                 "the node program; default: softrdma-traffic-node beside this program");
}

void add_node_options(CLI::App& app, RunOptions& o) {
  app.add_option_function<std::string>(
         "--role", [&o](const std::string& v) { o.role = v == "server" ? Role::kServer : Role::kClient; },
         "run one node: server or client")
      ->check(CLI::IsMember({"server", "client"}));
  app.add_option("--oob-fd", o.oob_fd, "the out-of-band socket (from the launcher)");
  app.add_option("--report-fd", o.report_fd, "the socket for results (from the launcher)");
  app.add_option("--listen", o.port, "server: TCP port for the out-of-band channel");
  app.add_option_function<std::string>(
      "--connect",
      [&o](const std::string& v) {
        const size_t colon = v.rfind(':');
        if (colon == std::string::npos) throw CLI::ValidationError("--connect", "HOST:PORT");
        o.host = v.substr(0, colon);
        o.port = uint16_t(std::stoul(v.substr(colon + 1)));
      },
      "client: HOST:PORT of the server's out-of-band channel");
}

}  // namespace

bool parse_options(int argc, char** argv, const std::string& program, RunOptions& o,
                   int& exit_status) {
  CLI::App app(kDescription, program);
  add_traffic_options(app, o);
  add_plan_options(app, o);
  add_run_options(app, o);
  add_node_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    exit_status = app.exit(e);
    return false;
  }
  if (o.role && o.oob_fd < 0 && o.port == 0) {
    std::fprintf(stderr,
                 "a node needs --oob-fd, --listen=PORT (server) or --connect=HOST:PORT (client)\n");
    exit_status = 2;
    return false;
  }
  return true;
}

std::vector<PhaseSpec> phases_for(const RunOptions& o) {
  PhaseListOptions p{o.max_size, o.scale, o.depth, o.transport, o.mtu};
  if (o.transport == Transport::kUd) p.max_size = std::min(p.max_size, o.mtu);
  std::vector<PhaseSpec> phases;
  if (!o.ops.empty()) {
    phases = custom_phases(p, o.ops, o.messages);
  } else {
    phases = o.mode == "test" ? test_phases(p) : demo_phases(p);
  }
  return restrict_to_transport(std::move(phases), p);
}

std::string fault_settings_for(const RunOptions& o, Role role) {
  const uint64_t seed = o.seed * 2 + uint64_t(role);
  if (!o.faults.empty()) {
    if (o.faults.find("seed=") != std::string::npos) return o.faults;
    return o.faults + ",seed=" + std::to_string(seed);
  }
  if (o.loss == 0 && o.dup == 0 && o.reorder == 0) return "";
  std::ostringstream s;
  s << "loss=" << o.loss << ",dup=" << o.dup << ",reorder=" << o.reorder << ",seed=" << seed;
  return s.str();
}

std::vector<std::string> to_node_args(const RunOptions& o) {
  std::ostringstream scale;
  scale << o.scale;
  std::vector<std::string> a = {
      "--transport=" + std::string(transport_name(o.transport)),
      "--seed=" + std::to_string(o.seed),
      "--qps=" + std::to_string(o.qps),
      "--mode=" + o.mode,
      "--scale=" + scale.str(),
      "--max-size=" + std::to_string(o.max_size),
      "--depth=" + std::to_string(o.depth),
      "--mtu=" + std::to_string(o.mtu),
      "--ack-timeout=" + std::to_string(o.ack_timeout),
      "--messages=" + std::to_string(o.messages),
      "--stall-timeout=" + std::to_string(o.stall_timeout_s),
      "--softrdma=" + softrdma_command(o)};
  if (!o.ops.empty()) a.push_back("--ops=" + op_list(o.ops));
  if (o.inject_data_errors) a.push_back("--inject-data-errors");
  return a;
}

namespace {

// A command installed beside the running program (the build tree's tools/).
std::string beside_this_program(const char* name) {
  return (std::filesystem::path(self_path()).parent_path() / name).string();
}

}  // namespace

std::string softrdma_command(const RunOptions& o) {
  return o.softrdma.empty() ? beside_this_program("softrdma") : o.softrdma;
}

std::string node_command(const RunOptions& o) {
  return o.node.empty() ? beside_this_program("softrdma-traffic-node") : o.node;
}

SideConfig node_config(const RunOptions& o, Role role) {
  SideConfig c;
  c.role = role;
  c.transport = o.transport;
  c.seed = o.seed;
  c.qps = o.qps;
  c.mtu = o.mtu;
  c.ack_timeout = uint8_t(o.ack_timeout);
  c.phases = phases_for(o);
  c.oob_fd = o.oob_fd;
  c.report_fd = o.report_fd;
  c.oob_port = o.port;
  c.oob_host = o.host;
  c.stall_timeout_ms = o.stall_timeout_s * 1000;
  c.status_tool = softrdma_command(o);
  c.inject_data_errors = o.inject_data_errors;
  return c;
}

}  // namespace softrdma::traffic
