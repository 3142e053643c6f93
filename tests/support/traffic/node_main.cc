// softrdma-traffic-node: one node of a traffic run, an ordinary verbs program
// (it includes only <infiniband/verbs.h> and links the system's libibverbs).
// softrdma-demo and the integration tests start two of them through `softrdma
// run` (run.h); by hand, in two shells, --listen / --connect join them.
#include <cstdio>

#include "traffic/node.h"
#include "traffic/options.h"

int main(int argc, char** argv) {
  using namespace softrdma::traffic;
  RunOptions o;
  int exit_status = 0;
  if (!parse_options(argc, argv, "softrdma-traffic-node", o, exit_status)) return exit_status;
  if (!o.role) {
    std::fprintf(stderr, "softrdma-traffic-node: --role=server|client is required\n");
    return 2;
  }
  Side node(node_config(o, *o.role));
  return node.run();
}
