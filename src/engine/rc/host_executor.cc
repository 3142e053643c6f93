#include "engine/host/executor.h"

#include "engine/rc/host_execution.h"
#include "engine/rc/connection.h"

namespace softrdma::engine::host {

bool HostExecutor::takes(rc::RcConnection& conn, const SendWqe& wqe) {
  return RcExecution(conn, batch_, conn.host_retries()).executes(wqe);
}

bool HostExecutor::execute(rc::RcConnection& conn, SendWqe& wqe, uint32_t& index, Nanos now) {
  return RcExecution(conn, batch_, conn.host_retries()).execute(wqe, index, now);
}

bool HostExecutor::flush_open(rc::RcConnection& conn, Nanos now, uint32_t& resume) {
  return RcExecution(conn, batch_, conn.host_retries()).flush(now, resume);
}

}  // namespace softrdma::engine::host
