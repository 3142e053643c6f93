#include "traffic/run.h"

namespace softrdma::traffic {

ChildSpec node_spec(const RunOptions& o, Role role) {
  ChildSpec c;
  c.argv = {softrdma_command(o), "run", "--", node_command(o)};
  for (std::string& a : to_node_args(o)) c.argv.push_back(std::move(a));
  c.argv.push_back("--role=" + std::string(role_name(role)));
  c.env.emplace_back("SOFTRDMA_FAULTS", fault_settings_for(o, role));
  c.env.emplace_back("SOFTRDMA_PCAP", role == Role::kClient ? o.pcap : "");
  return c;
}

RunResult run_traffic(const RunOptions& o, RunObserver* observer) {
  RunResult r;
  r.nodes = launch_pair(node_spec(o, Role::kServer), node_spec(o, Role::kClient), o.time_limit_s,
                        observer);
  const ChildResult& s = r.nodes.server;
  const ChildResult& c = r.nodes.client;
  r.pass = r.nodes.error.empty() && !r.nodes.timed_out && s.exit_code == 0 && c.exit_code == 0 &&
           s.report.has_final && c.report.has_final && s.report.errors == 0 &&
           c.report.errors == 0;
  r.summary = summarize(s.report, c.report);
  return r;
}

}  // namespace softrdma::traffic
