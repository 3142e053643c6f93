// rsend/rrecv and their variants, riomap/riounmap/riowrite (rsocket(7)): the
// bytes of a stream written into the peer's advertised receive buffer, and
// riowrite's plain RDMA WRITE into a buffer the peer mapped with riomap.
#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "rdmacm/cm.h"
#include "rdmacm/rsocket.h"

using namespace softrdma::rdmacm::rsock;

namespace {

// Copies `len` bytes into the send ring at its head: one or two SGEs.
int copy_to_ring(RSocket& s, const uint8_t* src, uint32_t len, ibv_sge sgl[2]) {
  const uint32_t left = s.sbuf_size - s.sbuf_head;
  uint8_t* head = s.sbuf + s.sbuf_head;
  if (len <= left) {
    std::memcpy(head, src, len);
    sgl[0] = {uint64_t(uintptr_t(head)), len, s.smr->lkey};
    s.sbuf_head = (s.sbuf_head + len) % s.sbuf_size;
    return 1;
  }
  std::memcpy(head, src, left);
  std::memcpy(s.sbuf, src + left, len - left);
  sgl[0] = {uint64_t(uintptr_t(head)), left, s.smr->lkey};
  sgl[1] = {uint64_t(uintptr_t(s.sbuf)), len - left, s.smr->lkey};
  s.sbuf_head = len - left;
  return 2;
}

// The SGEs of one transfer: inline below the QP's inline size, else a copy.
int stage(RSocket& s, const uint8_t* src, uint32_t len, ibv_sge sgl[2], int& flags) {
  flags = 0;
  if (len <= s.sq_inline) {
    sgl[0] = {uint64_t(uintptr_t(src)), len, 0};
    flags = IBV_SEND_INLINE;
    return 1;
  }
  return copy_to_ring(s, src, len, sgl);
}

// Connects first if a non-blocking rconnect left it half done; -1 with errno.
int ready_to_transfer(RSocket& s, int flags) {
  if (s.opening() && drive_connect(s, is_nonblocking(s, flags)) != 0)
    return fail(errno == EINPROGRESS ? EAGAIN : errno);
  if (s.phase == Phase::kInit || s.phase == Phase::kBound || s.phase == Phase::kListening)
    return fail(ENOTCONN);
  return 0;
}

// Waits (or EWOULDBLOCK) until a transfer may be posted; ECONNRESET once the
// connection can no longer carry one (rsend in rsocket.c).
int wait_send(RSocket& s, std::unique_lock<std::mutex>& lock, int flags) {
  auto closed = [](const RSocket& r) {
    return fail(r.phase == Phase::kError ? r.stream_error : ECONNRESET);
  };
  if (!s.writable) return closed(s);
  if (can_send(s)) return 0;
  int ret = process_cq(s, lock, is_nonblocking(s, flags),
                       [](RSocket& r) { return can_send(r) || !r.writable; });
  if (ret != 0) return ret;
  return s.writable ? 0 : closed(s);
}

uint32_t next_size(uint32_t& olen, size_t left) {
  if (olen >= left) return uint32_t(left);
  uint32_t size = olen;
  if (olen < kMaxTransfer) olen <<= 1;
  return size;
}

// Sends the mappings riomap queued: each a WireIomap written with kOpIomapSgl
// into the peer's table at its index.
int send_iomaps(RSocket& s, std::unique_lock<std::mutex>& lock, int flags) {
  for (IoMapping& m : s.iomaps) {
    if (m.sent || m.index < 0) continue;
    if (wait_send(s, lock, flags) != 0) return -1;
    WireIomap iom{m.offset, {uint64_t(uintptr_t(m.mr->addr)), m.mr->rkey, uint32_t(m.mr->length)}};
    if (s.swap_sgl) iom.offset = __builtin_bswap64(iom.offset);
    iom.sge = to_peer(s, iom.sge);
    ibv_sge sgl[2];
    int nsge = copy_to_ring(s, reinterpret_cast<const uint8_t*>(&iom), sizeof iom, sgl);
    ++s.sseq_no;
    s.sqe_avail -= s.msg_wrs();  // with msg_send the WRITE and its SEND
    s.sbuf_bytes_avail -= sizeof iom;
    if (post_write_msg(s, sgl, nsge, msg_set(kOpIomapSgl, uint32_t(m.index)), 0,
                       s.remote_iomap.addr + sizeof(WireIomap) * uint64_t(m.index),
                       s.remote_iomap.key) != 0)
      return -1;
    m.sent = true;
  }
  return 0;
}

bool iomaps_pending(const RSocket& s) {
  return std::any_of(s.iomaps.begin(), s.iomaps.end(),
                     [](const IoMapping& m) { return !m.sent && m.index >= 0; });
}

ssize_t send_stream(RSocket& s, const uint8_t* buf, size_t len, int flags) {
  std::unique_lock lock(s.mutex);
  if (ready_to_transfer(s, flags) != 0) return -1;
  if (iomaps_pending(s) && send_iomaps(s, lock, flags) != 0) return -1;
  size_t left = len;
  uint32_t olen = kFirstTransfer;
  int ret = 0;
  while (left > 0) {
    if ((ret = wait_send(s, lock, flags)) != 0) break;
    auto* target = static_cast<volatile WireSge*>(s.target_sgl()) + s.target_sge;
    uint32_t size = std::min({next_size(olen, left), s.sbuf_bytes_avail, uint32_t(target->length)});
    ibv_sge sgl[2];
    int send_flags = 0;
    int nsge = stage(s, buf, size, sgl, send_flags);
    const uint64_t addr = target->addr;
    const uint32_t rkey = target->key;
    target->addr = addr + size;
    target->length = target->length - size;
    if (target->length == 0) s.target_sge = (s.target_sge + 1) % kSglSize;
    ++s.sseq_no;
    s.sqe_avail -= s.msg_wrs();  // with msg_send the WRITE and its SEND
    s.sbuf_bytes_avail -= size;
    if ((ret = post_write_msg(s, sgl, nsge, msg_set(kOpData, size), send_flags, addr, rkey)) != 0)
      break;
    buf += size;
    left -= size;
  }
  return ret != 0 && left == len ? -1 : ssize_t(len - left);
}

// Takes up to `len` received bytes (all of them with MSG_PEEK left in place).
size_t take(RSocket& s, uint8_t* buf, size_t len, bool peek) {
  size_t done = 0;
  uint32_t head = s.rmsg_head, offset = s.rbuf_offset;
  while (done < len && head != s.rmsg_tail) {
    uint32_t size = uint32_t(std::min<size_t>(len - done, s.rmsg[head]));
    for (uint32_t copied = 0; copied < size;) {
      uint32_t chunk = std::min(size - copied, s.rbuf_size - offset);
      std::memcpy(buf + done + copied, s.rbuf + offset, chunk);
      copied += chunk;
      offset = (offset + chunk) % s.rbuf_size;
    }
    done += size;
    if (peek) {
      if (size == s.rmsg[head]) head = (head + 1) % uint32_t(s.rmsg.size());
      continue;
    }
    s.rbuf_bytes_avail += size;
    if (size < s.rmsg[head]) {
      s.rmsg[head] -= size;
    } else {
      ++s.rseq_no;
      head = (head + 1) % uint32_t(s.rmsg.size());
    }
  }
  if (!peek) {
    s.rmsg_head = head;
    s.rbuf_offset = offset;
  }
  return done;
}

bool have_data(const RSocket& s) { return s.rmsg_head != s.rmsg_tail; }

ssize_t recv_stream(RSocket& s, uint8_t* buf, size_t len, int flags) {
  std::unique_lock lock(s.mutex);
  if (ready_to_transfer(s, flags) != 0) return -1;
  size_t done = 0;
  int ret = 0;
  do {
    if (!have_data(s)) {
      ret = process_cq(s, lock, is_nonblocking(s, flags),
                       [](RSocket& r) { return have_data(r) || !r.readable; });
      if (ret != 0) break;
    }
    done += take(s, buf + done, len - done, (flags & MSG_PEEK) != 0);
    if ((flags & MSG_PEEK) != 0) break;
  } while (done < len && (flags & MSG_WAITALL) != 0 && s.readable);
  // Freed space goes back to the sender now, not at the next call.
  update_credits(s);
  // A broken stream (a lost peer, one that overran its credits) is an error, not
  // its end, on every call: not 0 once SO_ERROR was read, as Linux TCP answers
  // after the error was consumed (rsockets.md "A stream that broke").
  if (ret == 0 && done == 0 && len > 0 && s.phase == Phase::kError) return fail(s.stream_error);
  return ret != 0 && done == 0 ? -1 : ssize_t(done);
}

RSocket* stream_socket(int fd) {
  RSocket* s = lookup(fd);
  if (s == nullptr) errno = EBADF;
  return s;
}

// rsocket.c's rrecvv/rsendv over one contiguous staging buffer.
size_t iov_total(const iovec* iov, int iovcnt) {
  size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  return total;
}

}  // namespace

