// The hand-over channel (handover.h, docs/decisions/host-rnic.md point 4): one
// abstract Unix datagram socket per process of a group, one sendmsg per packet
// (header and packet gathered, no staging copy), recvmmsg into buffers of its own.
#include "transport/udp/handover.h"

#include <sys/socket.h>
#include <unistd.h>

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
};

Handover::Handover(int fd, uint32_t slot, std::string prefix)
    : fd_(fd),
      slot_(slot),
      pid_(getpid()),
      euid_(geteuid()),
      egid_(getegid()),
      prefix_(std::move(prefix)),
      ring_(std::make_unique<Ring>()) {}

Handover::~Handover() {
  if (fd_ >= 0) close(fd_);
}

std::unique_ptr<Handover> Handover::open(const std::string& group_name, uint32_t slot,
                                         std::string& why) {
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

bool Handover::send(uint32_t to_slot, const Gid& source, uint16_t source_port,
                    const Gid& destination, std::span<const uint8_t> packet) {
  if (packet.size() > kHandoverMaxPacket) return send_failed(EMSGSIZE);
  HandoverHeader header{.magic = kHandoverMagic,
                        .version = kHandoverVersion,
                        .source_port = source_port,
                        .from_slot = slot_,
                        .length = uint32_t(packet.size()),
                        .source = source,
                        .destination = destination};
  iovec iov[2] = {{&header, sizeof header}, {const_cast<uint8_t*>(packet.data()), packet.size()}};
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
  message.msg_iovlen = 2;
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
  if (rc < 0) return send_failed(errno);
  counters_.sent.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Why a hand-over did not happen, counted. The packet is dropped: the peer's
// retransmission (IBA 9.7.6) or the CM's retry recovers it, as after a loss.
bool Handover::send_failed(int error) {
  switch (error) {
    case ECONNREFUSED:  // an abstract name nobody binds
    case ENOENT:
      counters_.send_no_owner.fetch_add(1, std::memory_order_relaxed);
      break;
    case EAGAIN:  // the owner's queue, or our send buffer, is full: never block
      counters_.send_full.fetch_add(1, std::memory_order_relaxed);
      break;
    case EMSGSIZE:
      counters_.send_too_large.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      counters_.send_error.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  return false;
}

size_t Handover::receive(std::span<Received> out) {
  const size_t want = std::min(out.size(), kRing);
  if (want == 0) return 0;
  ring_->prepare(want);
  int got;
  do {
    got = recvmmsg(fd_, ring_->msgs, unsigned(want), MSG_DONTWAIT, nullptr);
  } while (got < 0 && errno == EINTR);
  size_t n = 0;
  for (int i = 0; i < got; ++i)
    if (accept(size_t(i), out[n])) ++n;
  counters_.received.fetch_add(n, std::memory_order_relaxed);
  return n;
}

// Datagram `i` of the last recvmmsg into `out`; false (counted) when it is not a
// hand-over of this user.
bool Handover::accept(size_t i, Received& out) {
  msghdr& h = ring_->msgs[i].msg_hdr;
  const ucred* credentials = nullptr;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
        c->cmsg_len >= CMSG_LEN(sizeof(ucred)))
      credentials = reinterpret_cast<const ucred*>(CMSG_DATA(c));
  // Checked first: another user's datagram is counted as such whatever it holds.
  // No credentials at all cannot happen with SO_PASSCRED set before bind; were it
  // to, the sender is unknown and treated as foreign.
  if (credentials == nullptr || credentials->uid != euid_) {
    counters_.dropped_foreign_user.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  uint8_t* bytes = ring_->buffers[i].bytes;
  const size_t length = ring_->msgs[i].msg_len;
  HandoverHeader header;
  bool ok = (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 && length >= sizeof header;
  if (ok) {
    std::memcpy(&header, bytes, sizeof header);
    ok = header.magic == kHandoverMagic && header.version == kHandoverVersion &&
         header.length == length - sizeof header;
  }
  if (!ok) {
    counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  out.source = header.source;
  out.source_port = header.source_port;
  out.destination = header.destination;
  out.from_slot = header.from_slot;
  out.packet = std::span<uint8_t>(bytes + sizeof header, header.length);
  return true;
}

}  // namespace softrdma::transport::udp
