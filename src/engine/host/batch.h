// The batch of WRITEs the same-host path builds within one requester run
// (rc/host_batch.cc). One per device, in its HostExecutor, used by the engine's
// owner: it lives within a turn. (Not thread_local: a library that is dlopen'ed
// has only a little static TLS to give, and this is 16 KiB.)
#pragma once

#include <sys/uio.h>

#include <array>
#include <climits>
#include <cstdint>
#include <optional>

#include "samehost/node_segment.h"

namespace softrdma::samehost {
struct Peer;
}

namespace softrdma::engine::rc {
class RcConnection;
}

namespace softrdma::engine::host {

struct HostBatch {
  static constexpr uint32_t kWqes = 64;
  static constexpr uint32_t kLocal = IOV_MAX;
  const rc::RcConnection* owner = nullptr;  // the connection whose run holds it
  samehost::Peer* peer = nullptr;
  bool open = false;  // its access bracket is open
  uint32_t wqes = 0;
  uint32_t locals = 0;
  uint64_t bytes = 0;
  std::array<uint32_t, kWqes> index{};  // send queue indices, in order
  std::array<iovec, kWqes> remote{};
  std::array<iovec, kLocal> local{};
  // The peer's QP and the last R_Key looked up, good while the access bracket is
  // open (a key's revocation waits for it to close): a posted list names the
  // same ones in every WQE, and each lookup is a sequence-locked probe.
  std::optional<samehost::QpGrant> target;
  uint32_t rkey = 0;
  std::optional<samehost::KeyGrant> key;
};

}  // namespace softrdma::engine::host
