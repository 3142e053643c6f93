// What a QP's protocol and its roles (requester, completer, responder, the iWARP
// connection, the same-host execution) use of their device, handed to them once
// when the QP is made, so that no role reaches up through qp().device() for it
// (docs/decisions/engine-layout.md). Every member is the device's and outlives
// the QP; its owner rules are the device's (threading.md: the engine's owner).
#pragma once

#include "engine/clock.h"
#include "engine/counters.h"
#include "engine/limits.h"
#include "engine/mr.h"

namespace softrdma::samehost {
class Host;
}

namespace softrdma::engine {

namespace host {
class HostExecutor;
}

struct RoleContext {
  EngineCounters& counters;
  MrTable& mrs;  // keys, memory windows (binds and invalidations: engine owner)
  const Clock& clock;
  const DeviceConfig& config;  // config.limits: the device's limits
  samehost::Host* host;                 // the same-host path, or null
  host::HostExecutor* host_executor;    // its executor, or null
};

}  // namespace softrdma::engine
