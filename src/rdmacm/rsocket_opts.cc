// rsetsockopt, rgetsockopt, rfcntl (rsocket(7)). What an option changes is
// honoured (buffer and queue sizes, inline size, iomap table, non-blocking), or
// accepted and reported back where it has no effect on an RDMA connection
// (TCP_NODELAY: every rsend is posted at once; SO_LINGER; SO_OOBINLINE); what
// is not offered answers ENOTSUP as rsocket.c does for unknown options.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>

#include "rdmacm/cm.h"
#include "rdmacm/rsocket.h"

using namespace softrdma::rdmacm::rsock;

namespace {

constexpr uint32_t kQpMaxSize = 0xfffe;

bool before_connect(const RSocket& s) {
  return s.phase == Phase::kInit || s.phase == Phase::kBound || s.phase == Phase::kListening;
}

int set_socket_level(RSocket& s, int name, int value) {
  switch (name) {
    case SO_REUSEADDR:
      // Ports are host-wide reservations; reuse is what rdma_cm offers.
      rdma_set_option(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &value, sizeof value);
      s.reuseaddr = value != 0;
      return 0;
    case SO_RCVBUF:  // as Linux, the buffer is twice the value asked for
      if (s.rbuf == nullptr) s.rbuf_size = std::max<uint32_t>(uint32_t(value) << 1, 2 * kSndLowat);
      return 0;
    case SO_SNDBUF:
      if (s.sbuf == nullptr) s.sbuf_size = std::max<uint32_t>(uint32_t(value) << 1, 2 * kSndLowat);
      return 0;
    case SO_OOBINLINE:
      s.oobinline = value != 0;
      return 0;
    case SO_KEEPALIVE:  // rsocket_keepalive.cc
      return set_keepalive(s, value != 0);
    default:
      return fail(ENOTSUP);
  }
}

// rsocket.c: TCP_KEEPIDLE is the keepalive period in seconds; TCP_KEEPCNT and
// TCP_KEEPINTVL are accepted and change nothing (the QP's retry count decides
// when an unanswered keepalive ends the connection).
int set_tcp_level(RSocket& s, int name, int value) {
  switch (name) {
    case TCP_NODELAY:
      s.nodelay = value != 0;
      return 0;
    case TCP_MAXSEG:
    case TCP_KEEPCNT:
    case TCP_KEEPINTVL:
      return 0;
    case TCP_KEEPIDLE:
      if (value <= 0) return fail(EINVAL);
      set_keepalive_time(s, unsigned(value));
      return 0;
    default:
      return fail(ENOTSUP);
  }
}

int set_rdma_level(RSocket& s, int name, uint32_t value) {
  if (!before_connect(s)) return fail(EINVAL);  // fixed once the QP exists
  switch (name) {
    case RDMA_SQSIZE:
      s.sq_size = std::min(value, kQpMaxSize);
      return 0;
    case RDMA_RQSIZE:
      s.rq_size = std::min(value, kQpMaxSize);
      return 0;
    case RDMA_INLINE:
      s.sq_inline = std::min(value, kQpMaxSize);
      return 0;
    case RDMA_IOMAPSIZE:
      s.target_iomap_size = std::min<uint32_t>(value, 128);  // 8-bit scale, exact to 128
      return 0;
    case RDMA_ROUTE:  // softrdma resolves the same path itself (rdma-cm.md)
      return 0;
    default:
      return fail(ENOTSUP);
  }
}

int get_int(int value, void* optval, socklen_t* optlen) {
  if (optval == nullptr || optlen == nullptr || *optlen < sizeof(int)) return fail(EINVAL);
  std::memcpy(optval, &value, sizeof value);
  *optlen = sizeof value;
  return 0;
}

}  // namespace

