#include "engine/family.h"

#include <unistd.h>

#include <cerrno>

namespace softrdma::engine {

// A family whose QPs are not connection-managed (RoCEv2: the IB CM only exchanges
// MADs, the QP's packets go by the family's datagrams) has no use for a connection.
int ProtocolFamily::adopt_connection(Qp& /*qp*/, const wire::iwarp::IwarpHandoff& handoff,
                                     Nanos /*now*/) {
  ::close(handoff.fd);
  return EINVAL;
}

}  // namespace softrdma::engine
