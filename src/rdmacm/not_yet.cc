// What librdmacm exports and softrdma does not offer yet (issue 8 is under way:
// docs/decisions/rdma-cm.md lists what is built). Each answers as the man pages
// say a failure looks — -1 (or NULL) with errno ENOSYS — and says so once on
// stderr, so a program that needs it stops with a reason instead of a crash or
// an unresolved symbol.
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "rdmacm/cm.h"

namespace {

int not_yet(const char* name) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard lock(mutex);
    if (said.insert(name).second)
      std::fprintf(stderr, "softrdma: %s is not offered yet (librdmacm, issue 8)\n", name);
  }
  errno = ENOSYS;
  return -1;
}

}  // namespace

#define SOFTRDMA_NOT_YET(name) not_yet(#name)

// Connections through the Communication Manager.

// rsockets are in rsocket_*.cc (docs/decisions/rsockets.md).
