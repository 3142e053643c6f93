// The hand-over channel (handover.h, docs/decisions/host-rnic.md point 4): one
// abstract Unix datagram socket per process of a group, one sendmsg per owner and
// burst (headers and packets gathered, no staging copy), recvmmsg into buffers of
// its own, taken apart record by record.
#include "transport/udp/handover.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "transport/udp/udp_socket.h"

namespace softrdma::transport::udp {

namespace {

// Bursts of hand-overs wait here until the owner's poller reads them. For Unix
// datagrams a queued datagram is charged to the *sender's* send buffer until it is
// read (and the receiver's queue is bounded in datagrams by net.unix.max_dgram_qlen),
// so both buffers are raised.
constexpr int kBufferBytes = 4 << 20;

// The longest abstract name: sun_path less the leading NUL.
constexpr size_t kMaxName = sizeof(sockaddr_un::sun_path) - 1;
constexpr size_t kSlotDigits = 10;  // a uint32_t in decimal

// FNV-1a: a group name too long for sun_path is named by its hash (64 bits: two
// registries of one host colliding is not a practical concern).
uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

std::string name_prefix(const std::string& group_name) {
  std::string prefix = "softrdma-handover/" + group_name + "/";
  if (prefix.size() + kSlotDigits <= kMaxName) return prefix;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(group_name)));
  return std::string("softrdma-handover/#") + hash + "/";
}

struct alignas(cmsghdr) CredentialsBuffer {
  uint8_t bytes[CMSG_SPACE(sizeof(ucred))];
};

constexpr size_t padded(size_t bytes) {
  return (bytes + kHandoverRecordAlign - 1) & ~(kHandoverRecordAlign - 1);
}

constexpr uint8_t kZeros[kHandoverRecordAlign] = {};

}  // namespace

// recvmmsg's buffers: one datagram each (header and packet), with room for the
// sender's credentials. Not value-initialised: pages are touched when used.
struct Handover::Ring {
  Ring() : buffers(new Datagram[kRing]) {
    for (size_t i = 0; i < kRing; ++i) {
      iovs[i] = {buffers[i].bytes, sizeof buffers[i].bytes};
      msgs[i].msg_hdr = msghdr{};
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = controls[i].bytes;
    }
  }
  // recvmmsg overwrites lengths and flags: reset them before each call.
  void prepare(size_t count) {
    for (size_t i = 0; i < count; ++i) {
      msgs[i].msg_hdr.msg_controllen = sizeof(CredentialsBuffer);
      msgs[i].msg_hdr.msg_flags = 0;
    }
  }
  struct alignas(HandoverHeader) Datagram {
    uint8_t bytes[kHandoverDatagramBytes];
  };
  std::unique_ptr<Datagram[]> buffers;
  mmsghdr msgs[kRing];
  iovec iovs[kRing];
  CredentialsBuffer controls[kRing];
  // Datagrams the last recvmmsg read, the one being taken apart, and where its
  // next record starts: what receive() returned stays valid until all are taken.
  size_t count = 0;
  size_t next = 0;
  size_t offset = 0;
};

Handover::Handover(int fd, uint32_t slot, std::string prefix)
    : fd_(fd),
      slot_(slot),
      pid_(getpid()),
      euid_(geteuid()),
      egid_(getegid()),
      prefix_(std::move(prefix)),
      ring_(std::make_unique<Ring>()) {
  queued_.reserve(kMaxQueued);
}

Handover::~Handover() {
  if (fd_ >= 0) close(fd_);
}