SOFTRDMA_CM_EXPORT ssize_t rsend(int fd, const void* buf, size_t len, int flags) {
  RSocket* s = stream_socket(fd);
  if (s == nullptr) return -1;
  return send_stream(*s, static_cast<const uint8_t*>(buf), len, flags);
}

SOFTRDMA_CM_EXPORT ssize_t rrecv(int fd, void* buf, size_t len, int flags) {
  RSocket* s = stream_socket(fd);
  if (s == nullptr) return -1;
  return recv_stream(*s, static_cast<uint8_t*>(buf), len, flags);
}

// A stream socket is connected: the destination is ignored, as for TCP (send(2)).
SOFTRDMA_CM_EXPORT ssize_t rsendto(int fd, const void* buf, size_t len, int flags, const sockaddr*,
                                   socklen_t) {
  return rsend(fd, buf, len, flags);
}

SOFTRDMA_CM_EXPORT ssize_t rrecvfrom(int fd, void* buf, size_t len, int flags, sockaddr* src,
                                     socklen_t* srclen) {
  ssize_t ret = rrecv(fd, buf, len, flags);
  if (ret > 0 && src != nullptr && srclen != nullptr) rgetpeername(fd, src, srclen);
  return ret;
}

SOFTRDMA_CM_EXPORT ssize_t rread(int fd, void* buf, size_t count) { return rrecv(fd, buf, count, 0); }
SOFTRDMA_CM_EXPORT ssize_t rwrite(int fd, const void* buf, size_t count) {
  return rsend(fd, buf, count, 0);
}