SOFTRDMA_CM_EXPORT int rsetsockopt(int fd, int level, int name, const void* optval, socklen_t optlen) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  if (level == IPPROTO_IPV6 && name == IPV6_V6ONLY && optval == nullptr) return fail(EFAULT);
  if (level == IPPROTO_TCP && name == TCP_CONGESTION) return 0;  // no congestion control to pick
  if (optval == nullptr || optlen < sizeof(int)) return fail(EINVAL);
  int value = 0;
  std::memcpy(&value, optval, sizeof value);
  std::lock_guard lock(s->mutex);
  switch (level) {
    case SOL_SOCKET:
      if (name == SO_LINGER) {
        if (optlen < sizeof(linger)) return fail(EINVAL);
        s->linger_off = static_cast<const linger*>(optval)->l_onoff == 0;
        return 0;
      }
      return set_socket_level(*s, name, value);
    case IPPROTO_TCP:
      return set_tcp_level(*s, name, value);
    case IPPROTO_IP:
      if (name == IP_TOS)
        return rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &value, sizeof value);
      return fail(ENOTSUP);
    case IPPROTO_IPV6:
      if (name == IPV6_V6ONLY)
        return rdma_set_option(s->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &value, sizeof value);
      return fail(ENOTSUP);
    case SOL_RDMA:
      return set_rdma_level(*s, name, uint32_t(value));
    default:
      return fail(ENOTSUP);
  }
}

SOFTRDMA_CM_EXPORT int rgetsockopt(int fd, int level, int name, void* optval, socklen_t* optlen) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  if (level == SOL_SOCKET) {
    switch (name) {
      case SO_ERROR: {  // read and cleared, as getsockopt(2) does
        int err = s->err;
        if (s->phase != Phase::kConnectError) s->err = 0;
        return get_int(err, optval, optlen);
      }
      case SO_REUSEADDR:
        return get_int(s->reuseaddr, optval, optlen);
      case SO_RCVBUF:
        return get_int(int(s->rbuf_size), optval, optlen);
      case SO_SNDBUF:
        return get_int(int(s->sbuf_size), optval, optlen);
      case SO_KEEPALIVE:
        return get_int(s->keepalive, optval, optlen);
      case SO_OOBINLINE:
        return get_int(s->oobinline, optval, optlen);
      case SO_TYPE:
        return get_int(SOCK_STREAM, optval, optlen);
      case SO_LINGER:
        if (optval == nullptr || optlen == nullptr || *optlen < sizeof(linger)) return fail(EINVAL);
        *static_cast<linger*>(optval) = linger{s->linger_off ? 0 : 1, 0};
        *optlen = sizeof(linger);
        return 0;
      default:
        return fail(ENOTSUP);
    }
  }
  if (level == IPPROTO_TCP && name == TCP_NODELAY) return get_int(s->nodelay, optval, optlen);
  if (level == IPPROTO_TCP && name == TCP_MAXSEG) return get_int(int(kMaxTransfer), optval, optlen);
  if (level == IPPROTO_TCP && name == TCP_KEEPIDLE)
    return get_int(int(s->keepalive_time), optval, optlen);
  if (level == IPPROTO_TCP && (name == TCP_KEEPCNT || name == TCP_KEEPINTVL))
    return get_int(1, optval, optlen);  // rsocket.c: not applicable, reported as 1
  if (level == SOL_RDMA) {
    switch (name) {
      case RDMA_SQSIZE:
        return get_int(int(s->sq_size), optval, optlen);
      case RDMA_RQSIZE:
        return get_int(int(s->rq_size), optval, optlen);
      case RDMA_INLINE:
        return get_int(int(s->sq_inline), optval, optlen);
      case RDMA_IOMAPSIZE:
        return get_int(int(s->target_iomap_size), optval, optlen);
      default:
        return fail(ENOTSUP);
    }
  }
  return fail(ENOTSUP);
}

// rfcntl(3): F_GETFL/F_SETFL (O_NONBLOCK), F_GETFD/F_SETFD; others ENOTSUP.
SOFTRDMA_CM_EXPORT int rfcntl(int fd, int cmd, ...) {
  RSocket* s = lookup(fd);
  if (s == nullptr) return fail(EBADF);
  va_list args;
  va_start(args, cmd);
  int ret = 0;
  std::lock_guard lock(s->mutex);
  switch (cmd) {
    case F_GETFL:
      ret = s->fs_flags | O_RDWR;
      break;
    case F_SETFL:
      s->fs_flags = va_arg(args, int) & O_NONBLOCK;
      break;
    case F_GETFD:
      ret = s->fd_flags;
      break;
    case F_SETFD:
      s->fd_flags = va_arg(args, int);
      break;
    default:
      ret = fail(ENOTSUP);
  }
  va_end(args);
  return ret;
}