std::unique_ptr<Handover> Handover::open(const std::string& group_name, uint32_t slot,
                                         std::string& why, int* bind_error) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::string("softrdma: no Unix socket for the hand-over: ") + std::strerror(errno);
    return nullptr;
  }
  // Before bind: every datagram that can reach the socket carries its sender.
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
  set_receive_buffer(fd, kBufferBytes);
  set_send_buffer(fd, kBufferBytes);
  std::unique_ptr<Handover> handover(new Handover(fd, slot, name_prefix(group_name)));
  sockaddr_un address;
  const socklen_t length = handover->address_of(slot, address);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int error = errno;
    if (bind_error != nullptr) *bind_error = error;
    why = "softrdma: cannot bind the hand-over socket of slot " + std::to_string(slot) + ": " +
          std::strerror(error) +
          (error == EADDRINUSE ? " (another process of this host serves that slot)" : "");
    return nullptr;  // the destructor closes fd
  }
  return handover;
}

socklen_t Handover::address_of(uint32_t slot, sockaddr_un& address) const {
  address.sun_family = AF_UNIX;
  // Abstract: a leading NUL, and the name's length is the address's, not a string's.
  address.sun_path[0] = '\0';
  std::memcpy(address.sun_path + 1, prefix_.data(), prefix_.size());
  const int digits = std::snprintf(address.sun_path + 1 + prefix_.size(), kSlotDigits + 1, "%u",
                                   static_cast<unsigned>(slot));
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + prefix_.size() + size_t(digits));
}

std::string Handover::name_of(uint32_t slot) const {
  sockaddr_un address;
  const socklen_t length = address_of(slot, address);
  return std::string(address.sun_path, length - offsetof(sockaddr_un, sun_path));
}

HandoverHeader Handover::header_for(const Gid& source, uint16_t source_port,
                                   const Gid& destination, size_t length, bool ce) const {
  return HandoverHeader{.magic = kHandoverMagic,
                        .version = kHandoverVersion,
                        .source_port = source_port,
                        .from_slot = uint16_t(slot_),
                        .flags = uint16_t(ce ? kHandoverCongestionExperienced : 0),
                        .length = uint32_t(length),
                        .source = source,
                        .destination = destination};
}