SOFTRDMA_CM_EXPORT ssize_t rwritev(int fd, const iovec* iov, int iovcnt) {
  if (iovcnt < 0 || (iovcnt > 0 && iov == nullptr)) return fail(EINVAL);
  std::vector<uint8_t> all(iov_total(iov, iovcnt));
  size_t at = 0;
  for (int i = 0; i < iovcnt; ++i) {
    if (iov[i].iov_len != 0) std::memcpy(all.data() + at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  return rsend(fd, all.data(), all.size(), 0);
}

SOFTRDMA_CM_EXPORT ssize_t rreadv(int fd, const iovec* iov, int iovcnt) {
  if (iovcnt < 0 || (iovcnt > 0 && iov == nullptr)) return fail(EINVAL);
  std::vector<uint8_t> all(iov_total(iov, iovcnt));
  ssize_t got = rrecv(fd, all.data(), all.size(), 0);
  size_t at = 0;
  for (int i = 0; i < iovcnt && got > 0 && at < size_t(got); ++i) {
    size_t n = std::min(iov[i].iov_len, size_t(got) - at);
    std::memcpy(iov[i].iov_base, all.data() + at, n);
    at += n;
  }
  return got;
}

// Ancillary data has no meaning on an rsocket (rsocket.c answers ENOTSUP).
SOFTRDMA_CM_EXPORT ssize_t rsendmsg(int fd, const msghdr* msg, int flags) {
  if (msg == nullptr) return fail(EINVAL);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail(ENOTSUP);
  if (flags != 0) {
    std::vector<uint8_t> all(iov_total(msg->msg_iov, int(msg->msg_iovlen)));
    size_t at = 0;
    for (size_t i = 0; i < msg->msg_iovlen; ++i) {
      std::memcpy(all.data() + at, msg->msg_iov[i].iov_base, msg->msg_iov[i].iov_len);
      at += msg->msg_iov[i].iov_len;
    }
    return rsend(fd, all.data(), all.size(), flags);
  }
  return rwritev(fd, msg->msg_iov, int(msg->msg_iovlen));
}

SOFTRDMA_CM_EXPORT ssize_t rrecvmsg(int fd, msghdr* msg, int flags) {
  if (msg == nullptr) return fail(EINVAL);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail(ENOTSUP);
  if (msg->msg_iovlen == 0) return rrecv(fd, nullptr, 0, flags);
  return rrecv(fd, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags);
}

// riomap(3): PROT_WRITE maps `buf` for the peer's riowrite at `offset` (-1: the
// buffer's address); it is sent with the next rsend or riowrite.
SOFTRDMA_CM_EXPORT off_t riomap(int fd, void* buf, size_t len, int prot, int, off_t offset) {
  RSocket* s = stream_socket(fd);
  if (s == nullptr) return -1;
  std::lock_guard lock(s->mutex);
  if (s->id == nullptr || s->id->pd == nullptr || s->smr == nullptr) return fail(EINVAL);
  if ((prot & ~PROT_WRITE) != 0 || buf == nullptr || len == 0) return fail(EINVAL);
  IoMapping m;
  int access = IBV_ACCESS_LOCAL_WRITE;
  if ((prot & PROT_WRITE) != 0) {
    access |= IBV_ACCESS_REMOTE_WRITE;
    for (uint32_t i = 0; i < s->remote_iomap.length && m.index < 0; ++i) {
      bool used = std::any_of(s->iomaps.begin(), s->iomaps.end(),
                              [&](const IoMapping& x) { return x.index == int(i); });
      if (!used) m.index = int(i);
    }
    if (m.index < 0) return fail(ENOMEM);  // the peer's table is full (RDMA_IOMAPSIZE)
  }
  m.mr = ibv_reg_mr(s->id->pd, buf, len, access);
  if (m.mr == nullptr) return -1;
  m.offset = offset == -1 ? uint64_t(uintptr_t(buf)) : uint64_t(offset);
  s->iomaps.push_back(m);
  return off_t(m.offset);
}

SOFTRDMA_CM_EXPORT int riounmap(int fd, void* buf, size_t len) {
  RSocket* s = stream_socket(fd);
  if (s == nullptr) return -1;
  std::lock_guard lock(s->mutex);
  for (auto it = s->iomaps.begin(); it != s->iomaps.end(); ++it) {
    if (it->mr->addr == buf && it->mr->length == len) {
      ibv_dereg_mr(it->mr);
      s->iomaps.erase(it);
      return 0;
    }
  }
  return fail(EINVAL);
}

namespace {

// The peer's mapping that holds `offset`, from the table it RDMA-wrote to us.
bool find_iomap(const RSocket& s, uint64_t offset, WireIomap& out) {
  auto* table = static_cast<volatile WireIomap*>(s.target_iomap());
  for (uint32_t i = 0; i < s.target_iomap_size; ++i) {
    WireIomap e{table[i].offset, {table[i].sge.addr, table[i].sge.key, table[i].sge.length}};
    if (e.sge.length != 0 && offset >= e.offset && offset < e.offset + e.sge.length) {
      out = e;
      return true;
    }
  }
  return false;
}

}  // namespace

// riowrite(3): RDMA WRITE into the peer's mapping at `offset`; the peer is not
// told (no immediate), as rsocket.c does.
SOFTRDMA_CM_EXPORT size_t riowrite(int fd, const void* buf, size_t count, off_t offset, int flags) {
  RSocket* s = stream_socket(fd);
  if (s == nullptr) return size_t(-1);
  std::unique_lock lock(s->mutex);
  if (ready_to_transfer(*s, flags) != 0) return size_t(-1);
  if (iomaps_pending(*s) && send_iomaps(*s, lock, flags) != 0) return size_t(-1);
  auto* src = static_cast<const uint8_t*>(buf);
  size_t left = count;
  uint32_t olen = kFirstTransfer;
  uint64_t at = uint64_t(offset);
  int ret = 0;
  WireIomap iom{};
  while (left > 0) {
    if (!find_iomap(*s, at, iom)) {
      if (left == count) ret = fail(EINVAL);  // nothing mapped there by the peer
      break;
    }
    if ((ret = wait_send(*s, lock, flags)) != 0) break;
    uint32_t size = std::min({next_size(olen, left), s->sbuf_bytes_avail,
                              uint32_t(iom.offset + iom.sge.length - at)});
    ibv_sge sgl[2];
    int send_flags = 0;
    int nsge = stage(*s, src, size, sgl, send_flags);
    --s->sqe_avail;
    s->sbuf_bytes_avail -= size;
    if ((ret = post_write(*s, sgl, nsge, msg_set(kOpWrite, size), send_flags,
                          iom.sge.addr + (at - iom.offset), iom.sge.key)) != 0)
      break;
    src += size;
    at += size;
    left -= size;
  }
  return ret != 0 && left == count ? size_t(-1) : count - left;
}
