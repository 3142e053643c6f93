// What librdmacm exports and softrdma does not offer yet (issue 8 is under way:
// docs/decisions/rdma-cm.md lists what is built). Each answers as the man pages
// say a failure looks — -1 (or NULL) with errno ENOSYS — and says so once on
// stderr, so a program that needs it stops with a reason instead of a crash or
// an unresolved symbol.
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

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

// rsockets (rsocket(7)). No descriptor is ever an rsocket yet, so rpoll and
// rselect are poll(2) and select(2), which is what they do for other descriptors.
SOFTRDMA_CM_EXPORT int rsocket(int, int, int) { return SOFTRDMA_NOT_YET(rsocket); }
SOFTRDMA_CM_EXPORT int rbind(int, const sockaddr*, socklen_t) { return SOFTRDMA_NOT_YET(rbind); }
SOFTRDMA_CM_EXPORT int rlisten(int, int) { return SOFTRDMA_NOT_YET(rlisten); }
SOFTRDMA_CM_EXPORT int raccept(int, sockaddr*, socklen_t*) { return SOFTRDMA_NOT_YET(raccept); }
SOFTRDMA_CM_EXPORT int rconnect(int, const sockaddr*, socklen_t) { return SOFTRDMA_NOT_YET(rconnect); }
SOFTRDMA_CM_EXPORT int rshutdown(int, int) { return SOFTRDMA_NOT_YET(rshutdown); }
SOFTRDMA_CM_EXPORT int rclose(int) { return SOFTRDMA_NOT_YET(rclose); }
SOFTRDMA_CM_EXPORT ssize_t rrecv(int, void*, size_t, int) { return SOFTRDMA_NOT_YET(rrecv); }
SOFTRDMA_CM_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return SOFTRDMA_NOT_YET(rrecvfrom); }
SOFTRDMA_CM_EXPORT ssize_t rrecvmsg(int, msghdr*, int) { return SOFTRDMA_NOT_YET(rrecvmsg); }
SOFTRDMA_CM_EXPORT ssize_t rsend(int, const void*, size_t, int) { return SOFTRDMA_NOT_YET(rsend); }
SOFTRDMA_CM_EXPORT ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) {
  return SOFTRDMA_NOT_YET(rsendto);
}
SOFTRDMA_CM_EXPORT ssize_t rsendmsg(int, const msghdr*, int) { return SOFTRDMA_NOT_YET(rsendmsg); }
SOFTRDMA_CM_EXPORT ssize_t rread(int, void*, size_t) { return SOFTRDMA_NOT_YET(rread); }
SOFTRDMA_CM_EXPORT ssize_t rreadv(int, const iovec*, int) { return SOFTRDMA_NOT_YET(rreadv); }
SOFTRDMA_CM_EXPORT ssize_t rwrite(int, const void*, size_t) { return SOFTRDMA_NOT_YET(rwrite); }
SOFTRDMA_CM_EXPORT ssize_t rwritev(int, const iovec*, int) { return SOFTRDMA_NOT_YET(rwritev); }
SOFTRDMA_CM_EXPORT int rgetpeername(int, sockaddr*, socklen_t*) { return SOFTRDMA_NOT_YET(rgetpeername); }
SOFTRDMA_CM_EXPORT int rgetsockname(int, sockaddr*, socklen_t*) { return SOFTRDMA_NOT_YET(rgetsockname); }
SOFTRDMA_CM_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) { return SOFTRDMA_NOT_YET(rsetsockopt); }
SOFTRDMA_CM_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) { return SOFTRDMA_NOT_YET(rgetsockopt); }
SOFTRDMA_CM_EXPORT int rfcntl(int, int, ...) { return SOFTRDMA_NOT_YET(rfcntl); }
SOFTRDMA_CM_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) { return SOFTRDMA_NOT_YET(riomap); }
SOFTRDMA_CM_EXPORT int riounmap(int, void*, size_t) { return SOFTRDMA_NOT_YET(riounmap); }
SOFTRDMA_CM_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) {
  return static_cast<size_t>(SOFTRDMA_NOT_YET(riowrite));
}
SOFTRDMA_CM_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) { return poll(fds, nfds, timeout); }
SOFTRDMA_CM_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                               timeval* timeout) {
  return select(nfds, readfds, writefds, exceptfds, timeout);
}
