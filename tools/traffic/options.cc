#include "traffic/options.h"

#include <cstdlib>
#include <sstream>

#include "transport/fake/fault_settings.h"

namespace softrdma::traffic {

namespace {

bool to_u64(const std::string& s, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(s.c_str(), &end, 0);
  return !s.empty() && end != nullptr && *end == '\0' && errno == 0;
}

bool to_double(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end != nullptr && *end == '\0';
}

template <typename T>
bool to_uint(const std::string& s, T& out, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  if (!to_u64(s, v) || v < lo || v > hi) return false;
  out = T(v);
  return true;
}

bool parse_ops(const std::string& list, std::vector<Op>& out) {
  std::istringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    const std::optional<Op> op = op_from_name(name);
    if (!op) return false;
    out.push_back(*op);
  }
  return !out.empty();
}

bool parse_connect(const std::string& v, RunOptions& o) {
  const size_t colon = v.rfind(':');
  if (colon == std::string::npos) return false;
  o.host = v.substr(0, colon);
  return to_uint(v.substr(colon + 1), o.port, 1, 65535);
}

// One --key=value option. False: not valid.
bool apply(const std::string& key, const std::string& v, RunOptions& o) {
  if (key == "seed") return to_u64(v, o.seed);
  if (key == "qps") return to_uint(v, o.qps, 1, 64);
  if (key == "loss") return to_double(v, o.loss) && o.loss >= 0 && o.loss < 1;
  if (key == "dup") return to_double(v, o.dup) && o.dup >= 0 && o.dup < 1;
  if (key == "reorder") return to_double(v, o.reorder) && o.reorder >= 0 && o.reorder < 1;
  if (key == "faults") {
    o.faults = v;
    return true;
  }
  if (key == "pcap") {
    o.pcap = v;
    return !v.empty();
  }
  if (key == "mode") {
    o.mode = v;
    return v == "demo" || v == "test";
  }
  if (key == "scale") return to_double(v, o.scale) && o.scale > 0;
  if (key == "max-size") return to_uint(v, o.max_size, 8, 1u << 30);
  if (key == "depth") return to_uint(v, o.depth, 1, 64);
  if (key == "mtu") return to_uint(v, o.mtu, 256, 4096) && (o.mtu & (o.mtu - 1)) == 0;
  if (key == "ack-timeout") return to_uint(v, o.ack_timeout, 1, 31);
  if (key == "ops") return parse_ops(v, o.ops);
  if (key == "messages") return to_uint(v, o.messages, 1, 1u << 24);
  if (key == "time-limit") return to_uint(v, o.time_limit_s, 1, 86400);
  if (key == "stall-timeout") return to_uint(v, o.stall_timeout_s, 1, 86400);
  if (key == "role") {
    if (v != "server" && v != "client") return false;
    o.role = v == "server" ? Role::kServer : Role::kClient;
    return true;
  }
  if (key == "oob-fd") return to_uint(v, o.oob_fd, 0, 1 << 20);
  if (key == "listen") return to_uint(v, o.port, 1, 65535);
  if (key == "connect") return parse_connect(v, o);
  return false;
}

}  // namespace

bool parse_options(int argc, char** argv, RunOptions& o, std::string& error) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--verbose" || arg == "-v" || arg == "--inject-data-errors") {
      (arg == "--inject-data-errors" ? o.inject_data_errors : o.verbose) = true;
      o.forwarded.push_back(arg);
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.find('=') == std::string::npos) {
      error = "unknown argument: " + arg;
      return false;
    }
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(2, eq - 2);
    if (!apply(key, arg.substr(eq + 1), o)) {
      error = "bad option: " + arg;
      return false;
    }
    if (key != "role" && key != "oob-fd" && key != "listen" && key != "connect")
      o.forwarded.push_back(arg);
  }
  if (!o.faults.empty() && !transport::FaultSettings::parse(o.faults, error)) {
    error = "--faults: " + error;
    return false;
  }
  if (o.role && o.oob_fd < 0 && o.port == 0) {
    error = "a node needs --oob-fd, --listen=PORT (server) or --connect=HOST:PORT (client)";
    return false;
  }
  return true;
}

std::string usage(const char* program) {
  std::ostringstream u;
  u << "usage: " << program << " [options]\n"
    << "Runs two processes (server and client) that exchange data over RoCEv2 on UDP loopback\n"
    << "with every RC operation, checks every byte and completion, and prints a table.\n"
    << "  --seed=N          traffic plan and contents (default 1)\n"
    << "  --qps=N           RC QPs per process (default 4)\n"
    << "  --loss=P --dup=P --reorder=P   fault injection on each process's transmit side\n"
    << "  --faults=SPEC     full fault settings (loss=,dup=,reorder=,delay_us=,corrupt=,...)\n"
    << "  --pcap=FILE       capture the client's packets (both directions) to FILE\n"
    << "  --mode=demo|test  demo: every op at a few sizes, then a random mix (default)\n"
    << "                    test: random mixes, 1 B to --max-size, both directions\n"
    << "  --ops=SEND,READ,...  --messages=N   one custom mixed phase of these ops\n"
    << "  --scale=X         multiply message counts (default 1)\n"
    << "  --max-size=BYTES  largest message (default 8388608)\n"
    << "  --depth=N         work requests outstanding per QP (default 8)\n"
    << "  --mtu=BYTES       path MTU 256..4096 (default 4096)\n"
    << "  --ack-timeout=N   QP local ACK timeout 4.096us*2^N (default 14)\n"
    << "  --time-limit=S    stop the run after S seconds (default 300)\n"
    << "  --stall-timeout=S a node gives up after S seconds without progress (default 30)\n"
    << "  --verbose         echo the nodes' result lines\n"
    << "  --inject-data-errors  each process spoils one received SEND, READ result and\n"
    << "                    WRITE target range before checking it: the run must fail\n"
    << "By hand, in two shells: --role=server --listen=PORT / --role=client --connect=HOST:PORT\n"
    << "(with the same other options).\n"
    << "Ops: SEND SEND_IMM WRITE WRITE_IMM READ CMP_SWAP FETCH_ADD\n";
  return u.str();
}

std::vector<PhaseSpec> phases_for(const RunOptions& o) {
  const PhaseListOptions p{o.max_size, o.scale, o.depth};
  if (!o.ops.empty()) return custom_phases(p, o.ops, o.messages);
  return o.mode == "test" ? test_phases(p) : demo_phases(p);
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

NodeConfig node_config(const RunOptions& o, Role role) {
  NodeConfig c;
  c.role = role;
  c.seed = o.seed;
  c.qps = o.qps;
  c.mtu = o.mtu;
  c.ack_timeout = uint8_t(o.ack_timeout);
  c.faults = fault_settings_for(o, role);
  if (role == Role::kClient) c.pcap = o.pcap;
  c.phases = phases_for(o);
  c.oob_fd = o.oob_fd;
  c.oob_port = o.port;
  c.oob_host = o.host;
  c.stall_timeout_ms = o.stall_timeout_s * 1000;
  c.inject_data_errors = o.inject_data_errors;
  return c;
}

}  // namespace softrdma::traffic