bool Handover::send(uint32_t to_slot, const Gid& source, uint16_t source_port,
                    const Gid& destination, std::span<const uint8_t> packet, bool ce) {
  if (packet.size() > kHandoverMaxPacket) return send_failed(EMSGSIZE);
  HandoverHeader header = header_for(source, source_port, destination, packet.size(), ce);
  // A lone record needs no padding: the datagram ends with it.
  iovec iov[2] = {{&header, sizeof header}, {const_cast<uint8_t*>(packet.data()), packet.size()}};
  if (const int error = send_datagram(to_slot, iov, 2)) return send_failed(error);
  ring(to_slot);
  counters_.sent.fetch_add(1, std::memory_order_relaxed);
  counters_.sent_datagrams.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Handover::queue(uint32_t to_slot, const Gid& source, uint16_t source_port,
                     const Gid& destination, std::span<const uint8_t> packet, bool ce) {
  if (packet.size() > kHandoverMaxPacket) return send_failed(EMSGSIZE);
  if (queued_.size() == kMaxQueued) send_queued();
  queued_.push_back(Queued{to_slot, uint32_t(queued_.size()),
                           header_for(source, source_port, destination, packet.size(), ce),
                           packet});
  return true;
}

Handover::Flushed Handover::flush() {
  send_queued();
  const Flushed flushed = flushed_;
  flushed_ = Flushed{};
  return flushed;
}

void Handover::send_queued() {
  if (queued_.empty()) return;
  std::sort(queued_.begin(), queued_.end(), [](const Queued& x, const Queued& y) {
    return x.to_slot != y.to_slot ? x.to_slot < y.to_slot : x.order < y.order;
  });
  for (size_t first = 0; first < queued_.size();) {
    size_t last = first + 1;
    while (last < queued_.size() && queued_[last].to_slot == queued_[first].to_slot) ++last;
    flush_slot(first, last, flushed_);
    first = last;
  }
  queued_.clear();
}

void Handover::flush_slot(size_t first, size_t last, Flushed& flushed) {
  iovec iov[3 * kMaxQueued];
  while (first < last) {
    size_t count = 0, bytes = 0, records = 0;
    for (; first + records < last; ++records) {
      Queued& q = queued_[first + records];
      const size_t record = sizeof q.header + q.packet.size();
      if (records > 0 && bytes + padded(record) > kHandoverDatagramBytes) break;
      iov[count++] = {&q.header, sizeof q.header};
      iov[count++] = {const_cast<uint8_t*>(q.packet.data()), q.packet.size()};
      if (padded(record) != record)
        iov[count++] = {const_cast<uint8_t*>(kZeros), padded(record) - record};
      bytes += padded(record);
    }
    if (const int error = send_datagram(queued_[first].to_slot, iov, count)) {
      send_failed(error, records);
      flushed.failed += records;
    } else {
      ring(queued_[first].to_slot);
      counters_.sent.fetch_add(records, std::memory_order_relaxed);
      counters_.sent_datagrams.fetch_add(1, std::memory_order_relaxed);
      flushed.sent += records;
    }
    first += records;
  }
}

int Handover::send_datagram(uint32_t to_slot, iovec* iov, size_t count) {
  // Our effective uid, said explicitly: without it the kernel reports the real uid,
  // which differs from the effective one in a set-user-ID program, and the group
  // (and the host registry) is the effective user's.
  CredentialsBuffer control;
  // The pid is kept, not asked for (getpid is a system call, ~150 ns here).
  ucred credentials{.pid = pid_.load(std::memory_order_relaxed), .uid = euid_, .gid = egid_};
  msghdr message{};
  message.msg_control = control.bytes;
  message.msg_controllen = sizeof control.bytes;
  cmsghdr* c = CMSG_FIRSTHDR(&message);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_CREDENTIALS;
  c->cmsg_len = CMSG_LEN(sizeof credentials);
  std::memcpy(CMSG_DATA(c), &credentials, sizeof credentials);
  sockaddr_un address;
  message.msg_name = &address;
  message.msg_namelen = address_of(to_slot, address);
  message.msg_iov = iov;
  message.msg_iovlen = count;
  ssize_t rc;
  do {
    rc = sendmsg(fd_, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    // EPERM: the credentials name another pid, so this is a child forked since
    // open(); the kernel checks the pid (scm_check_creds). Learn ours and resend.
    if (rc < 0 && errno == EPERM && credentials.pid != getpid()) {
      credentials.pid = getpid();
      pid_.store(credentials.pid, std::memory_order_relaxed);
      std::memcpy(CMSG_DATA(c), &credentials, sizeof credentials);
      errno = EINTR;
    }
  } while (rc < 0 && errno == EINTR);
  return rc < 0 ? errno : 0;
}

// Why a hand-over did not happen, counted. The packet is dropped: the peer's
// retransmission (IBA 9.7.6) or the CM's retry recovers it, as after a loss.
bool Handover::send_failed(int error, uint64_t packets) {
  switch (error) {
    case ECONNREFUSED:  // an abstract name nobody binds
    case ENOENT:
      counters_.send_no_owner.fetch_add(packets, std::memory_order_relaxed);
      break;
    case EAGAIN:  // the owner's queue, or our send buffer, is full: never block
      counters_.send_full.fetch_add(packets, std::memory_order_relaxed);
      break;
    case EMSGSIZE:
      counters_.send_too_large.fetch_add(packets, std::memory_order_relaxed);
      break;
    default:
      counters_.send_error.fetch_add(packets, std::memory_order_relaxed);
      break;
  }
  return false;
}

void Handover::set_doorbells(DoorbellOf doorbell_of) {
  doorbell_of_ = std::move(doorbell_of);
  own_doorbell_ = doorbell_of_ ? doorbell_of_(slot_) : nullptr;
  // Whatever was sent before this process had a doorbell is read once.
  if (own_doorbell_ != nullptr) own_doorbell_->store(1, std::memory_order_release);
}

// After the datagram is queued: its receiver, seeing the doorbell, finds it.
void Handover::ring(uint32_t to_slot) {
  if (!doorbell_of_) return;
  if (std::atomic<uint32_t>* bell = doorbell_of_(to_slot))
    bell->store(1, std::memory_order_release);
}

// Cleared before the socket is read: a datagram queued after the read rings again.
bool Handover::doorbell_rang() {
  if (own_doorbell_ == nullptr || batch_was_full_) return true;
  if (own_doorbell_->load(std::memory_order_acquire) == 0) return false;
  own_doorbell_->exchange(0, std::memory_order_acq_rel);
  return true;
}

size_t Handover::receive(std::span<Received> out) {
  if (out.empty()) return 0;
  Ring& ring = *ring_;
  if (ring.next == ring.count) {
    if (!doorbell_rang()) return 0;
    ring.prepare(kRing);
    int got;
    do {
      got = recvmmsg(fd_, ring.msgs, unsigned(kRing), MSG_DONTWAIT, nullptr);
    } while (got < 0 && errno == EINTR);
    ring.count = got > 0 ? size_t(got) : 0;
    ring.next = 0;
    ring.offset = 0;
    batch_was_full_ = ring.count == kRing;
  }
  size_t n = 0;
  while (n < out.size() && ring.next < ring.count) {
    if (ring.offset == 0 && !from_this_user(ring.next)) {
      ++ring.next;
      continue;
    }
    if (next_record(out[n])) ++n;
  }
  counters_.received.fetch_add(n, std::memory_order_relaxed);
  return n;
}

bool Handover::pending() const { return ring_->next < ring_->count; }

// Datagram `i` of the last recvmmsg came from a process of our effective user;
// false (counted) otherwise.
bool Handover::from_this_user(size_t i) {
  msghdr& h = ring_->msgs[i].msg_hdr;
  const ucred* credentials = nullptr;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
        c->cmsg_len >= CMSG_LEN(sizeof(ucred)))
      credentials = reinterpret_cast<const ucred*>(CMSG_DATA(c));
  // Checked first: another user's datagram is counted as such whatever it holds.
  // No credentials at all cannot happen with SO_PASSCRED set before bind; were it
  // to, the sender is unknown and treated as foreign.
  if (credentials != nullptr && credentials->uid == euid_) return true;
  counters_.dropped_foreign_user.fetch_add(1, std::memory_order_relaxed);
  return false;
}

// The record at the current datagram's offset into `out`, and on to the next; false
// (counted once) when the datagram is truncated or the record malformed: the rest
// of the datagram is dropped, its length no longer to be trusted.
bool Handover::next_record(Received& out) {
  Ring& ring = *ring_;
  const msghdr& h = ring.msgs[ring.next].msg_hdr;
  const size_t length = ring.msgs[ring.next].msg_len;
  uint8_t* bytes = ring.buffers[ring.next].bytes;
  const size_t left = length - ring.offset;
  HandoverHeader header;
  bool ok = (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 && left >= sizeof header;
  if (ok) {
    std::memcpy(&header, bytes + ring.offset, sizeof header);
    ok = header.magic == kHandoverMagic && header.version == kHandoverVersion &&
         header.length <= left - sizeof header;
  }
  if (!ok) {
    counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    ++ring.next;
    ring.offset = 0;
    return false;
  }
  out.source = header.source;
  out.source_port = header.source_port;
  out.destination = header.destination;
  out.from_slot = header.from_slot;
  out.congestion_experienced = (header.flags & kHandoverCongestionExperienced) != 0;
  out.packet = std::span<uint8_t>(bytes + ring.offset + sizeof header, header.length);
  ring.offset += padded(sizeof header + header.length);
  if (ring.offset >= length) {
    ++ring.next;
    ring.offset = 0;
  }
  return true;
}

}  // namespace softrdma::transport::udp
